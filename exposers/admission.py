"""The HTTP edge's share of `gateway.quotas`: a new streamable HTTP session or a stream is admitted only within its
identity's quota, before the SDK opens anything for it.

Over a quota the request gets HTTP 429 with `Retry-After` and a JSON-RPC error (id null) naming the quota; nothing
is opened, and other identities are untouched. A POST without `Mcp-Session-Id` (an `initialize`, in the handshake
era) takes a place in `limits.sessions` before the SDK sees it, so that requests sent at once cannot pass the quota
together; the session the SDK opens (its id in the response) holds the place until it ends (`Sessions.adopt`),
and a request that opened none gives it back when it is answered. A GET (the session's stream) holds a place in
`limits.streams` while it lasts; a legacy SSE stream holds one of each (`streaming`, used by `exposers.http`).

Ownership: `build_app` puts `Admission` in front of the `/mcp` app, behind the bearer check (the identity is in
the scope) and behind the cluster's forwarding (a forwarded request is counted where it is served).
"""

from __future__ import annotations

from mcp_types.version import MODERN_PROTOCOL_VERSIONS
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from exposers._wire import refuse
from exposers.server import IDENTITY_SCOPE_KEY
from exposers.sessions import Sessions
from gateway.calls import Dispatcher
from gateway.errors import QuotaExceeded
from gateway.identity import LOCAL, Identity
from gateway.quotas import Counted, Ticket

RETRY_AFTER = 5
"""Seconds a refused client is told to wait (`Retry-After`): places free as sessions end and streams close, so
soon is a fair guess; a well-behaved client backs off further on its own."""


async def refuse_quota(send: Send, exc: QuotaExceeded) -> None:
    await refuse(send, exc, 429, [(b"retry-after", str(RETRY_AFTER).encode())])


class Admission:
    def __init__(self, app: ASGIApp, dispatcher: Dispatcher, sessions: Sessions) -> None:
        self.app = app
        self._dispatcher = dispatcher
        self._sessions = sessions

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or scope["method"] not in ("GET", "POST"):
            await self.app(scope, receive, send)
            return
        headers = dict(scope["headers"])
        if scope["method"] == "POST" and (b"mcp-session-id" in headers or headers.get(
                b"mcp-protocol-version", b"").decode(errors="replace") in MODERN_PROTOCOL_VERSIONS):
            await self.app(scope, receive, send)  # a request of a session, or a 2026-07-28 one (no session)
            return
        identity = identity_in(scope)
        quota: Counted = "streams" if scope["method"] == "GET" else "sessions"
        try:
            ticket = self._dispatcher.quotas.take(quota, identity, self._dispatcher.config)
        except QuotaExceeded as exc:
            await refuse_quota(send, exc)
            return
        if quota == "streams":
            try:
                await self.app(scope, receive, send)
            finally:
                ticket()
            return
        opened: list[str] = []

        async def watch(message: Message) -> None:
            if message["type"] == "http.response.start":
                found = dict(message.get("headers") or []).get(b"mcp-session-id")
                if found is not None:
                    opened.append(found.decode(errors="replace"))
            await send(message)

        try:
            await self.app(scope, receive, watch)
        finally:
            if not opened or not self._sessions.adopt(opened[0], ticket):
                ticket()


def sse_places(dispatcher: Dispatcher, identity: Identity) -> Ticket:
    """A legacy SSE stream's places, one session and one stream, as one ticket; `QuotaExceeded` when either is
    at its quota (nothing is held then)."""
    session = dispatcher.quotas.take("sessions", identity, dispatcher.config)
    try:
        stream = dispatcher.quotas.take("streams", identity, dispatcher.config)
    except QuotaExceeded:
        session()
        raise

    def give_back() -> None:
        stream()
        session()

    return give_back


def identity_in(scope: Scope) -> Identity:
    """The caller the bearer check left in the scope (`local` where tokens are not required)."""
    found = scope.get(IDENTITY_SCOPE_KEY, LOCAL)
    return found if isinstance(found, Identity) else LOCAL
