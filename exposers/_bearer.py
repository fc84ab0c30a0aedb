"""Who a request over HTTP is: bearer tokens checked, failures throttled, the identity left in the ASGI scope.

`Authenticator.identify` is the one check of every authenticated route (`/mcp`, `/sse`, `/messages/`, `/admin/*`,
`/metrics`, the details of `/readyz`, the OAuth callback): the throttle first (`exposers._throttle`, before any
token is compared), then the `Authorization` header, strictly (`exposers.auth.bearer_token`: a malformed one is
400 `invalid_request`, RFC 6750 §3.1), then the token. `BearerAuth` puts it in front of an ASGI app.

With no client token and no OAuth, every caller is the `local` client; it is an owner only when the listener is on
loopback (off loopback it takes `listen.allow_unauthenticated: true` to start at all, and a network caller who
proves nothing is never an owner: `/admin` and owner-only tools refuse it; the console needs an owner's token).
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Callable

from mcp.server.auth.middleware.bearer_auth import AuthenticatedUser
from mcp.server.auth.provider import AccessToken
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.types import ASGIApp, Receive, Scope, Send

from exposers._throttle import AuthThrottle, identity_key, source_key
from exposers._wire import refuse
from exposers.auth import KeysUnavailable, MalformedAuthorization, TokenGate, TokenRejected, bearer_token, challenge
from exposers.server import IDENTITY_SCOPE_KEY
from gateway.calls import Dispatcher
from gateway.config import TriadConfig
from gateway.errors import InvalidRequest
from gateway.identity import LOCAL, Identity, identity_for, identity_for_token, requires_token, run_list

logger = logging.getLogger(__name__)

RUN_LIST_HEADER = "x-triad-tools"
RUN_LIST_QUERY = "tools"
NETWORK_CALLER = dataclasses.replace(LOCAL, owner=False)
"""Who an unauthenticated caller is on a listener off loopback (`listen.allow_unauthenticated`): never an owner."""

SessionCheck = Callable[[Scope, Identity], bool]
"""Whether a request names a session that another identity opened (streamable HTTP or legacy SSE)."""


class Authenticator:
    def __init__(self, dispatcher: Dispatcher, gate: TokenGate, throttle: AuthThrottle, loopback: bool) -> None:
        self.dispatcher = dispatcher
        self.gate = gate
        self.throttle = throttle
        self._unauthenticated = LOCAL if loopback else NETWORK_CALLER

    async def identify(self, scope: Scope, *, anonymous: bool = True) -> Identity | Response:
        """The caller of a request, or the response that refuses it (429, 400, 401, 403 or 503); `anonymous`: a
        request without a token may act as the `anonymous:` client."""
        config = self.dispatcher.config
        if not requires_token(config):
            return self._unauthenticated
        source = source_key(scope)
        if (throttled := self.throttle.refusal((source,))) is not None:
            return throttled
        try:
            token = bearer_token(scope["headers"])
            identity = await self._caller_of(config, token) if token is not None else None
        except TokenRejected as exc:
            reason = "invalid_request" if isinstance(exc, MalformedAuthorization) else "invalid_token"
            self.throttle.failed(reason, source)
            return unauthorised(config, exc)
        except KeysUnavailable as exc:
            logger.warning("OAuth: cannot check an access token: %s", exc.message)
            return JSONResponse({"error": "temporarily_unavailable", "error_description": exc.message},
                                status_code=503, headers={"Retry-After": str(exc.retry_after)})
        if identity is None and token is not None:
            self.throttle.failed("invalid_token", source)
            return unauthorised(config, TokenRejected("a valid bearer token is required"))
        if identity is None and anonymous and config.anonymous is not None:
            return identity_for(config, config.anonymous)
        if identity is None:
            return unauthorised(config, None)
        if (throttled := self.throttle.refusal((identity_key(identity),))) is not None:
            return throttled
        return identity

    async def _caller_of(self, config: TriadConfig, token: str) -> Identity | None:
        """A client's static token, else an OAuth access token (when `auth.oauth` is set; `TokenRejected` says why
        one is refused)."""
        if (identity := identity_for_token(config, token)) is not None or config.auth.oauth is None:
            return identity
        return await self.gate.identify(config, token)


def unauthorised(config: TriadConfig, refused: TokenRejected | None) -> Response:
    """The challenge: MCP's (resource metadata, scopes, RFC 6750 error) with OAuth on, else the static one; without
    a token at all it carries no error code (RFC 6750 §3.1)."""
    if config.auth.oauth is not None:
        return challenge(config.auth.oauth, refused)
    if refused is None:
        return JSONResponse({"error": "invalid_request", "error_description": "a bearer token is required"},
                            status_code=401, headers={"WWW-Authenticate": 'Bearer realm="triad"'})
    return JSONResponse({"error": refused.error, "error_description": refused.message}, status_code=refused.status,
                        headers={"WWW-Authenticate": f'Bearer realm="triad", error="{refused.error}"'})


class BearerAuth:
    """`Authenticator.identify` in front of `app`; the session's run-level allow list (header `X-Triad-Tools` or
    query parameter `tools`) joins the identity here. The token stops here: it is not left in the scope, and
    nothing Triad sends upstream carries it. A request that names another identity's session is counted as a
    failure of that identity, then left to the SDK, which answers it as an unknown session."""

    def __init__(self, app: ASGIApp, auth: Authenticator, foreign_session: SessionCheck | None = None) -> None:
        self.app = app
        self.auth = auth
        self._foreign_session = foreign_session

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        # RFC 9110 §5.5: a field value excludes surrounding whitespace. httptools keeps it, and the SDK compares
        # Mcp-* headers with the body exactly, so a value like " tools/call" would be refused.
        scope["headers"] = [(key, value.strip(b" \t")) for key, value in scope["headers"]]
        identity = await self.auth.identify(scope)
        if isinstance(identity, Response):
            await identity(scope, receive, send)
            return
        if self._foreign_session is not None and self._foreign_session(scope, identity):
            # held against the identity the request proved, not its source: on loopback the source is everyone's
            self.auth.throttle.failed("session_mismatch", identity_key(identity))
        request = Request(scope)
        sent = ((request.headers.get(RUN_LIST_HEADER), "X-Triad-Tools"),
                (request.query_params.get(RUN_LIST_QUERY), "?tools="))
        try:
            run_lists = tuple(run_list(value, source) for value, source in sent if value is not None)
        except InvalidRequest as exc:
            await refuse(send, exc)
            return
        scope[IDENTITY_SCOPE_KEY] = dataclasses.replace(identity, run_lists=run_lists) if run_lists else identity
        scope["user"] = principal_user(identity)
        await self.app(scope, receive, send)


def principal_user(identity: Identity) -> AuthenticatedUser:
    """The SDK's view of the caller, by which it binds sessions to their opener: the configured client, and for
    an OAuth caller also the token's issuer and subject (the token itself is never copied here)."""
    if identity.principal is None:
        return AuthenticatedUser(AccessToken(token="", client_id=identity.client_id, scopes=[]))
    issuer, subject = identity.principal
    return AuthenticatedUser(AccessToken(token="", client_id=identity.client_id, scopes=[], subject=subject,
                                         claims={"iss": issuer}))
