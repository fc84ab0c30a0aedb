"""`tools/call` of handshake-era HTTP sessions, served without the SDK's per-request machinery (see `fast_path`).

The reply is plain JSON when nothing comes before the result, which is the common case. As soon as the call has
something to say first (progress, a log message, a sampling, elicitation or roots request of the upstream), the
reply becomes an SSE stream of those messages that ends with the result, as the SDK's own reply would. The client
answers a request of ours in a POST of its own, which `fast_path` hands to `Answers.deliver`.

The result is the upstream's raw wire dict after the hooks, not re-validated (DESIGN: no re-validation in a
proxy); only `resultType`, which exists from 2026-07-28 on, is dropped, as the SDK drops it for these versions.
"""

from __future__ import annotations

import itertools
import json
import warnings
from typing import Any

import anyio
import mcp_types as types
from mcp.shared.exceptions import MCPDeprecationWarning
from pydantic import ValidationError
from starlette.types import Send

from consumers import CURRENT_DOWNSTREAM
from exposers.relay import LEVELS, LOG_LEVEL_STATE_KEY, declared_capabilities, wants_log
from exposers.server import error_data, hook_session
from gateway.dispatch import Dispatcher
from gateway.identity import Identity

CALL_PARAMS = frozenset({"name", "arguments", "_meta"})
"""The params a plain `tools/call` carries; anything more (a task, say) is left to the SDK."""


class Answers:
    """Requests Triad sent to clients on call streams, waiting for the answer the client POSTs."""

    def __init__(self) -> None:
        self._ids = itertools.count(1)
        self._waiting: dict[tuple[str, str], tuple[anyio.Event, list[dict[str, Any]]]] = {}

    def deliver(self, session_id: str, message: dict[str, Any]) -> bool:
        """Hand a client's response to the request waiting for it; False when no request of ours has its id."""
        found = self._waiting.get((session_id, message["id"])) if isinstance(message["id"], str) else None
        if found is None:
            return False
        found[1].append(message)
        found[0].set()
        return True

    async def ask(self, session_id: str, message: dict[str, Any], write: Any) -> dict[str, Any]:
        """Send `message` as a request through `write` and wait for the client's response."""
        key = (session_id, f"triad-ask-{next(self._ids)}")
        answered, replies = self._waiting[key] = (anyio.Event(), [])
        try:
            await write({"jsonrpc": "2.0", "id": key[1], **message})
            await answered.wait()
        finally:
            del self._waiting[key]
        return replies[0]


class CallReply:
    """One call's way back to its client, and its `consumers.Downstream` for the upstream's messages."""

    modern = False

    def __init__(self, send: Send, request_id: Any, params: dict[str, Any], connection: Any, answers: Answers,
                 headers: list[tuple[bytes, bytes]]) -> None:
        self._send = send
        self._id = request_id
        meta = params.get("_meta")
        self.progress_token = meta.get("progressToken") if isinstance(meta, dict) else None
        self._connection = connection
        self._answers = answers
        self._headers = headers
        self._streaming = False
        self._lock = anyio.Lock()

    @property
    def log_level(self) -> str:
        return self._connection.state.get(LOG_LEVEL_STATE_KEY) or LEVELS[0]

    @property
    def capabilities(self) -> dict[str, Any] | None:
        return declared_capabilities(self._connection)

    async def log(self, params: types.LoggingMessageNotificationParams) -> None:
        if not wants_log(params.level, self.log_level):
            return
        with warnings.catch_warnings():  # the model is deprecated in 2026-07-28, still relayed for these clients
            warnings.simplefilter("ignore", MCPDeprecationWarning)
            dumped = params.model_dump(by_alias=True, mode="json", exclude_none=True)
        await self._event({"jsonrpc": "2.0", "method": "notifications/message", "params": dumped})

    async def progress(self, value: float, total: float | None, message: str | None) -> None:
        params = {"progressToken": self.progress_token, "progress": value, "total": total, "message": message}
        await self._event({"jsonrpc": "2.0", "method": "notifications/progress",
                           "params": {key: v for key, v in params.items() if v is not None}})

    async def ask(self, request: Any, result_type: Any) -> Any:
        message = request.model_dump(by_alias=True, mode="json", exclude_none=True)
        reply = await self._answers.ask(self._connection.session_id, message, self._event)
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

    async def _event(self, message: dict[str, Any]) -> None:
        async with self._lock:
            if not self._streaming:
                await self._start_stream()
            await self._send({"type": "http.response.body", "body": _sse(message), "more_body": True})

    async def finish(self, response: bytes | None) -> None:
        """Send the JSON-RPC response and end the reply. None: the call was cancelled, and its reply stream ends
        without one, as the SDK's does."""
        async with self._lock:
            if response is not None and not self._streaming:
                await self._send({"type": "http.response.start", "status": 200, "headers": [
                    (b"content-type", b"application/json"), (b"content-length", str(len(response)).encode()),
                    *self._headers]})
                await self._send({"type": "http.response.body", "body": response})
                return
            if not self._streaming:
                await self._start_stream()
            await self._send({"type": "http.response.body", "body": _sse_bytes(response) if response else b""})

    async def _start_stream(self) -> None:
        self._streaming = True
        await self._send({"type": "http.response.start", "status": 200, "headers": [
            (b"content-type", b"text/event-stream"), (b"cache-control", b"no-cache, no-transform"), *self._headers]})


async def serve_call(dispatcher: Dispatcher, identity: Identity, message: dict[str, Any], reply: CallReply,
                     connection: Any, cancel: anyio.CancelScope) -> None:
    """Run the call through the dispatcher with `reply` as its downstream, and answer it (unless cancelled)."""
    params = message["params"]
    token = CURRENT_DOWNSTREAM.set(reply)
    body: bytes | None = None
    try:
        with cancel:
            try:
                result = await dispatcher.call_tool(
                    identity, params, reply.progress if reply.progress_token is not None else None,
                    hook_session(connection))
                result.pop("resultType", None)
                body = _response(message["id"], {"result": result})
            except Exception as exc:
                error = error_data("tools/call", exc)
                body = _response(message["id"], {"error": error.model_dump(by_alias=True, mode="json",
                                                                           exclude_none=True)})
    finally:
        CURRENT_DOWNSTREAM.reset(token)
    await reply.finish(body)


def _response(request_id: Any, outcome: dict[str, Any]) -> bytes:
    return json.dumps({"jsonrpc": "2.0", "id": request_id, **outcome}, separators=(",", ":")).encode()


def _sse(message: dict[str, Any]) -> bytes:
    return _sse_bytes(json.dumps(message, separators=(",", ":")).encode())


def _sse_bytes(data: bytes) -> bytes:
    return b"event: message\r\ndata: " + data + b"\r\n\r\n"
