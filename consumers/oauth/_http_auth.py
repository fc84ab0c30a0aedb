"""The SDK client's httpx auth towards an OAuth upstream (`UpstreamOAuth.http_auth`), and the SDK's OAuth failures
as Triad's upstream errors (for it and for the direct path's flows in `consumers.oauth`)."""

from __future__ import annotations

from collections.abc import AsyncGenerator
from typing import TYPE_CHECKING

import httpx2
from mcp.client.auth import OAuthFlowError, OAuthRegistrationError, OAuthTokenError

from consumers.errors import UpstreamAuthorizationFailed

if TYPE_CHECKING:
    from consumers.oauth._client import UpstreamOAuth


class RefreshingAuth(httpx2.Auth):
    """The SDK client's auth: the provider's flow, refreshed before expiry, and refreshed once on a 401 before the
    provider's own answer to a 401 (a new authorization) is tried."""

    def __init__(self, owner: UpstreamOAuth) -> None:
        self._owner = owner

    async def async_auth_flow(self, request: httpx2.Request) -> AsyncGenerator[httpx2.Request, httpx2.Response]:
        owner = self._owner
        await owner._seed()
        context = owner.provider.context
        if owner._due() or not context.is_token_valid():
            await owner._take_up_stored()
        owner._refresh_if_due()
        refreshed = False
        flow = owner.provider.async_auth_flow(request)
        try:
            with AuthorizationErrors(owner.upstream):
                outgoing = await flow.__anext__()
                while True:
                    response = yield outgoing
                    if outgoing is request and response.status_code == 401 and not refreshed \
                            and (await owner._take_up_stored() or context.can_refresh_token()):
                        refreshed = True
                        await flow.aclose()
                        if not owner._taken_up:
                            owner._force_refresh()
                        flow = owner.provider.async_auth_flow(request)
                        outgoing = await flow.__anext__()
                        continue
                    outgoing = await flow.asend(response)
        except StopAsyncIteration:
            return
        finally:
            await flow.aclose()
            await owner._remember()


class AuthorizationErrors:
    """The SDK's OAuth failures as Triad's upstream errors (their messages carry no token)."""

    def __init__(self, upstream: str) -> None:
        self._upstream = upstream

    def __enter__(self) -> None:
        return None

    def __exit__(self, kind: type[BaseException] | None, exc: BaseException | None, _tb: object) -> None:
        if isinstance(exc, OAuthFlowError | OAuthTokenError | OAuthRegistrationError | httpx2.HTTPError | OSError):
            raise UpstreamAuthorizationFailed(
                self._upstream, f"upstream {self._upstream!r}: authorization failed: {exc}") from exc
