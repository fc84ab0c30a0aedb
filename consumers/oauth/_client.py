"""Triad as an OAuth 2.1 client of an upstream that requires it (MCP authorization, 2025-11-25 and 2026-07-28).

The MCP SDK's `OAuthClientProvider` does the protocol: discovery from the upstream's 401 (protected resource
metadata, then authorization server metadata or OIDC discovery, with the 2026 issuer checks), registration
(pre-registered credentials, a client ID metadata document, or dynamic registration), authorization code with
PKCE S256 and the RFC 9207 `iss` check, refresh, and scope step-up on 403 `insufficient_scope`; its
client-credentials provider does the machine-to-machine grant. This module adds what a gateway needs around it:

- one token source for both of Triad's HTTP clients: the SDK's httpx2 client gets it as its `auth`
  (`UpstreamOAuth.http_auth`), the direct HTTP path (`consumers._direct_http`) asks it for the `Authorization` value
  and tells it of a 401 or 403 (`authorization`, `challenged`);
- a refresh ahead of expiry by a fraction of the token's lifetime (`consumers.oauth`), one at a time per credential
  (callers meanwhile wait for it and share its outcome), kept in use while still valid when the authorization
  server cannot refresh it; and once on a 401 before asking a person again (the SDK alone goes straight to a new
  authorization; for the SDK's client: `consumers.oauth`);
- the person: an authorization code comes back on a loopback redirect (`consumers.oauth`); the URL is shown
  by `triad login`, or given to the configured `browser` command; without either the daemon does not wait for
  anyone and the upstream fails with `UpstreamAuthorizationRequired`, naming `triad login`. A user's own
  authorization (`auth: per_user`) comes back on Triad's HTTP app when it serves one (`consumers.oauth`), so
  that the person may be anywhere;
- tokens another process stored meanwhile (another replica's refresh, a `triad login`) are taken up before
  refreshing or answering a 401 (`_take_up_stored`).

Tokens live in a `TokenStorage` (`consumers.oauth`); they never reach a log line, an error or a metric.
One `UpstreamOAuth` per credential (Triad's, or one user's), shared by every connection that uses it
(`consumers.oauth`); it holds no connection: the direct path's flows use a client of their own.
"""

from __future__ import annotations

import logging
import shlex
import time
import warnings
from typing import TYPE_CHECKING

import anyio
import httpx2
from mcp.client.auth import AuthorizationCodeResult, OAuthClientProvider
from mcp.client.auth.extensions.client_credentials import ClientCredentialsOAuthProvider
from mcp.shared.auth import (
    OAuthClientInformationFull,
    OAuthClientMetadata,
    OAuthMetadata,
    OAuthToken,
    ProtectedResourceMetadata,
)
from pydantic import AnyUrl

from consumers._http_rules import HTTP_RULES
from consumers._sdk import IssuerNamedProvider
from consumers.config import AUTHORIZATION_WAIT, UpstreamAuthConfig
from consumers.errors import UpstreamAuthorizationFailed, UpstreamAuthorizationRequired
from consumers.log_fields import log_fields
from consumers.oauth._asking import Asker, Declined
from consumers.oauth._http_auth import AuthorizationErrors, RefreshingAuth
from consumers.oauth._lifetime import refresh_lead
from consumers.oauth._loopback import LoopbackRedirect, redirect_uri
from consumers.oauth._server_rules import require_pkce, server_name
from consumers.oauth._token_store import ForRedirect, Preregistered, TokenStorage, token_store

if TYPE_CHECKING:
    from consumers.oauth._credentials import UserAuthorization

logger = logging.getLogger("triad.upstream")

AUTH_REQUEST_TIMEOUT = 30.0
"""Seconds for one discovery, registration or token request of the direct path's flows."""
BROWSER_WAIT = 60.0
"""How long the `browser` command may run (a real one hands the URL to a browser and exits)."""


class UpstreamOAuth:
    """One credential towards one upstream: the SDK provider, its store, and the person to ask."""

    def __init__(self, upstream: str, url: str, config: UpstreamAuthConfig, ask: Asker | None = None,
                 user: str | None = None, for_users: UserAuthorization | None = None) -> None:
        """`user`: whose credential this is (`auth: per_user`); None for Triad's own. `for_users`: where a user's
        tokens are kept and their authorization comes back, when not in a file and on the loopback redirect."""
        self.upstream = upstream
        self._url = url
        self._config = config
        self.ask = ask
        """How to show a person the authorization URL (None: `auth.browser`, or no one)."""
        self._user = user
        self._redirects = for_users.redirects if for_users is not None and user is not None else None
        stores = for_users.stores if for_users is not None and user is not None else None
        self.store = stores(upstream, user) if stores is not None and user is not None else token_store(config, user)
        self._seeded = False
        self._state: str | None = None
        """The state of the authorization waiting on Triad's own callback route (`_redirects`)."""
        self._taken_up = False
        """The last `_take_up_stored` found fresh tokens."""
        self._discovered: OAuthMetadata | None = None
        self._pending: LoopbackRedirect | None = None
        """The loopback redirect of the authorization under way (opened by `_redirect`, closed by `_callback`)."""
        self._refreshing = anyio.Lock()
        """Held by the one refresh in flight for this credential; its other callers wait, then use its outcome."""
        self._answered: int | None = None
        """The status the authorization server last answered a request of the flow with."""
        self.provider = self._provider(url)

    def __repr__(self) -> str:
        return f"UpstreamOAuth({self.upstream!r}, {self.store!r})"

    def _provider(self, url: str) -> OAuthClientProvider:
        config = self._config
        secret = config.client_secret.get_secret_value() if config.client_secret is not None else None
        scope = " ".join(config.scopes) or None
        if config.grant == "client_credentials":
            assert config.client_id is not None and secret is not None
            post = config.token_endpoint_auth_method == "client_secret_post"
            with warnings.catch_warnings():  # without `issuer` the SDK warns once: the config says it is optional
                warnings.simplefilter("ignore")
                return ClientCredentialsOAuthProvider(url, self.store, config.client_id, secret,
                                                      "client_secret_post" if post else "client_secret_basic",
                                                      scope, config.issuer)
        redirect = self._redirects.redirect_uri(self.upstream) if self._redirects is not None \
            else redirect_uri(config.redirect_port)
        storage: TokenStorage = ForRedirect(self.store, redirect)
        if config.client_id is not None:
            method = config.token_endpoint_auth_method or ("client_secret_basic" if secret else "none")
            storage = Preregistered(self.store, OAuthClientInformationFull(
                client_id=config.client_id, client_secret=secret, token_endpoint_auth_method=method,
                redirect_uris=[AnyUrl(redirect)], issuer=config.issuer))
        metadata = OAuthClientMetadata(redirect_uris=[AnyUrl(redirect)], client_name=config.client_name, scope=scope)
        provider = IssuerNamedProvider(url, metadata, storage, self._redirect, self._callback,
                                       client_metadata_url=config.client_metadata_url)
        provider.issuer = config.issuer
        return provider

    def serves(self, url: str, config: UpstreamAuthConfig) -> bool:
        return (url, config) == (self._url, self._config)

    @property
    def http_auth(self) -> httpx2.Auth:
        return RefreshingAuth(self)

    # -- the direct HTTP path ------------------------------------------------------------------------------------

    async def authorization(self) -> str | None:
        """The `Authorization` value for the next request (refreshed first when it is about to expire). A valid
        token that is not due is answered at once: driving the SDK's flow costs about 0.24 ms of CPU a request."""
        context = self.provider.context
        tokens = context.current_tokens
        if self._seeded and tokens is not None and context.is_token_valid() and not self._due():
            return f"Bearer {tokens.access_token}"
        await self.renew_if_due()
        tokens = context.current_tokens
        if tokens is not None and context.is_token_valid() and not self._due():
            return f"Bearer {tokens.access_token}"
        await self._take_up_stored()
        return await self._drive(None)

    async def challenged(self, status: int, www_authenticate: str | None, rejected: str | None) -> str | None:
        """The upstream answered `status` (401, or 403 `insufficient_scope`) to a request sent with `rejected`:
        the value to retry with, or None (nothing better to send)."""
        current = self.provider.context.current_tokens
        if current is not None and f"Bearer {current.access_token}" != rejected:
            return f"Bearer {current.access_token}"  # another request already renewed it
        if await self._take_up_stored() and (stored := self.provider.context.current_tokens) is not None:
            return f"Bearer {stored.access_token}"  # another replica or process renewed it
        if status == 401 and self.provider.context.can_refresh_token():
            async with self._refreshing:
                current = self.provider.context.current_tokens
                if current is not None and f"Bearer {current.access_token}" != rejected:
                    return f"Bearer {current.access_token}"  # renewed by the refresh this one waited for
                self._force_refresh()
                renewed = await self._drive(None)
            if renewed is not None and renewed != rejected:
                return renewed
        headers = {"www-authenticate": www_authenticate} if www_authenticate else {}
        return await self._drive(httpx2.Response(status, headers=headers))

    async def _drive(self, answer: httpx2.Response | None) -> str | None:
        """Run the SDK's flow for a stand-in request: its discovery, registration and token requests go out on
        the bound client; `answer` is what the stand-in got (None: stop as soon as it is ready to go)."""
        await self._seed()
        probe = httpx2.Request("POST", str(self.provider.context.server_url))
        flow = self.provider.async_auth_flow(probe)
        try:
            # A client of its own (the flow runs rarely: a refresh, a challenge), following no redirect itself.
            async with httpx2.AsyncClient(timeout=AUTH_REQUEST_TIMEOUT, follow_redirects=False,
                                          trust_env=HTTP_RULES.trust_env) as http:
                with AuthorizationErrors(self.upstream, self._config.issuer):
                    outgoing = await flow.__anext__()
                    while True:
                        if outgoing is probe:
                            if answer is None:
                                return probe.headers.get("authorization")
                            response, answer = answer, None
                            response.request = probe
                        else:
                            response = await http.send(outgoing)
                            await response.aread()
                            self._answered = response.status_code
                        outgoing = await flow.asend(response)
        except StopAsyncIteration:
            return None
        finally:
            await flow.aclose()
            await self._remember()

    # -- shared by both paths ------------------------------------------------------------------------------------

    async def _seed(self) -> None:
        """The stored tokens' expiry, which the SDK does not keep across restarts (it knows only `expires_in`)."""
        if self._seeded:
            return
        self._seeded = True
        context = self.provider.context
        tokens = await self.store.get_tokens()
        if tokens is not None and context.current_tokens is None:
            context.current_tokens = tokens
            context.token_expiry_time = self.store.expires_at
        if context.client_info is None:  # without it a token cannot be refreshed (`can_refresh_token`)
            context.client_info = await context.storage.get_client_info()
        discovery = await self.store.get_discovery()
        if context.oauth_metadata is None and isinstance(discovery.get("server"), dict):
            context.oauth_metadata = self._discovered = OAuthMetadata.model_validate(discovery["server"])
            context.auth_server_url = discovery.get("server_url")
            if isinstance(discovery.get("resource"), dict):
                context.protected_resource_metadata = ProtectedResourceMetadata.model_validate(discovery["resource"])

    async def _take_up_stored(self) -> bool:
        """Adopt tokens stored since this source last read them (another replica refreshed or authorized, a
        `triad login` ran); True when there were such. Read only when a token is due, missing or refused."""
        context = self.provider.context
        self._taken_up = False
        try:
            stored = await self.store.get_tokens()
        except OSError as exc:  # the store is unreachable (the cluster's Redis): go on with what is held here
            logger.debug("upstream %s: stored tokens not read: %s", self.upstream, exc)
            return False
        current = context.current_tokens
        if stored is None or (current is not None and stored.access_token == current.access_token):
            return False
        context.current_tokens = stored
        context.token_expiry_time = self.store.expires_at
        self._taken_up = not self._due() and context.is_token_valid()
        return self._taken_up

    async def _remember(self) -> None:
        context = self.provider.context
        if context.oauth_metadata is None or context.oauth_metadata is self._discovered:
            return
        self._discovered = context.oauth_metadata
        resource = context.protected_resource_metadata
        await self.store.set_discovery({
            "server": context.oauth_metadata.model_dump(mode="json", exclude_none=True),
            "server_url": context.auth_server_url,
            "resource": resource.model_dump(mode="json", exclude_none=True) if resource is not None else None})

    async def renew_if_due(self) -> None:
        """Refresh the token if it is due (`refresh_lead`), once for every caller of this credential (those that
        come meanwhile wait for it and use its outcome). A failed refresh leaves a still valid token in use (a
        warning); an expired one fails the caller only, naming the authorization server and what failed."""
        await self._seed()
        if not self._due():
            return
        context = self.provider.context
        async with self._refreshing:
            if not self._due() or await self._take_up_stored():
                return  # refreshed meanwhile, here or by another process
            try:
                async with self.store.refresh_lock():
                    if not await self._take_up_stored():  # another replica refreshed while this one waited
                        await self._refresh()
            except OSError as exc:  # the shared store is unreachable: no refresh is safe from a reuse
                self._refresh_failed(context.current_tokens, context.token_expiry_time, str(exc))

    async def _refresh(self) -> None:
        context = self.provider.context
        held, expiry = context.current_tokens, context.token_expiry_time
        self._force_refresh()
        self._answered = None
        try:
            await self._drive(None)
        except UpstreamAuthorizationFailed as exc:
            cause = exc.__cause__
            failure = f"{type(cause).__name__}: {cause}" if cause is not None else str(exc)
        else:
            if context.current_tokens is not None and context.current_tokens is not held \
                    and context.is_token_valid():
                return
            failure = f"it answered HTTP {self._answered}" if self._answered is not None else "no token came back"
        context.current_tokens, context.token_expiry_time = held, expiry  # the SDK dropped them on a refusal
        self._refresh_failed(held, expiry, failure)

    def _refresh_failed(self, held: OAuthToken | None, expiry: float | None, failure: str) -> None:
        """Go on with the token held while it is valid (logged); else fail the caller, naming the server."""
        context = self.provider.context
        server = server_name(context.oauth_metadata, context.auth_server_url or self._url)
        message = f"upstream {self.upstream!r}: the token refresh at the authorization server {server} failed " \
                  f"({failure})"
        left = expiry - time.time() if expiry is not None else None
        if held is not None and left is not None and left > 0:
            logger.warning("%s; the token held is still valid for %.0fs and is used meanwhile", message, left,
                           extra=log_fields(self.upstream, "oauth_refresh_failed"))
            return
        raise UpstreamAuthorizationFailed(self.upstream, message)

    def _due(self) -> bool:
        context = self.provider.context
        tokens = context.current_tokens
        lifetime = tokens.expires_in if tokens is not None else None
        return context.token_expiry_time is not None and context.can_refresh_token() \
            and time.time() >= context.token_expiry_time - refresh_lead(lifetime)

    def _force_refresh(self) -> None:
        self.provider.context.token_expiry_time = 1.0  # expired: the SDK's flow refreshes before anything else

    @property
    def tokens(self) -> OAuthToken | None:
        return self.provider.context.current_tokens

    # -- the person ----------------------------------------------------------------------------------------------

    async def _redirect(self, url: str) -> None:
        context = self.provider.context
        require_pkce(self.upstream, context.oauth_metadata, context.auth_server_url or self._url)
        if self._user is not None and self.ask is None:  # never the operator's browser for a user's credential
            raise UpstreamAuthorizationRequired(
                self.upstream, f"upstream {self.upstream!r} needs your own authorization, and your client cannot "
                "open a link (URL-mode elicitation): ask the operator to run "
                f"`triad login {self.upstream} --client <your client id>`")
        if self.ask is None and self._config.browser is None:
            raise UpstreamAuthorizationRequired(
                self.upstream, f"upstream {self.upstream!r} needs authorization: run `triad login {self.upstream}` "
                "(or set auth.browser)")
        self._check_registration()
        if self._redirects is not None:
            await self._ask_to_come_back_here(url)
            return
        pending = LoopbackRedirect(self._config.redirect_port)
        await pending.open()
        self._pending = pending
        try:
            if self.ask is not None:
                try:
                    await self.ask(url)
                except Declined:
                    raise UpstreamAuthorizationRequired(
                        self.upstream, f"upstream {self.upstream!r}: the authorization was declined") from None
            else:
                assert self._config.browser is not None
                logger.info("upstream %s: asking for authorization through auth.browser", self.upstream)
                with anyio.move_on_after(BROWSER_WAIT):
                    await anyio.run_process([*shlex.split(self._config.browser), url], check=False)
        except BaseException:
            self._pending = None
            await pending.close()
            raise

    def _check_registration(self) -> None:
        """A registration made for another redirect URI kept for its refresh token (`ForRedirect`), now that an
        authorization is needed after all: dropped, so that the next attempt registers anew (this one fails
        saying so)."""
        context = self.provider.context
        registered = context.client_info.redirect_uris if context.client_info is not None else None
        wanted = context.client_metadata.redirect_uris or []
        if self._config.client_id is not None or not registered \
                or {str(uri) for uri in wanted} & {str(uri) for uri in registered}:
            return
        context.client_info = None
        raise UpstreamAuthorizationRequired(
            self.upstream, f"upstream {self.upstream!r}: Triad's registration there was made for another redirect "
            "address; it registers anew: try again")

    async def _ask_to_come_back_here(self, url: str) -> None:
        """The user's authorization, answered on Triad's own callback route, where it is expected for them."""
        assert self._redirects is not None and self._user is not None and self.ask is not None
        url, self._state = self._redirects.expect(self.upstream, self._user, url)
        try:
            await self.ask(url)
        except BaseException as exc:
            self._redirects.forget(self._state)
            self._state = None
            if isinstance(exc, Declined):
                raise UpstreamAuthorizationRequired(
                    self.upstream, f"upstream {self.upstream!r}: the authorization was declined") from None
            raise

    async def _callback(self) -> AuthorizationCodeResult:
        pending, self._pending = self._pending, None
        state, self._state = self._state, None
        try:
            with anyio.fail_after(AUTHORIZATION_WAIT):
                if state is not None and self._redirects is not None:
                    return await self._redirects.result(state)
                assert pending is not None
                return await pending.result()
        except TimeoutError:
            raise UpstreamAuthorizationRequired(
                self.upstream, f"upstream {self.upstream!r}: no authorization came back within "
                f"{AUTHORIZATION_WAIT:g}s") from None
        finally:
            if state is not None and self._redirects is not None:
                self._redirects.forget(state)
            if pending is not None:
                await pending.close()
