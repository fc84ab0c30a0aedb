"""`tools/call` served without the SDK's per-request machinery (see `exposers.direct`), in both protocol eras.

The reply is plain JSON when nothing comes before the result, which is the common case. As soon as the call has
something to say first (progress, a log message, a request of the upstream), the reply becomes an SSE stream of
those messages that ends with the result, as the SDK's own reply would.
- Handshake era: the call belongs to a session. The client answers a request of ours in a POST of its own, which
  the direct path hands to `Answers.deliver`, and cancels with `notifications/cancelled`.
- 2026-07-28: the request stands alone. An error carries the HTTP status of the spec's table; the client cancels
  by closing the connection; a call silent for `PING_INTERVAL` turns its reply into a stream kept open by pings
  (so a proxy's idle timeout does not cut it); an upstream's questions become `input_required` rounds
  (`InputRounds`) when an upstream of the handshake era could ask any.

The result is the upstream's raw wire dict after the hooks, not re-validated (DESIGN: no re-validation in a
proxy). `resultType`, a 2026-07-28 field, is dropped for the handshake era and set for 2026-07-28, where the
result also carries Triad's `serverInfo` in `_meta`, as the SDK's results do.
"""

from __future__ import annotations

import asyncio
import itertools
import logging
import warnings
from collections.abc import Mapping

import anyio
import mcp_types as types
from mcp.shared.exceptions import MCPDeprecationWarning
from mcp.shared.inbound import ERROR_CODE_HTTP_STATUS
from mcp_types import PROTOCOL_VERSION_META_KEY
from pydantic import ValidationError
from starlette.types import Receive, Send

from consumers import JSON, Answer, JSONObject, dumps
from exposers.input_rounds import InputRounds
from exposers.relay import cannot_ask, envelope_capabilities, envelope_log_level
from exposers.request import ClientRequest, serve
from exposers.server import complete, error_data, stamp_server_info
from exposers.sessions import DownstreamSession, wants_log
from gateway.calls import Dispatcher

logger = logging.getLogger("triad.exposer")

PING_INTERVAL = 15.0
"""A 2026-07-28 call silent this long gets a stream with a keep-alive comment this often (the SDK's interval)."""
_GUARDS: set[asyncio.Task[None]] = set()
"""The guards of calls in flight (the event loop keeps only weak references to tasks)."""


class Answers:
    """Requests Triad sent to clients on call streams, waiting for the answer the client POSTs."""

    def __init__(self) -> None:
        self._ids = itertools.count(1)
        self._waiting: dict[tuple[str, str], tuple[anyio.Event, list[JSONObject]]] = {}

    def deliver(self, session_id: str, message: JSONObject) -> bool:
        """Hand a client's response to the request waiting for it; False when no request of ours has its id."""
        found = self._waiting.get((session_id, message["id"])) if isinstance(message["id"], str) else None
        if found is None:
            return False
        found[1].append(message)
        found[0].set()
        return True

    async def ask(self, session_id: str, message: JSONObject, reply: Reply) -> JSONObject:
        """Send `message` as a request on `reply` and wait for the client's response."""
        key = (session_id, f"triad-ask-{next(self._ids)}")
        answered, replies = self._waiting[key] = (anyio.Event(), [])
        try:
            await reply.event({"jsonrpc": "2.0", "id": key[1], **message})
            await answered.wait()
        finally:
            del self._waiting[key]
        return replies[0]


class Reply:
    """The wire side of one call's answer: JSON, or an SSE stream once something comes before the result."""

    def __init__(self, send: Send, headers: list[tuple[bytes, bytes]]) -> None:
        self._send = send
        self._headers = headers
        self._streaming = False
        self._lock = anyio.Lock(fast_acquire=True)  # rarely contended: no checkpoint when free (CPU per call)
        self.finished = False

    async def event(self, message: JSONObject) -> None:
        await self._stream(_sse(dumps(message)))

    async def ping(self) -> None:
        await self._stream(b": ping\r\n\r\n")

    async def _stream(self, chunk: bytes) -> None:
        async with self._lock:
            if self.finished:  # a late log or ping: the reply has ended
                return
            if not self._streaming:
                await self._start_stream()
            await self._send({"type": "http.response.body", "body": chunk, "more_body": True})

    async def finish(self, response: bytes | None, status: int = 200) -> None:
        """Send the JSON-RPC response and end the reply (`status` only when it is not a stream yet). None: the call
        was cancelled, and its reply stream ends without one, as the SDK's does."""
        async with self._lock:
            self.finished = True
            if response is not None and not self._streaming:
                await send_json(self._send, response, self._headers, status)
                return
            if not self._streaming:
                await self._start_stream()
            await self._send({"type": "http.response.body", "body": _sse(response) if response else b""})

    async def _start_stream(self) -> None:
        self._streaming = True
        await self._send({"type": "http.response.start", "status": 200, "headers": [
            (b"content-type", b"text/event-stream"), (b"cache-control", b"no-cache, no-transform"), *self._headers]})


class _CallRelay:
    """A call's `consumers.Downstream`: the upstream's logs and progress go out on the call's reply."""

    modern: bool
    log_level: str | None
    capabilities: JSONObject | None

    def __init__(self, reply: Reply, params: Mapping[str, JSON]) -> None:
        self.reply = reply
        self.params = params
        self.cancellation: JSONObject | None = None
        """Set by the direct path from the client's `notifications/cancelled`, before it cancels the call."""
        meta = params.get("_meta")
        self.progress_token = meta.get("progressToken") if isinstance(meta, dict) else None

    async def log(self, params: types.LoggingMessageNotificationParams) -> None:
        if not wants_log(params.level, self.log_level):
            return
        with warnings.catch_warnings():  # the model is deprecated in 2026-07-28, still relayed where asked for
            warnings.simplefilter("ignore", MCPDeprecationWarning)
            dumped = params.model_dump(by_alias=True, mode="json", exclude_none=True)
        await self.reply.event({"jsonrpc": "2.0", "method": "notifications/message", "params": dumped})

    async def progress(self, params: JSONObject) -> None:
        await self.reply.event({"jsonrpc": "2.0", "method": "notifications/progress",
                                "params": {**params, "progressToken": self.progress_token}})


class SessionCallRelay(_CallRelay):
    """A call of a handshake-era session: the session's log level; the upstream's requests asked on the reply."""

    modern = False

    def __init__(self, reply: Reply, params: Mapping[str, JSON], session: DownstreamSession,
                 answers: Answers) -> None:
        super().__init__(reply, params)
        self._session = session
        self._answers = answers

    @property
    def log_level(self) -> str | None:  # type: ignore[override]
        return self._session.log_level

    @property
    def capabilities(self) -> JSONObject | None:  # type: ignore[override]
        return self._session.capabilities

    async def ask(self, request: types.ServerRequest, result_type: type[Answer]) -> Answer | types.ErrorData:
        message = request.model_dump(by_alias=True, mode="json", exclude_none=True)
        session_id = self._session.id
        assert session_id is not None, "the direct path serves only requests of a session it looked up by its id"
        reply = await self._answers.ask(session_id, message, self.reply)
        if "error" in reply:
            try:
                return types.ErrorData.model_validate(reply["error"])
            except ValidationError:
                return types.ErrorData(code=types.INVALID_REQUEST, message="the client answered with a malformed error")
        try:
            return result_type.model_validate(reply.get("result"), by_name=False)
        except ValidationError as exc:
            return types.ErrorData(code=types.INVALID_PARAMS,
                                   message=f"the client's answer to {request.method} is not valid: {exc.errors()[:3]}")


class ModernCallRelay(_CallRelay):
    """A 2026-07-28 request: the envelope's log level and capabilities; no requests to the client."""

    modern = True

    @property
    def log_level(self) -> str | None:  # type: ignore[override]
        return envelope_log_level(self.params)

    @property
    def capabilities(self) -> JSONObject | None:  # type: ignore[override]
        return envelope_capabilities(self.params)

    async def ask(self, request: types.ServerRequest, result_type: type[Answer]) -> Answer | types.ErrorData:
        meta = self.params.get("_meta") or {}
        return cannot_ask(request.method, str(meta.get(PROTOCOL_VERSION_META_KEY)))


async def serve_call(dispatcher: Dispatcher, request: ClientRequest, request_id: types.RequestId, reply: Reply,
                     cancel: anyio.CancelScope, receive: Receive) -> None:
    """A handshake-era call: served by the runner, answered on `reply` (unless cancelled). The client cancels
    with `notifications/cancelled` (`cancel`), or by closing the connection: Triad keeps no event store, so a reply
    whose connection is gone could never be resumed, and the upstream call is cancelled with it."""
    body: bytes | None = None
    _start_guard(receive, reply, cancel)
    with cancel:
        try:
            result = await serve(dispatcher, None, request)
            assert result is not None  # without `answer_first`, serve always has the result
            result.pop("resultType", None)
            body = _response(request_id, {"result": result})
        except Exception as exc:
            error = error_data(request.method, exc, dispatcher.config.secret_mask())
            body = _response(request_id, {"error": _dump(error)})
    await reply.finish(body)


async def serve_modern_call(dispatcher: Dispatcher, rounds: InputRounds | None, request: ClientRequest,
                            request_id: types.RequestId, reply: Reply, receive: Receive,
                            server_info: Mapping[str, JSON]) -> None:
    """A 2026-07-28 call: served by the runner (in input rounds when a handshake-era upstream could ask
    something), answered with the status its outcome maps to; a client that closes the connection cancels it."""

    async def answer(result: JSONObject) -> None:
        await reply.finish(_response(request_id, {"result": stamp_server_info(complete(result), server_info)}))

    with _start_guard(receive, reply, anyio.CancelScope()):
        try:
            found = await serve(dispatcher, rounds, request, answer_first=answer)
            if found is not None:  # else a question was asked already, and the retry gets the result
                await answer(found)
        except Exception as exc:
            error = error_data(request.method, exc, dispatcher.config.secret_mask())
            if not reply.finished:
                await reply.finish(_response(request_id, {"error": _dump(error)}),
                                   ERROR_CODE_HTTP_STATUS.get(error.code, 200))


def _start_guard(receive: Receive, reply: Reply, call: anyio.CancelScope) -> anyio.CancelScope:
    """Start the guard of a call that runs in `call` (returned). A plain task, not a task group: the guard ends by
    itself once the reply is complete, and a task group's scopes cost more CPU per call than the rest of this
    module's work for it."""
    guard = asyncio.get_running_loop().create_task(_guard(receive, reply, call))
    _GUARDS.add(guard)
    guard.add_done_callback(_guard_done)
    return call


def _guard_done(guard: asyncio.Task[None]) -> None:
    _GUARDS.discard(guard)
    if not guard.cancelled() and (failure := guard.exception()) is not None:  # e.g. a ping to a client gone
        logger.debug("a call's connection guard ended: %r", failure)


async def _guard(receive: Receive, reply: Reply, call: anyio.CancelScope) -> None:
    """Cancel the call when its client goes away; keep a silent call's stream open with pings. Ends by itself once
    the reply is complete: uvicorn then answers `receive()` with `http.disconnect` (no cancellation needed, which
    anyio makes costly)."""
    while True:
        with anyio.move_on_after(PING_INTERVAL):
            while (await receive())["type"] != "http.disconnect":
                pass
            if not reply.finished:
                call.cancel()
            return
        await reply.ping()


async def send_json(send: Send, body: bytes, headers: list[tuple[bytes, bytes]], status: int = 200) -> None:
    """A whole JSON response (a reply that is not a stream)."""
    await send({"type": "http.response.start", "status": status, "headers": [
        (b"content-type", b"application/json"), (b"content-length", str(len(body)).encode()), *headers]})
    await send({"type": "http.response.body", "body": body})


def _dump(error: types.ErrorData) -> JSONObject:
    return error.model_dump(by_alias=True, mode="json", exclude_none=True)


def _response(request_id: types.RequestId, outcome: JSONObject) -> bytes:
    return dumps({"jsonrpc": "2.0", "id": request_id, **outcome})


def _sse(data: bytes) -> bytes:
    return b"event: message\r\ndata: " + data + b"\r\n\r\n"
