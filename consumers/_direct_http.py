"""Triad's own request path to a streamable-HTTP upstream of the handshake era: one POST, its reply read as bytes.

The SDK's client session stays in charge of the connection (the handshake, the GET stream, lists, pings); calls,
reads and gets take the direct path instead, because on the call path the SDK's generic machinery (a dozen task
spawns, memory streams, validation of every message) cost more than the rest of Triad together (see `bench/`).
It uses aiohttp, not the SDK's httpx2: about a third of the CPU per request (0.4 against 1.2 ms here). It sends
the request on the session the SDK opened, over keep-alive connections of its own, and reads the answer:
plain JSON, or an SSE stream that may carry, before the result, progress and log notifications and the
upstream's own requests (sampling, elicitation, roots), which are answered by a POST of their own, exactly as the
SDK does. Results are raw wire dicts, never re-validated.
"""

from __future__ import annotations

import contextlib
import itertools
import logging
import ssl
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, field
from typing import Protocol

import aiohttp
import anyio
import anyio.lowlevel
import mcp_types as types
from anyio.abc import TaskGroup
from mcp.shared.exceptions import MCPError
from opentelemetry.trace import StatusCode
from pydantic import ValidationError

from consumers._errors import UNAVAILABLE_STATUSES, HopBroken, HopUnavailable, SessionGone
from consumers._http_rules import HTTP_RULES, env_proxy, redirect_refused
from consumers._json import JSON, JSONObject, dumps, loads
from consumers._spans import request_span
from consumers.relay import Downstream, ProgressFn, UpstreamRequest, ask_wire

logger = logging.getLogger("triad.upstream")

TAIL_WAIT = 0.05
"""After the result, how long the upstream may take to end its reply stream before the read is cut."""
CANCEL_TIMEOUT = 2.0
"""How long telling the upstream that a request was cancelled may take."""
DEFAULT_RETRY_MS = 1000
"""The wait before taking up a reply stream again when the upstream named none (SSE `retry:`)."""
MAX_RETRY_MS = 30_000
MAX_RESUMES = 5
"""How often a reply stream that ends before its result is taken up again (each bounded by the call's deadline)."""
MAX_MESSAGE = 64 * 2**20
"""The largest message an upstream may send on a reply (a base64 image or a long document fits many times)."""
ASKED_FOR = {"sampling/createMessage": "sampling", "elicitation/create": "elicitation", "roots/list": "roots"}
"""The capability an upstream's request needs its session to have declared."""
OwnRoots = Callable[[], Awaitable[JSONObject]]
"""A session's own answer to `roots/list` (`{"result": ...}` or `{"error": ...}`), where it is not relayed."""


@dataclass
class HttpLink:
    """What the direct path needs of an HTTP upstream's connection; the transport fills in the session id."""

    url: str
    client: aiohttp.ClientSession
    oauth: LinkAuth | None = None
    """The upstream's OAuth token source (`consumers.oauth`), for an upstream with `auth`."""
    authorization: str | None = None
    """The `Authorization` value the last request went out with."""
    session_id: str | None = None
    listening: anyio.Event = field(default_factory=anyio.Event)
    """Set once the SDK's GET stream for the upstream's own messages was answered (open, or refused: the upstream
    has none): from then on, what the upstream says outside requests reaches Triad."""

    def direct(self, protocol_version: str, on_notification: Callable[[str, JSONObject], None],
               declared: frozenset[str] = frozenset(), own_roots: OwnRoots | None = None) -> DirectHttp:
        return DirectHttp(self, protocol_version, on_notification, declared, own_roots)


class LinkAuth(Protocol):
    """What the direct path needs of an OAuth token source (`consumers.oauth.UpstreamOAuth`)."""

    async def authorization(self) -> str | None: ...

    async def challenged(self, status: int, www_authenticate: str | None, rejected: str | None) -> str | None: ...


@contextlib.asynccontextmanager
async def open_link(url: str, headers: dict[str, str], connect_timeout: float, tls: ssl.SSLContext,
                    oauth: LinkAuth | None = None) -> AsyncIterator[HttpLink]:
    """The direct path's own keep-alive client for one upstream. Its requests are bounded by each call's deadline;
    only connecting has a timeout of its own. `tls`: the context the upstream's SDK session verifies with too
    (`consumers.transports.ssl_context`)."""
    timeout = aiohttp.ClientTimeout(total=None, sock_connect=connect_timeout)
    async with aiohttp.ClientSession(headers=headers, timeout=timeout, proxy=env_proxy(url),
                                     connector=aiohttp.TCPConnector(ssl=tls)) as client:
        yield HttpLink(url, client, oauth)


class DirectHttp:
    def __init__(self, link: HttpLink, protocol_version: str, on_notification: Callable[[str, JSONObject], None],
                 declared: frozenset[str] = frozenset(), own_roots: OwnRoots | None = None) -> None:
        self._link = link
        self._declared = declared
        self._own_roots = own_roots
        self._version = protocol_version
        self._on_notification = on_notification
        self._ids = itertools.count(1)

    def _headers(self) -> dict[str, str]:
        headers = {"content-type": "application/json", "accept": "application/json, text/event-stream",
                   "mcp-protocol-version": self._version}
        if self._link.session_id is not None:
            headers["mcp-session-id"] = self._link.session_id
        if self._link.authorization is not None:
            headers["authorization"] = self._link.authorization
        return headers

    async def request(self, request: UpstreamRequest, on_progress: ProgressFn,
                      downstream: Downstream | None) -> JSONObject:
        """Send one request and return its raw result; a JSON-RPC error raises `MCPError`, as the SDK's does."""
        request_id = f"triad-{next(self._ids)}"
        message = request.model_dump(by_alias=True, mode="json", exclude_none=True)
        params = message.setdefault("params", {})
        params["_meta"] = {**(params.get("_meta") or {}), "progressToken": request_id}
        trace: dict[str, str] = {}
        with request_span(message, request_id, trace) as span:
            body = dumps({"jsonrpc": "2.0", "id": request_id, **message})
            try:
                return await self._request(body, request_id, on_progress, downstream, trace)
            except MCPError as exc:
                if span is not None:
                    span.set_attributes({"error.type": str(exc.error.code),
                                         "rpc.response.status_code": str(exc.error.code)})
                    span.set_status(StatusCode.ERROR, exc.error.message)
                raise
            except aiohttp.ClientError as exc:
                raise HopBroken(connect=isinstance(exc, aiohttp.ClientConnectorError)) from exc

    async def _request(self, body: bytes, request_id: str, on_progress: ProgressFn,
                       downstream: Downstream | None, trace: dict[str, str]) -> JSONObject:
        try:
            async with self._post(body, trace) as response:
                if response.status == 404:
                    raise SessionGone
                if response.status in UNAVAILABLE_STATUSES:
                    raise HopUnavailable(response.status)
                if 300 <= response.status < 400:
                    raise MCPError(code=types.INTERNAL_ERROR, message=redirect_refused(response.status,
                                                                                       response.headers))
                if response.status >= 400:
                    text = (await response.content.read(200)).decode(errors="replace")  # bounded: a message, not a body
                    raise MCPError(code=types.INTERNAL_ERROR, message=f"HTTP {response.status}: {text}")
                if response.content_type == "text/event-stream":
                    stream = _Stream()
                    reply = await self._read_stream(response, stream, request_id, on_progress, downstream)
                    if reply is None:
                        reply = await self._resume(stream, request_id, on_progress, downstream)
                else:
                    reply = loads(await _read_whole(response))
        except anyio.get_cancelled_exc_class():
            with anyio.move_on_after(CANCEL_TIMEOUT, shield=True):
                # The SDK's server cancels a call before it hands on the client's notification, which Triad
                # keeps (`exposers.sessions.DownstreamSession.keep_cancellation`): that runs first, then what
                # the client said is read.
                await anyio.lowlevel.checkpoint()
                said = (downstream.cancellation if downstream is not None else None) or {}
                await self._send({"jsonrpc": "2.0", "method": "notifications/cancelled", "params": {
                    "reason": "cancelled by Triad's caller", **said, "requestId": request_id}})
            raise
        return _result_of(reply)

    @contextlib.asynccontextmanager
    async def _post(self, body: bytes, trace: dict[str, str] | None = None) -> AsyncIterator[aiohttp.ClientResponse]:
        """The POST, sent a second time when a pooled connection turns out closed before the upstream answered
        anything (an idle keep-alive connection the upstream closed at that moment). With OAuth, sent again once
        after a 401 or a 403 `insufficient_scope` that the token source could answer with a new token."""
        oauth = self._link.oauth
        if oauth is not None:
            self._link.authorization = await oauth.authorization()
        challenged = resent = False
        while True:
            try:
                response = await self._link.client.post(self._link.url, data=body,
                                                        headers={**self._headers(), **(trace or {})},
                                                        allow_redirects=HTTP_RULES.follow_redirects)
            except (aiohttp.ServerDisconnectedError, aiohttp.ClientOSError):
                if resent:
                    raise
                resent = True
                continue
            if oauth is not None and not challenged and _challenge(response):
                challenged = True
                rejected = self._link.authorization
                renewed = await oauth.challenged(response.status, response.headers.get("www-authenticate"), rejected)
                if renewed is not None and renewed != rejected:
                    response.release()
                    self._link.authorization = renewed
                    continue
            try:
                yield response
            finally:
                response.release()
            return

    async def _resume(self, stream: _Stream, request_id: str, on_progress: ProgressFn,
                      downstream: Downstream | None) -> JSONObject:
        """The upstream ended the reply stream before the result (SEP-1699): wait the `retry` it asked for, then
        GET the stream again from the last event seen, as often as it keeps ending early."""
        for _ in range(MAX_RESUMES):
            if stream.last_id is None:
                break
            await anyio.sleep(stream.retry_ms / 1000)
            headers = {**self._headers(), "accept": "text/event-stream", "last-event-id": stream.last_id}
            async with self._link.client.get(self._link.url, headers=headers,
                                             allow_redirects=HTTP_RULES.follow_redirects) as response:
                if response.status != 200 or response.content_type != "text/event-stream":
                    break
                reply = await self._read_stream(response, stream, request_id, on_progress, downstream)
            if reply is not None:
                return reply
        raise MCPError(code=types.CONNECTION_CLOSED, message="the upstream ended its reply without a result")

    async def _read_stream(self, response: aiohttp.ClientResponse, stream: _Stream, request_id: str,
                           on_progress: ProgressFn, downstream: Downstream | None) -> JSONObject | None:
        reply: JSONObject | None = None
        events = _Events(stream)
        # The upstream's own requests are answered side by side (it may ask several questions at once, each
        # waiting for its client), and the stream read on meanwhile; once the result is in, they are moot. Their
        # task group is opened at the first one: most replies carry none, and a task group costs CPU per call.
        failure: Exception | None = None
        async with contextlib.AsyncExitStack() as answering:
            answers: TaskGroup | None = None
            try:
                async for chunk in response.content.iter_any():
                    for message in events.feed(chunk):
                        if message.get("id") == request_id and "method" not in message:
                            reply = message
                            break
                        if "id" in message and isinstance(message.get("method"), str):
                            if answers is None:
                                answers = await answering.enter_async_context(anyio.create_task_group())
                            answers.start_soon(self._answer, message, downstream)
                        else:
                            await self._pass_on(message, request_id, on_progress, downstream)
                    if reply is not None:
                        break
            except Exception as exc:  # raised as itself below, not wrapped in the answers' ExceptionGroup
                failure = exc
            if answers is not None and (reply is not None or failure is not None):
                answers.cancel_scope.cancel()
        if failure is not None:
            raise failure
        if reply is not None and not response.content.at_eof():
            # Read to the end of the stream (the upstream ends it after the result) so the connection goes back to
            # the pool; an upstream that keeps it open a moment longer, or breaks it, loses it (the result stands).
            with anyio.move_on_after(TAIL_WAIT), contextlib.suppress(aiohttp.ClientError, OSError):
                while await response.content.readany():
                    pass
        return reply

    async def _pass_on(self, message: JSONObject, request_id: str, on_progress: ProgressFn,
                       downstream: Downstream | None) -> None:
        """A notification on a call's reply stream: its progress and logs to the call's client, the rest (list
        changes, updates) to the upstream's own handling."""
        method, found = message.get("method"), message.get("params")
        if not isinstance(method, str):
            return
        params: JSONObject = found if isinstance(found, dict) else {}
        if method == "notifications/progress" and params.get("progressToken") == request_id:
            await on_progress({key: value for key, value in params.items() if key != "progressToken"})
        elif method == "notifications/message" and downstream is not None:
            try:
                log = types.LoggingMessageNotificationParams.model_validate(params, by_name=False)
            except ValidationError:
                logger.debug("an upstream sent a malformed log message")
            else:
                await downstream.log(log)
        else:
            self._on_notification(method, params)

    async def _answer(self, message: JSONObject, downstream: Downstream | None) -> None:
        """The upstream's own request, mid-call: asked of the client whose call this is, answered by a POST."""
        method, found = message["method"], message.get("params")
        params: JSONObject = found if isinstance(found, dict) else {}
        capability = ASKED_FOR.get(method)
        if capability is not None and capability not in self._declared:  # as the SDK's session answers it
            answer: JSONObject = {"error": {"code": types.MISSING_REQUIRED_CLIENT_CAPABILITY, "message": (
                f"this session did not declare the {capability} capability (a client's own session declares what "
                f"its client declared), so Triad does not send {method}"),
                "data": {"requiredCapabilities": {capability: {}}}}}
        elif method == "roots/list" and self._own_roots is not None:  # a shared session's roots are its own
            answer = await self._own_roots()
        elif downstream is None:
            answer = {"error": {"code": types.METHOD_NOT_FOUND,
                                "message": f"{method}: no client call is waiting for it"}}
        else:
            answer = await ask_wire(downstream, {"method": method, "params": params})
        await self._send({"jsonrpc": "2.0", "id": message["id"], **answer})

    async def _send(self, message: JSONObject) -> None:
        """A response or notification to the upstream (it answers 202, no body)."""
        try:
            async with self._link.client.post(self._link.url, data=dumps(message),
                                              allow_redirects=HTTP_RULES.follow_redirects,
                                              headers=self._headers()) as response:
                await response.content.read(4096)  # an answer has none; more than this is not read (nor pooled)
        except aiohttp.ClientError as exc:
            logger.debug("could not send %s to an upstream: %s", message.get("method", "a response"), exc)


def _challenge(response: aiohttp.ClientResponse) -> bool:
    """A 401, or a 403 asking for more scope (RFC 6750 §3.1): what a token source can answer."""
    if response.status == 401:
        return True
    return response.status == 403 and "insufficient_scope" in response.headers.get("www-authenticate", "")


@dataclass
class _Stream:
    """Where a reply stream got to: its last event id and the reconnection delay the upstream asked for."""

    last_id: str | None = None
    retry_ms: int = DEFAULT_RETRY_MS


class _Events:
    """The JSON messages of an SSE stream, fed as it comes in chunks (cheaper than line by line, and a line may be
    as long as a message): `data:` lines joined per event; `id:` and `retry:` go to the stream's `_Stream`. A line
    over `MAX_MESSAGE` is refused with an error that says so."""

    def __init__(self, stream: _Stream) -> None:
        self._stream = stream
        self._data: list[bytes] = []
        self._data_size = 0
        self._partial: list[bytes] = []
        """The start of a line whose end has not come yet."""
        self._partial_size = 0

    def feed(self, chunk: bytes) -> list[JSONObject]:
        if b"\n" not in chunk:
            self._partial.append(chunk)
            self._partial_size += len(chunk)
            if self._partial_size > MAX_MESSAGE:
                raise _too_large()
            return []
        if self._partial:
            chunk, self._partial, self._partial_size = b"".join((*self._partial, chunk)), [], 0
        lines = chunk.split(b"\n")
        if last := lines.pop():
            self._partial, self._partial_size = [last], len(last)
        messages: list[JSONObject] = []
        for raw in lines:
            line = raw.rstrip(b"\r")
            if line:
                field, _, value = line.partition(b":")
                value = value.removeprefix(b" ")
                if field == b"data":
                    self._data.append(value)
                    self._data_size += len(value)
                    if self._data_size > MAX_MESSAGE:
                        raise _too_large()
                elif field == b"id":
                    self._stream.last_id = value.decode(errors="replace")
                elif field == b"retry" and value.isdigit():
                    self._stream.retry_ms = min(int(value), MAX_RETRY_MS)
                continue
            if self._data:
                text, self._data, self._data_size = b"\n".join(self._data), [], 0
                try:
                    message = loads(text) if text.strip() else None
                except ValueError:
                    logger.debug("an upstream sent a malformed SSE event")
                    continue
                if isinstance(message, dict):
                    messages.append(message)
        return messages


async def _read_whole(response: aiohttp.ClientResponse) -> bytes:
    """A JSON reply's body, refused with an error that says so beyond `MAX_MESSAGE`."""
    if (response.content_length or 0) > MAX_MESSAGE:
        raise _too_large()
    chunks, size = [], 0
    async for chunk in response.content.iter_any():
        size += len(chunk)
        if size > MAX_MESSAGE:
            raise _too_large()
        chunks.append(chunk)
    return b"".join(chunks)


def _too_large() -> MCPError:
    return MCPError(code=types.INTERNAL_ERROR, message=f"the upstream sent a message over {MAX_MESSAGE // 2**20} MiB")


def _result_of(reply: JSON) -> JSONObject:
    if not isinstance(reply, dict):
        raise ValueError("not a JSON-RPC response")
    error = reply.get("error")
    if isinstance(error, dict):
        raise MCPError(code=error.get("code", types.INTERNAL_ERROR), message=str(error.get("message", "")),
                       data=error.get("data"))
    result = reply.get("result")
    if not isinstance(result, dict):
        raise ValueError("a response without a result object")
    return result
