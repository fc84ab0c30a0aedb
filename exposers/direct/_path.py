"""The direct path for the hot requests of HTTP clients, in front of the SDK's `/mcp` app.

The SDK's server puts every request through generic machinery (a memory stream into the session, a task per
request, an SSE response object, validation and re-serialisation of the result). For a proxy that is most of the
cost of a call, so the requests that make up nearly all traffic are served here instead, in both eras:
`tools/call` (`fast_calls`; with tracing on, calls stay on the SDK's path for its spans) and list pages from bytes
(`fast_lists`), plus a session's answers to requests sent on its calls' streams and its cancellations of those
calls.

Only the plain case is taken. Handshake era: a POST on a live session the SDK opened (found in the directory of
`exposers.sessions`, bound to its identity),
whose `MCP-Protocol-Version` header is the session's own version. 2026-07-28: a `tools/call` or list request that
passes the SDK's own envelope, routing-header, `Mcp-Param-*` and params checks (run here with the SDK's
functions). Both: the content type and Accept header the SDK requires, one message. Anything else (a batch,
another method, extra params, an unknown or expired session, a body over the limit, a check that fails) goes to
the SDK untouched, so its checks and errors stay the only ones. The DNS-rebinding check runs first, as the SDK's does.

A session answers only the identity that opened it: a request of another client is left to the SDK, which
answers it as an unknown session (404). A request served here must count as activity of its session, or the SDK
would reap a session that only lists and calls as idle (`exposers.held`). A call served here is kept among its
session's calls in flight (`DownstreamSession.calls`) while it runs, for the session's cancellations.
"""

from __future__ import annotations

import json
from collections.abc import Mapping

import anyio
from mcp.server.streamable_http import check_accept_headers
from mcp.server.streamable_http_manager import StreamableHTTPSessionManager
from mcp.server.transport_security import TransportSecurityMiddleware, TransportSecuritySettings
from mcp.shared.inbound import (
    InboundLadderRejection,
    classify_inbound_request,
    find_duplicated_routing_header,
    validate_mcp_param_headers,
)
from mcp_types.methods import validate_client_request
from mcp_types.version import MODERN_PROTOCOL_VERSIONS
from pydantic import ValidationError
from starlette.requests import Request
from starlette.types import ASGIApp, Receive, Scope, Send

from consumers import JSON, JSONObject, cancellation_of
from exposers._sdk import held, session_transport
from exposers._wire import ParseError, parse_scoped, read_body, replay
from exposers.direct._calls import (
    Answers,
    ModernCallRelay,
    Reply,
    SessionCallRelay,
    send_json,
    serve_call,
    serve_modern_call,
)
from exposers.direct._lists import ListPages
from exposers.input_rounds import InputRounds
from exposers.request import ClientRequest, acting_identity
from exposers.server import IDENTITY_SCOPE_KEY, tool_input_schema
from exposers.sessions import DownstreamSession, Sessions
from gateway.calls import Dispatcher
from gateway.identity import Identity, same_principal
from gateway.observe import tracing_enabled

CALL_PARAMS = frozenset({"name", "arguments", "_meta"})
"""The params of a plain handshake-era `tools/call`; anything more (a task, say) is left to the SDK."""
MODERN_PARAMS = CALL_PARAMS | {"inputResponses", "requestState"}
"""A 2026-07-28 `tools/call` may also be the retry of an `input_required` round."""


class DirectPath:
    def __init__(self, app: ASGIApp, dispatcher: Dispatcher, sessions: Sessions,
                 manager: StreamableHTTPSessionManager, security: TransportSecuritySettings | None,
                 max_body: int, rounds: InputRounds | None, server_info: Mapping[str, JSON], *,
                 enabled: bool = True) -> None:
        """`enabled`: `listen.direct_path` (a listen setting: it takes effect on restart, as the others)."""
        self.app = app
        self._enabled = enabled
        self._rounds = rounds
        self._server_info = server_info
        self._dispatcher = dispatcher
        self._sessions = sessions
        self._manager = manager
        self._security = TransportSecurityMiddleware(security)
        self._max_body = max_body
        self._pages = ListPages(dispatcher, server_info)
        self._answers = Answers()
        self._serve_calls = not tracing_enabled()
        """With tracing on, calls take the SDK's path, whose server span continues the client's trace."""

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        direct = scope["type"] == "http" and scope["method"] == "POST" and self._enabled
        headers = dict(scope["headers"]) if direct else {}
        if not headers.get(b"content-type", b"").startswith(b"application/json"):
            await self.app(scope, receive, send)
            return
        version = headers.get(b"mcp-protocol-version", b"").decode(errors="replace")
        if version in MODERN_PROTOCOL_VERSIONS:
            await self._modern(scope, receive, send)
            return
        session_id = headers.get(b"mcp-session-id", b"").decode(errors="replace")
        found = self._sessions.get(session_id) if session_id else None
        transport = session_transport(self._manager, session_id) if found is not None else None
        owner = found.identity if found is not None else None
        caller = scope.get(IDENTITY_SCOPE_KEY)
        if (found is None or transport is None or version != found.protocol_version or owner is None
                or not isinstance(caller, Identity) or not same_principal(caller, owner)):
            await self.app(scope, receive, send)  # the SDK's answer, 404 for another client's session
            return
        if (read := await self._read(scope, receive, send)) is None:
            return
        _request, body, more, message = read
        identity = acting_identity(self._dispatcher.config, caller, owner, found.client_name, found.takes_tasks)
        with held(transport):
            if message is not None and await self._serve(receive, send, message, found, identity, session_id):
                return
        await self.app(scope, replay(body, more, receive), send)

    async def _read(self, scope: Scope, receive: Receive, send: Send
                    ) -> tuple[Request, bytes, bool, JSONObject | None] | None:
        """The DNS-rebinding check (None: refused, and answered as the SDK answers any POST that fails it), then
        the body, whether more is left unread, and its message when it is one this path may take."""
        request = Request(scope, receive)
        if (refused := await self._security.validate_request(request, is_post=True)) is not None:
            await refused(scope, receive, send)
            return None
        read = await read_body(receive, self._max_body)
        if read is None:  # the client went away before its body came: nobody to answer
            return None
        body, more = read
        whole = not more and len(body) <= self._max_body
        return request, body, more, _message(scope, body) if whole and all(check_accept_headers(request)) else None

    async def _modern(self, scope: Scope, receive: Receive, send: Send) -> None:
        """A 2026-07-28 request: a plain `tools/call` or list request is served here, anything else by the SDK."""
        if (read := await self._read(scope, receive, send)) is None:
            return
        request, body, more, message = read
        route = self._modern_route(scope, request, message) if message is not None else None
        if route is not None and message is not None:
            identity, version = route
            if message["method"] == "tools/call":
                relay = ModernCallRelay(Reply(send, []), message["params"])
                call = ClientRequest("tools/call", message["params"], identity, relay)
                await serve_modern_call(self._dispatcher, self._rounds, call, message["id"], relay.reply, receive,
                                        self._server_info)
                return
            if (page := await self._pages.reply(identity, version, message)) is not None:
                await send_json(send, page, [])
                return
        await self.app(scope, replay(body, more, receive), send)

    def _modern_route(self, scope: Scope, request: Request, message: JSONObject) -> tuple[Identity, str] | None:
        """The caller and version of a 2026-07-28 `tools/call` or list request that passes every check the SDK
        makes before its handler (the envelope, the routing and `Mcp-Param-*` headers, the params); None for
        anything else, which the SDK then refuses with its own error."""
        method, params = message.get("method"), message.get("params")
        if "id" not in message or not isinstance(params, dict):
            return None
        if method == "tools/call":
            if not self._serve_calls or not _plain_call(params, MODERN_PARAMS):
                return None
        elif method not in self._pages.listers:
            return None
        if find_duplicated_routing_header(request.headers.items()) is not None:
            return None
        verdict = classify_inbound_request(message, headers=dict(request.headers))
        if isinstance(verdict, InboundLadderRejection):
            return None
        if method == "tools/call" and self._dispatcher.declares_param_headers(params["name"]):
            schema = tool_input_schema(self._dispatcher, params["name"])
            arguments = params.get("arguments") or {}
            if schema is not None and validate_mcp_param_headers(schema, arguments, request.headers) is not None:
                return None
        try:
            validate_client_request(method, verdict.protocol_version, params)
        except ValidationError:
            return None
        identity = scope.get(IDENTITY_SCOPE_KEY)
        if not isinstance(identity, Identity):
            return None
        client = verdict.client_info if isinstance(verdict.client_info, dict) else {}
        return acting_identity(self._dispatcher.config, identity, None, client.get("name"), tasks=True), \
            verdict.protocol_version

    async def _serve(self, receive: Receive, send: Send, message: JSONObject, session: DownstreamSession,
                     identity: Identity, session_id: str) -> bool:
        """Serve `message` here; False when it is not one for this path."""
        response_headers = [(b"mcp-session-id", session_id.encode())]
        method = message.get("method")
        if method is None:  # a response: the answer to a request sent on a call's stream, if ours
            if "id" not in message or not self._answers.deliver(session_id, message):
                return False
            await _accepted(send, response_headers)
            return True
        if "id" not in message:
            if method != "notifications/cancelled" or not isinstance(params := message.get("params"), dict):
                return False
            found = session.calls.get(json.dumps(params.get("requestId")))
            if found is None:
                return False
            cancel, relay = found
            relay.cancellation = cancellation_of(params)  # for the upstream's cancellation
            cancel.cancel()
            await _accepted(send, response_headers)
            return True
        if method in self._pages.listers:
            page = await self._pages.reply(identity, session.protocol_version, message, session.hook)
            if page is None:
                return False
            await send_json(send, page, response_headers)
            return True
        if method != "tools/call" or not self._serve_calls or not _plain_call(message.get("params"), CALL_PARAMS):
            return False
        key = json.dumps(message["id"])
        if key in session.calls:
            return False  # a duplicate id: the SDK's error
        relay = SessionCallRelay(Reply(send, response_headers), message["params"], session, self._answers)
        request = ClientRequest("tools/call", message["params"], identity, relay, session.hook)
        cancel = anyio.CancelScope()
        session.calls[key] = (cancel, relay)
        try:
            await serve_call(self._dispatcher, request, message["id"], relay.reply, cancel, receive)
        finally:
            del session.calls[key]
        return True


def _message(scope: Scope, body: bytes) -> JSONObject | None:
    """One JSON-RPC 2.0 message (not a batch), or None."""
    try:
        message = parse_scoped(scope, body)
    except ParseError:  # the SDK's path answers it, behind `StrictJson`: a JSON-RPC parse error
        return None
    if not isinstance(message, dict) or message.get("jsonrpc") != "2.0":
        return None
    ident = message.get("id")
    if "id" in message and (isinstance(ident, bool) or not isinstance(ident, str | int)):
        return None
    return message


def _plain_call(params: JSON, allowed: frozenset[str]) -> bool:
    if not isinstance(params, dict) or not isinstance(params.get("name"), str) or set(params) - allowed:
        return False
    if not all(params.get(key) is None or isinstance(params[key], dict) for key in ("arguments", "_meta")):
        return False
    token = (params.get("_meta") or {}).get("progressToken")
    return token is None or (isinstance(token, str | int) and not isinstance(token, bool))


async def _accepted(send: Send, headers: list[tuple[bytes, bytes]]) -> None:
    await send({"type": "http.response.start", "status": 202, "headers": headers})
    await send({"type": "http.response.body", "body": b""})
