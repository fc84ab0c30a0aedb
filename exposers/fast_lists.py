"""List requests of handshake-era sessions answered from pages serialised once per registry version.

The SDK's server validates and re-serialises every result it sends, tool by tool; for a list of hundreds of tools
that is most of the cost of a `tools/list`. A list page depends only on the caller's view and the cursor, both
fixed for a registry version, so Triad serialises each page once (through the SDK's own per-version serialiser,
so the bytes are what the SDK would send) and answers later requests for it with those bytes, as plain JSON.

Only the plain case is taken here: a POST on a session the SDK opened (and the notifier tracks), at protocol
version 2025-11-25, carrying one list request with at most a cursor. Anything else - a batch, another method, a
run-level list in `_meta`, an unknown session, a bad cursor - goes to the SDK untouched, so its checks and errors
stay the only ones. The DNS-rebinding check runs first, as the SDK's does.
"""

from __future__ import annotations

import dataclasses
import json

from mcp.server.transport_security import TransportSecurityMiddleware, TransportSecuritySettings
from mcp_types.methods import serialize_server_result
from starlette.requests import Request
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from exposers.notify import Notifier
from exposers.server import IDENTITY_SCOPE_KEY
from gateway.dispatch import Dispatcher
from gateway.errors import TriadError
from gateway.identity import Identity

VERSION = "2025-11-25"
MAX_BODY = 4096
"""A list request is small; a bigger body is not one this path takes."""
MAX_CACHED_PAGES = 4096


class FastLists:
    def __init__(self, app: ASGIApp, dispatcher: Dispatcher, notifier: Notifier,
                 security: TransportSecuritySettings | None) -> None:
        self.app = app
        self._dispatcher = dispatcher
        self._notifier = notifier
        self._security = TransportSecurityMiddleware(security)
        self._lists = {"tools/list": dispatcher.list_tools, "resources/list": dispatcher.list_resources,
                       "resources/templates/list": dispatcher.list_resource_templates,
                       "prompts/list": dispatcher.list_prompts}
        self._pages: dict[tuple[Identity, str, str | None], bytes] = {}
        self._version = -1

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        headers = dict(scope["headers"]) if scope["type"] == "http" and scope["method"] == "POST" else {}
        session_id = headers.get(b"mcp-session-id", b"").decode()
        tracked = self._notifier.session_identity(session_id) if session_id else None
        if tracked is None or headers.get(b"mcp-protocol-version") != VERSION.encode():
            await self.app(scope, receive, send)
            return
        if (refused := await self._security.validate_request(Request(scope, receive), is_post=True)) is not None:
            await refused(scope, receive, send)  # as the SDK answers any POST that fails the check
            return
        body, more = await _read_body(receive)
        replay = _replay(body, more, receive)
        page = await self._page(scope, body, tracked.provider) if not more else None
        if page is None:
            await self.app(scope, replay, send)
            return
        await send({"type": "http.response.start", "status": 200,
                    "headers": [(b"content-type", b"application/json"), (b"content-length", str(len(page)).encode())]})
        await send({"type": "http.response.body", "body": page})

    async def _page(self, scope: Scope, body: bytes, provider: str | None) -> bytes | None:
        """The whole JSON-RPC response, or None when this request is not one for this path."""
        try:
            message = json.loads(body)
        except ValueError:
            return None
        if not isinstance(message, dict) or message.get("jsonrpc") != "2.0" or "id" not in message:
            return None
        lister = self._lists.get(message.get("method"))  # type: ignore[arg-type]
        params = message.get("params") or {}
        if lister is None or not isinstance(params, dict) or set(params) - {"cursor", "_meta"}:
            return None
        cursor, meta = params.get("cursor"), params.get("_meta")
        if (cursor is not None and not isinstance(cursor, str)) or (meta is not None and meta != {}
                                                                    and set(meta) != {"progressToken"}):
            return None
        identity = scope.get(IDENTITY_SCOPE_KEY)
        if not isinstance(identity, Identity):
            return None
        if identity.provider is None and provider is not None:  # inferred from the session's clientInfo
            identity = dataclasses.replace(identity, provider=provider)
        await self._dispatcher.settled()
        if self._version != self._dispatcher.registry.version or len(self._pages) > MAX_CACHED_PAGES:
            self._pages, self._version = {}, self._dispatcher.registry.version
        key = (identity, message["method"], cursor)
        result = self._pages.get(key)
        if result is None:
            try:
                page = lister(identity, cursor)
            except TriadError:  # a stale or foreign cursor: the SDK path says so
                return None
            result = self._pages[key] = json.dumps(serialize_server_result(message["method"], VERSION, page),
                                                   separators=(",", ":")).encode()
        return b'{"jsonrpc":"2.0","id":' + json.dumps(message["id"]).encode() + b',"result":' + result + b"}"


async def _read_body(receive: Receive) -> tuple[bytes, bool]:
    """The request body, up to `MAX_BODY`; True as the second value when there is more."""
    chunks: list[bytes] = []
    size = 0
    while True:
        message = await receive()
        chunk = message.get("body", b"")
        chunks.append(chunk)
        size += len(chunk)
        if not message.get("more_body") or size > MAX_BODY:
            return b"".join(chunks), bool(message.get("more_body"))


def _replay(body: bytes, more: bool, receive: Receive) -> Receive:
    """A `receive` that gives the body read so far again, then the rest of the request."""
    sent = False

    async def replay() -> Message:
        nonlocal sent
        if not sent:
            sent = True
            return {"type": "http.request", "body": body, "more_body": more}
        return await receive()

    return replay
