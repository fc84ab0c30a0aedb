"""The HTTP face of Triad: streamable HTTP at `/mcp` (both eras), legacy SSE at `/sse`, health and readiness.

Ownership: `build_app` returns a Starlette app whose lifespan only runs the SDK's session manager
(`async with manager.run(): yield`); the daemon's task group owns the upstreams, not the app. DNS-rebinding
protection (Host and Origin, parsed strictly: `exposers._host_rules`) is on for every route whenever the listen
address is loopback. Bearer tokens are checked here (`exposers._bearer`, failures throttled by `exposers._throttle`),
before the SDK sees the request, and the caller's identity is left in the ASGI scope for the server handlers, and
as the SDK's authenticated user: the SDK binds each session (streamable HTTP and legacy SSE) to the principal that
opened it and answers anyone else exactly as it answers an unknown session (404), so a session id
alone is worth nothing to another client. `/metrics` and the details of `/readyz` need a client's token when
tokens are configured; `/healthz` stays open and minimal.
"""

from __future__ import annotations

import contextlib
import logging
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import TYPE_CHECKING

import anyio
from mcp.server.auth.middleware.bearer_auth import authorization_context
from mcp.server.connection import Connection
from mcp.server.runner import serve_dual_era_loop
from mcp.server.sse import SseServerTransport
from mcp.server.streamable_http_manager import StreamableHTTPASGIApp, StreamableHTTPSessionManager
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Mount, Route
from starlette.types import ASGIApp, Receive, Scope, Send

from consumers import JSONObject
from exposers._bearer import Authenticator, BearerAuth, principal_user
from exposers._host_rules import LoopbackGuard, security_settings
from exposers._sdk import hide_session_ids, live_transports, session_transport, sse_session_owner
from exposers._throttle import AuthThrottle
from exposers._wire import StrictJson
from exposers.admission import Admission, refuse_quota, sse_places
from exposers.auth import TokenGate, metadata_routes
from exposers.batches import Batches
from exposers.console import build_console
from exposers.direct import DirectPath
from exposers.input_rounds import InputRounds
from exposers.notify import Notifier
from exposers.oauth_callback import callback_route
from exposers.server import IDENTITY_SCOPE_KEY, GatewayServer, SessionOrigin
from exposers.sessions import label_session_id
from gateway.calls import Dispatcher
from gateway.config import is_loopback
from gateway.errors import QuotaExceeded
from gateway.identity import LOCAL, Identity, credential_owner, requires_token, same_principal
from gateway.observe import LogSummary, Reloads
from gateway.quotas import TOTALS

if TYPE_CHECKING:
    from consumers.oauth import Redirects
    from gateway.cluster import Cluster

logger = logging.getLogger(__name__)

MAX_SESSIONS = TOTALS["sessions"][0]
"""The SDK's own bound on open sessions: `gateway.quotas` admits no more (and owners only into the last part)."""
CLOSE_TIMEOUT = 5.0
"""How long ending a session that stopped reading may take."""
MAX_REQUEST_BODY = 4 * 2**20


def build_app(server: GatewayServer, dispatcher: Dispatcher, notifier: Notifier, host: str,
              reloader: Reloads | None = None, rounds: InputRounds | None = None, cluster: Cluster | None = None,
              redirects: Redirects | None = None) -> ASGIApp:
    """`cluster`: with `cluster:` in the config, the replica's `gateway.cluster.Cluster` (requests another replica
    owns are forwarded to it, and `/readyz` shows the cluster). `redirects`: per-user authorizations waiting for
    their answer on `/oauth/callback/<upstream>`."""
    security = security_settings(host)
    listen = dispatcher.config.listen  # listen settings take effect on restart only (`gateway.runtime`)
    hide_session_ids(label_session_id)
    manager = StreamableHTTPSessionManager(
        app=server,
        security_settings=security,
        session_idle_timeout=listen.session_idle_timeout,
        max_sessions=MAX_SESSIONS,
        max_request_body_size=MAX_REQUEST_BODY,
    )
    sse = SseServerTransport("/messages/", security_settings=security)
    throttle = AuthThrottle(dispatcher.metrics, LogSummary(logger, "failed authentications"))
    auth = Authenticator(dispatcher, TokenGate(), throttle, is_loopback(host))

    async def close_session(connection: Connection) -> None:
        """A streamable HTTP session that stopped reading is ended (its client gets 404 and opens a new one)."""
        transport = session_transport(manager, connection.session_id) if connection.session_id else None
        if transport is not None:
            with anyio.move_on_after(CLOSE_TIMEOUT, shield=True):
                await transport.terminate()

    notifier.close_session = close_session
    draining = False

    def end_streams() -> None:
        """The drain has begun: each session's standalone GET stream ends now (an idle stream would hold the exit
        for the whole graceful shutdown, then be cut with an error), and a new one is refused with 405, which the
        spec lets a server answer for a stream it does not offer; the sessions go on over POST until exit."""
        nonlocal draining
        draining = True
        for transport in live_transports(manager):
            transport.close_standalone_sse_stream()

    notifier.end_streams = end_streams

    async def handle_sse(scope: Scope, receive: Receive, send: Send) -> None:
        """A legacy SSE stream: the identity of its GET (run-level list included) is the session's; it holds a
        session and a stream of that identity's quotas while it lasts."""
        identity = scope.get(IDENTITY_SCOPE_KEY, LOCAL)
        try:
            give_back = sse_places(dispatcher, identity)
        except QuotaExceeded as exc:
            await refuse_quota(send, exc)
            return
        try:
            async with sse.connect_sse(scope, receive, send) as (read, write), server.lifespan(server):
                await serve_dual_era_loop(server, read, write, lifespan_state=SessionOrigin(identity),
                                          init_options=server.create_initialization_options())
        finally:
            give_back()

    async def healthz(_request: Request) -> Response:
        return JSONResponse({"status": "alive"})

    async def authorised(request: Request) -> Identity | Response:
        """The caller (a configured client's token, a valid OAuth access token, or no tokens configured at all),
        or the response that refuses it. A caller without a token is refused even where `anonymous:` is set: what
        this guards (`/metrics`, `/readyz` details: children's stderr, diagnostics, reload errors) is for clients
        Triad knows, not for anyone who can reach the port."""
        return await auth.identify(request.scope, anonymous=False)

    async def callback_caller(request: Request) -> str | None:
        """Whose authorization a callback that carries a bearer token may complete (a browser carries none)."""
        if not request.headers.get("authorization") or not requires_token(dispatcher.config):
            return None
        identity = await authorised(request)
        if isinstance(identity, Response):
            raise PermissionError("a token that proves no one")
        return credential_owner(identity)

    def foreign_session(scope: Scope, identity: Identity) -> bool:
        """A streamable HTTP session id (or a legacy SSE `session_id`) of a session another identity opened."""
        if scope["path"] == "/mcp":
            session_id = next((value for key, value in scope["headers"] if key == b"mcp-session-id"), None)
            found = notifier.sessions.get(session_id.decode(errors="replace")) if session_id else None
            return found is not None and found.identity is not None and not same_principal(found.identity, identity)
        sent = Request(scope).query_params.get("session_id")
        try:
            owner = sse_session_owner(sse, uuid.UUID(hex=sent)) if sent else None
        except ValueError:
            return False
        return owner is not None and owner != authorization_context(principal_user(identity))

    async def readyz(request: Request) -> Response:
        upstreams = {name: {"state": up.state.value, **({"reason": up.reason} if up.reason else {})}
                     for name, up in dispatcher.upstreams.items()}
        ready = sum(1 for u in upstreams.values() if u["state"] == "ready")
        # A gateway with nothing behind it is not ready (an explicit `upstreams: {}` included).
        body: JSONObject = {"ready": bool(upstreams) and ready >= min(dispatcher.config.min_ready, len(upstreams)),
                                "upstreams": upstreams, "registry_version": dispatcher.registry.version,
                                "tools": len(dispatcher.registry.tools)}
        if dispatcher.registry.diagnostics:  # e.g. a deny that reaches tools whose raw names differ only by case
            body["diagnostics"] = [d.message for d in dispatcher.registry.diagnostics]
        if reloader is not None:
            body["reload"] = reloader.status.as_dict()
        if cluster is not None:
            body["cluster"] = cluster.view()
            body["ready"] = body["ready"] and not cluster.draining
        status = 200 if body["ready"] else 503
        if isinstance(await authorised(request), Response):  # the verdict only: names and errors are for clients
            return JSONResponse({"ready": body["ready"]}, status_code=status)
        return JSONResponse(body, status_code=status)

    async def metrics(request: Request) -> Response:
        if isinstance(refused := await authorised(request), Response):
            return refused
        return Response(dispatcher.metrics.render(), media_type="text/plain; version=0.0.4; charset=utf-8")

    async def admin_reload(request: Request) -> Response:
        identity = request.scope.get(IDENTITY_SCOPE_KEY)
        if not isinstance(identity, Identity) or not identity.owner:
            return JSONResponse({"error": "only owner clients may reload the config"}, status_code=403)
        if reloader is None:
            return JSONResponse({"error": "this daemon was not started from a config file"}, status_code=409)
        result = await reloader.reload(f"POST /admin/reload by {identity.client_id}", announce=True)
        return JSONResponse({"ok": result.ok, "errors": result.errors, "changes": result.changes},
                            status_code=200 if result.ok else 422)

    @contextlib.asynccontextmanager
    async def lifespan(_app: Starlette) -> AsyncIterator[None]:
        async with manager.run():
            try:
                yield
            finally:
                if router is not None:
                    await router.aclose()

    direct = DirectPath(StrictJson(StreamableHTTPASGIApp(manager), MAX_REQUEST_BODY), dispatcher, notifier.sessions,
                        manager, security, MAX_REQUEST_BODY, rounds, server.server_info_stamp,
                        enabled=listen.direct_path)
    mcp: ASGIApp = Batches(Admission(direct, dispatcher, notifier.sessions), notifier.sessions, MAX_REQUEST_BODY)
    router = None
    if cluster is not None:
        from exposers.cluster_routes import ClusterRouter  # it needs redis-py: only with `cluster:` (an extra)

        router = ClusterRouter(mcp, cluster, lambda sid: session_transport(manager, sid) is not None,
                               MAX_REQUEST_BODY)
        mcp = router
    mcp = BearerAuth(_no_streams_while(lambda: draining, mcp), auth, foreign_session)
    app = Starlette(
        routes=[
            Route("/mcp", endpoint=mcp),
            Route("/sse", endpoint=BearerAuth(handle_sse, auth)),
            Mount("/messages/", app=BearerAuth(StrictJson(sse.handle_post_message, MAX_REQUEST_BODY, "message"),
                                               auth, foreign_session)),
            Route("/healthz", endpoint=healthz),
            Route("/readyz", endpoint=readyz),
            Route("/metrics", endpoint=metrics),
            Route("/admin/reload", endpoint=BearerAuth(_endpoint(admin_reload), auth), methods=["POST"]),
            *metadata_routes(dispatcher),
            *([callback_route(redirects, callback_caller, router.callbacks if router is not None else None)]
              if redirects is not None else []),
            *([Mount("/console", build_console(dispatcher, reloader, throttle))]
              if dispatcher.config.console.enabled else []),
        ],
        lifespan=lifespan,
    )
    return LoopbackGuard(McpFirst(mcp, app), host)


class McpFirst:
    """The app uvicorn runs: `/mcp`, nearly all the traffic, goes straight to its handler; everything else through
    Starlette (routes, error pages, the lifespan). Starlette's router and exception middlewares cost about a tenth
    of a call's CPU, and `/mcp` uses neither (its handler makes its own errors; `LoopbackGuard`, around both, checks
    Host and Origin first)."""

    def __init__(self, mcp: ASGIApp, app: ASGIApp) -> None:
        self._mcp = mcp
        self._app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http" and scope["path"] == "/mcp":
            await self._mcp(scope, receive, send)
        else:
            await self._app(scope, receive, send)


def _no_streams_while(draining: Callable[[], bool], app: ASGIApp) -> ASGIApp:
    """`app`, with a GET (a session's stream) answered 405 once `draining()`: a stream opened then would hold the
    exit (`end_streams`)."""

    async def guarded(scope: Scope, receive: Receive, send: Send) -> None:
        if draining() and scope["method"] == "GET":
            response = JSONResponse({"error": "this replica is stopping: no new stream"}, status_code=405,
                                    headers={"Allow": "POST, DELETE"})
            await response(scope, receive, send)
            return
        await app(scope, receive, send)

    return guarded


def _endpoint(handler: Callable[[Request], Awaitable[Response]]) -> ASGIApp:
    """Wrap a request handler as a plain ASGI app so the auth middleware can sit in front of it."""

    async def app(scope: Scope, receive: Receive, send: Send) -> None:
        response = await handler(Request(scope, receive, send))
        await response(scope, receive, send)

    return app
