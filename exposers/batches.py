"""JSON-RPC batches on `/mcp`, for the one revision that has them, and ids that make no request.

MCP 2025-03-26 says a server MUST accept a POST whose body is a JSON array of requests and notifications (the
later revisions removed batches, and the SDK's transport refuses every array with HTTP 400; so does Triad for a
session of any other revision, and for a batch without a session: `initialize` MUST NOT be part of one).
`Batches` takes a 2025-03-26 session's batch apart: each message goes on, alone, through the rest of the `/mcp`
stack (quotas, the direct path, strict JSON, the SDK) as if it had been POSTed by itself, concurrently, and the
answers come back as one event stream, each message's events as they arrive; a batch of notifications and
responses only gets 202. At most `MAX_BATCH` messages; a longer batch is refused with an error naming the bound.

A request whose `id` is `null`, a fraction or a boolean is no request (JSON-RPC 2.0: a string or a number, and
MCP: a string or an integer), and no notification either (it has an id); the SDK took it for one (202, no answer).
It gets HTTP 400 and error -32600, id null, on every revision.

Ownership: `build_app` puts `Batches` in front of `Admission`, behind the bearer check (the identity is in the
scope, and each part keeps it).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable

import anyio
import mcp_types as types
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from consumers import JSON, dumps
from exposers._wire import INVALID_ID, ParseError, error_body, invalid_id, parse_scoped, read_body, replay
from exposers.sessions import Sessions

BATCH_REVISION = "2025-03-26"
"""The only revision with batches."""
_Event = Callable[[bytes], Awaitable[None]]
"""Where a part's answers go: each JSON-RPC message's text."""
MAX_BATCH = 64
"""Messages in one batch: each is a request of its own (quotas apply to each); real clients batch a few."""


class Batches:
    def __init__(self, app: ASGIApp, sessions: Sessions, max_body: int) -> None:
        self.app = app
        self._sessions = sessions
        self._max_body = max_body

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or scope["method"] != "POST":
            await self.app(scope, receive, send)
            return
        read = await read_body(receive, self._max_body)
        if read is None:
            return
        body, more = read
        if more or body.lstrip()[:1] not in (b"[", b"{"):
            await self.app(scope, replay(body, more, receive), send)
            return
        try:
            value = parse_scoped(scope, body)
        except ParseError:
            value = None  # StrictJson answers it
        if isinstance(value, dict) and invalid_id(value):
            await _answer(send, 400, error_body(types.INVALID_REQUEST, INVALID_ID))
        elif isinstance(value, list) and self._batch_revision(scope):
            await self._serve(scope, value, send)
        else:
            await self.app(scope, replay(body, False, receive), send)

    def _batch_revision(self, scope: Scope) -> bool:
        session_id = next((v for k, v in scope["headers"] if k == b"mcp-session-id"), None)
        session = self._sessions.get(session_id.decode(errors="replace")) if session_id else None
        return session is not None and session.protocol_version == BATCH_REVISION

    async def _serve(self, scope: Scope, batch: list[JSON], send: Send) -> None:
        if not batch or len(batch) > MAX_BATCH:
            reason = "an empty batch" if not batch else f"a batch of more than {MAX_BATCH} messages (MAX_BATCH)"
            await _answer(send, 400, error_body(types.INVALID_REQUEST, f"Invalid request: {reason}"))
            return
        if not any(isinstance(m, dict) and "method" in m and "id" in m for m in batch):
            async with anyio.create_task_group() as tg:
                for message in batch:
                    tg.start_soon(self._part, scope, message, _discard)
            await _answer(send, 202, b"")
            return
        await send({"type": "http.response.start", "status": 200, "headers": [
            (b"content-type", b"text/event-stream"), (b"cache-control", b"no-cache, no-transform")]})
        lock = anyio.Lock()

        async def event(data: bytes) -> None:
            async with lock:
                await send({"type": "http.response.body", "body": b"event: message\r\ndata: " + data + b"\r\n\r\n",
                            "more_body": True})

        async with anyio.create_task_group() as tg:
            for message in batch:
                tg.start_soon(self._part, scope, message, event)
        await send({"type": "http.response.body", "body": b""})

    async def _part(self, scope: Scope, message: JSON, event: _Event) -> None:
        """One message of a batch through the rest of the stack; each JSON-RPC message it is answered with (a
        JSON body, or an event stream's data) goes to `event`."""
        body = dumps(message)
        headers = [(k, v) for k, v in scope["headers"] if k not in (b"content-length", b"accept")]
        part = {**scope, "headers": [*headers, (b"content-length", str(len(body)).encode()),
                                     (b"accept", b"application/json, text/event-stream")]}
        part.pop("triad.parsed", None)
        answer = _Answer(event)
        sent = False
        never = anyio.Event()

        async def receive() -> Message:
            """The part's body, then nothing: the batch's client is watched by the batch's own response."""
            nonlocal sent
            if not sent:
                sent = True
                return {"type": "http.request", "body": body, "more_body": False}
            await never.wait()
            return {"type": "http.disconnect"}

        await self.app(part, receive, answer.send)
        await answer.finish()


async def _discard(_data: bytes) -> None:
    pass


class _Answer:
    """The `send` of one part: its JSON body, or each `data:` of its event stream, handed on as it comes."""

    def __init__(self, event: _Event) -> None:
        self._event = event
        self._stream = False
        self._buffer = b""

    async def send(self, message: Message) -> None:
        if message["type"] == "http.response.start":
            content_type = next((v for k, v in message.get("headers", []) if k.lower() == b"content-type"), b"")
            self._stream = content_type.startswith(b"text/event-stream")
            return
        if message["type"] != "http.response.body":
            return
        self._buffer += message.get("body", b"")
        if self._stream:
            *events, self._buffer = self._buffer.replace(b"\r\n", b"\n").split(b"\n\n")
            for block in events:
                data = b"\n".join(line[5:].lstrip() for line in block.split(b"\n") if line.startswith(b"data:"))
                if data.strip():
                    await self._event(data)

    async def finish(self) -> None:
        if not self._stream and self._buffer.strip():
            await self._event(self._buffer)


async def _answer(send: Send, status: int, body: bytes) -> None:
    await send({"type": "http.response.start", "status": status, "headers": [
        (b"content-type", b"application/json"), (b"content-length", str(len(body)).encode())]})
    await send({"type": "http.response.body", "body": body})
