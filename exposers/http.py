"""The HTTP face of Triad: streamable HTTP at `/mcp` (both eras), legacy SSE at `/sse`, health and readiness.

Ownership: `build_app` returns a Starlette app whose lifespan only runs the SDK's session manager
(`async with manager.run(): yield`); the daemon's task group owns the upstreams, not the app. DNS-rebinding
protection (Host and Origin) is on for every route whenever the listen address is loopback. Bearer tokens are
checked here, before the SDK sees the request, and the caller's identity is left in the ASGI scope for the server
handlers, and as the SDK's authenticated user: the SDK binds each session (streamable HTTP and legacy SSE) to the
principal that opened it and answers anyone else exactly as it answers an unknown session (404), so a session id
alone is worth nothing to another client. `/metrics` and the details of `/readyz` need a client's token when
tokens are configured; `/healthz` stays open and minimal.
"""

from __future__ import annotations

import contextlib
import dataclasses
import logging
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import TYPE_CHECKING

import anyio
from mcp.server.auth.middleware.bearer_auth import AuthenticatedUser
from mcp.server.auth.provider import AccessToken
from mcp.server.connection import Connection
from mcp.server.runner import serve_dual_era_loop
from mcp.server.sse import SseServerTransport
from mcp.server.streamable_http_manager import StreamableHTTPASGIApp, StreamableHTTPSessionManager
from mcp.server.transport_security import TransportSecurityMiddleware, TransportSecuritySettings
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Mount, Route
from starlette.types import ASGIApp, Receive, Scope, Send

from consumers import JSONObject
from exposers._sdk import hide_session_ids, session_transport
from exposers._wire import StrictJson, refuse
from exposers.auth import KeysUnavailable, TokenGate, TokenRejected, challenge, metadata_routes
from exposers.console import build_console
from exposers.direct import DirectPath
from exposers.input_rounds import InputRounds
from exposers.notify import Notifier
from exposers.oauth_callback import callback_route
from exposers.server import IDENTITY_SCOPE_KEY, GatewayServer, SessionOrigin
from exposers.sessions import label_session_id
from gateway.calls import Dispatcher
from gateway.config import TriadConfig, is_loopback
from gateway.errors import InvalidRequest
from gateway.identity import (
    LOCAL,
    Identity,
    credential_owner,
    identity_for,
    identity_for_token,
    requires_token,
    run_list,
)
from gateway.observe import Reloads

if TYPE_CHECKING:
    from consumers.oauth import Redirects
    from gateway.cluster import Cluster

logger = logging.getLogger(__name__)

MAX_SESSIONS = 10_000
CLOSE_TIMEOUT = 5.0
"""How long ending a session that stopped reading may take."""
MAX_REQUEST_BODY = 4 * 2**20


def security_settings(host: str) -> TransportSecuritySettings | None:
    if not is_loopback(host):
        return None
    return TransportSecuritySettings(
        enable_dns_rebinding_protection=True,
        allowed_hosts=["127.0.0.1", "127.0.0.1:*", "localhost", "localhost:*", "[::1]", "[::1]:*"],
        allowed_origins=["http://127.0.0.1:*", "http://localhost:*", "http://[::1]:*"],
    )


RUN_LIST_HEADER = "x-triad-tools"
RUN_LIST_QUERY = "tools"


class BearerAuth:
    """Maps `Authorization: Bearer <token>` to a configured client's static token or, with `auth.oauth`, to the
    identity of an OAuth access token (`exposers.auth`); 401 or 403 with `WWW-Authenticate` otherwise.

    When no client has a token and OAuth is off, every caller is the `local` client (loopback development use);
    otherwise a request without a token acts as `anonymous:` if the config names such a client. The session's
    run-level allow list (header `X-Triad-Tools` or query parameter `tools`) joins the identity here. The token
    stops here: it is not left in the scope, and nothing Triad sends upstream carries it."""

    def __init__(self, app: ASGIApp, dispatcher: Dispatcher, gate: TokenGate) -> None:
        self.app = app
        self.dispatcher = dispatcher
        self.gate = gate

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        # RFC 9110 §5.5: a field value excludes surrounding whitespace. httptools keeps it, and the SDK compares
        # Mcp-* headers with the body exactly, so a value like " tools/call" would be refused.
        scope["headers"] = [(key, value.strip(b" \t")) for key, value in scope["headers"]]
        config = self.dispatcher.config
        request = Request(scope)
        identity: Identity | None = LOCAL
        header = request.headers.get("authorization", "")
        refused: TokenRejected | None = None
        if requires_token(config):
            try:
                identity = await caller_of(config, self.gate, header)
            except TokenRejected as exc:
                identity, refused = None, exc
            except KeysUnavailable as exc:
                logger.warning("OAuth: cannot check an access token: %s", exc.message)
                await JSONResponse({"error": "temporarily_unavailable", "error_description": exc.message},
                                   status_code=503)(scope, receive, send)
                return
            if identity is None and not header and config.anonymous is not None:
                identity = identity_for(config, config.anonymous)
        if identity is None:
            await unauthorised(config, header, refused)(scope, receive, send)
            return
        sent = ((request.headers.get(RUN_LIST_HEADER), "X-Triad-Tools"), (request.query_params.get(RUN_LIST_QUERY),
                                                                         "?tools="))
        try:
            run_lists = tuple(run_list(value, source) for value, source in sent if value is not None)
        except InvalidRequest as exc:
            await refuse(send, exc)
            return
        scope[IDENTITY_SCOPE_KEY] = dataclasses.replace(identity, run_lists=run_lists) if run_lists else identity
        scope["user"] = principal_user(identity)
        await self.app(scope, receive, send)


async def caller_of(config: TriadConfig, gate: TokenGate, header: str) -> Identity | None:
    """The identity an `Authorization` header proves: a client's static token, else an OAuth access token (when
    `auth.oauth` is set; `TokenRejected` says why one is refused); None without a bearer token."""
    scheme, _, token = header.partition(" ")
    token = token.strip()
    if scheme.lower() != "bearer" or not token:
        return None
    if (identity := identity_for_token(config, token)) is not None or config.auth.oauth is None:
        return identity
    return await gate.identify(config, token)


def unauthorised(config: TriadConfig, header: str, refused: TokenRejected | None) -> Response:
    """The challenge: MCP's (resource metadata, scopes, RFC 6750 error) with OAuth on, else the static one."""
    if config.auth.oauth is not None:
        if refused is None and header:
            refused = TokenRejected("a valid bearer token is required")
        return challenge(config.auth.oauth, refused)
    error = "invalid_token" if header else "invalid_request"
    return JSONResponse({"error": error, "error_description": "a valid bearer token is required"}, status_code=401,
                        headers={"WWW-Authenticate": f'Bearer realm="triad", error="{error}"'})


def principal_user(identity: Identity) -> AuthenticatedUser:
    """The SDK's view of the caller, by which it binds sessions to their opener: the configured client, and for
    an OAuth caller also the token's issuer and subject (the token itself is never copied here)."""
    if identity.principal is None:
        return AuthenticatedUser(AccessToken(token="", client_id=identity.client_id, scopes=[]))
    issuer, subject = identity.principal
    return AuthenticatedUser(AccessToken(token="", client_id=identity.client_id, scopes=[], subject=subject,
                                         claims={"iss": issuer}))


class HostGuard:
    """The DNS-rebinding check of `/mcp` (Host, Origin), for routes the SDK does not serve itself."""

    def __init__(self, app: ASGIApp, security: TransportSecuritySettings | None, mcp_too: bool = False) -> None:
        self.app = app
        self._security = TransportSecurityMiddleware(security) if security is not None else None
        self._mcp_too = mcp_too

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        # `/mcp` is checked by the SDK and by Triad's direct path, each before anything else (unless `mcp_too`:
        # something runs before them, such as the cluster's forwarding).
        if self._security is not None and scope["type"] == "http" and (self._mcp_too or scope["path"] != "/mcp"):
            refused = await self._security.validate_request(Request(scope), is_post=False)
            if refused is not None:
                await refused(scope, receive, send)
                return
        await self.app(scope, receive, send)


def build_app(server: GatewayServer, dispatcher: Dispatcher, notifier: Notifier, host: str,
              reloader: Reloads | None = None, rounds: InputRounds | None = None, cluster: Cluster | None = None,
              redirects: Redirects | None = None) -> McpFirst:
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
    gate = TokenGate()

    async def close_session(connection: Connection) -> None:
        """A streamable HTTP session that stopped reading is ended (its client gets 404 and opens a new one)."""
        transport = session_transport(manager, connection.session_id) if connection.session_id else None
        if transport is not None:
            with anyio.move_on_after(CLOSE_TIMEOUT, shield=True):
                await transport.terminate()

    notifier.close_session = close_session

    async def handle_sse(scope: Scope, receive: Receive, send: Send) -> None:
        """A legacy SSE stream: the identity of its GET (run-level list included) is the session's."""
        identity = scope.get(IDENTITY_SCOPE_KEY, LOCAL)
        async with sse.connect_sse(scope, receive, send) as (read, write), server.lifespan(server):
            await serve_dual_era_loop(server, read, write, lifespan_state=SessionOrigin(identity),
                                      init_options=server.create_initialization_options())

    async def healthz(_request: Request) -> Response:
        return JSONResponse({"status": "alive"})

    async def authorised(request: Request) -> bool:
        """A configured client's token or a valid OAuth access token (or no tokens configured at all)."""
        config = dispatcher.config
        if not requires_token(config):
            return True
        try:
            return await caller_of(config, gate, request.headers.get("authorization", "")) is not None
        except (TokenRejected, KeysUnavailable):
            return False

    async def callback_caller(request: Request) -> str | None:
        """Whose authorization a callback that carries a bearer token may complete (a browser carries none)."""
        header = request.headers.get("authorization", "")
        if not header or not requires_token(dispatcher.config):
            return None
        try:
            identity = await caller_of(dispatcher.config, gate, header)
        except (TokenRejected, KeysUnavailable):
            identity = None
        if identity is None:
            raise PermissionError("a token that proves no one")
        return credential_owner(identity)

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
        if not await authorised(request):  # the verdict only: upstream names and errors are for clients
            return JSONResponse({"ready": body["ready"]}, status_code=status)
        return JSONResponse(body, status_code=status)

    async def metrics(request: Request) -> Response:
        if not await authorised(request):
            return JSONResponse({"error": "invalid_token", "error_description": "a valid bearer token is required"},
                                status_code=401, headers={"WWW-Authenticate": 'Bearer realm="triad"'})
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

    mcp: ASGIApp = DirectPath(StrictJson(StreamableHTTPASGIApp(manager), MAX_REQUEST_BODY), dispatcher,
                              notifier.sessions, manager, security, MAX_REQUEST_BODY, rounds, server.server_info_stamp,
                              enabled=listen.direct_path)
    router = None
    if cluster is not None:
        from exposers.cluster_routes import ClusterRouter  # it needs redis-py: only with `cluster:` (an extra)

        router = ClusterRouter(mcp, cluster, lambda sid: session_transport(manager, sid) is not None,
                               MAX_REQUEST_BODY)
        mcp = HostGuard(router, security, mcp_too=True)  # not forwarded before the Host/Origin check
    mcp = BearerAuth(mcp, dispatcher, gate)
    app = Starlette(
        routes=[
            Route("/mcp", endpoint=mcp),
            Route("/sse", endpoint=BearerAuth(handle_sse, dispatcher, gate)),
            Mount("/messages/", app=BearerAuth(StrictJson(sse.handle_post_message, MAX_REQUEST_BODY, "message"),
                                               dispatcher, gate)),
            Route("/healthz", endpoint=healthz),
            Route("/readyz", endpoint=readyz),
            Route("/metrics", endpoint=metrics),
            Route("/admin/reload", endpoint=BearerAuth(_endpoint(admin_reload), dispatcher, gate), methods=["POST"]),
            *metadata_routes(dispatcher),
            *([callback_route(redirects, callback_caller, router.callbacks if router is not None else None)]
              if redirects is not None else []),
            *([Mount("/console", build_console(dispatcher, reloader))] if dispatcher.config.console.enabled else []),
        ],
        lifespan=lifespan,
    )
    app.add_middleware(HostGuard, security=security)
    return McpFirst(mcp, app)


class McpFirst:
    """The app uvicorn runs: `/mcp`, nearly all the traffic, goes straight to its handler; everything else through
    Starlette (routes, error pages, the lifespan). Starlette's router and exception middlewares cost about a tenth
    of a call's CPU, and `/mcp` uses neither (its handler makes its own errors; `HostGuard` exempts it, as the SDK
    and the direct path check Host and Origin themselves)."""

    def __init__(self, mcp: ASGIApp, app: ASGIApp) -> None:
        self._mcp = mcp
        self._app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http" and scope["path"] == "/mcp":
            await self._mcp(scope, receive, send)
        else:
            await self._app(scope, receive, send)


def _endpoint(handler: Callable[[Request], Awaitable[Response]]) -> ASGIApp:
    """Wrap a request handler as a plain ASGI app so the auth middleware can sit in front of it."""

    async def app(scope: Scope, receive: Receive, send: Send) -> None:
        response = await handler(Request(scope, receive, send))
        await response(scope, receive, send)

    return app
