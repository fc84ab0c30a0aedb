"""The SDK client's httpx auth towards an OAuth upstream (`UpstreamOAuth.http_auth`), and the SDK's OAuth failures
as Triad's upstream errors (for it and for the direct path's flows in `consumers.oauth`)."""

from __future__ import annotations

import re
from collections.abc import AsyncGenerator
from typing import TYPE_CHECKING

import httpx2
from mcp.client.auth import OAuthFlowError, OAuthRegistrationError, OAuthTokenError

from consumers import _sdk as sdk
from consumers.errors import UpstreamAuthorizationFailed

if TYPE_CHECKING:
    from consumers.oauth._client import UpstreamOAuth


class RefreshingAuth(httpx2.Auth):
    """The SDK client's auth: the provider's flow, refreshed before expiry (`UpstreamOAuth.renew_if_due`, one at a
    time per credential), and refreshed once on a 401 before the provider's own answer to a 401 (a new
    authorization) is tried."""

    def __init__(self, owner: UpstreamOAuth) -> None:
        self._owner = owner

    async def async_auth_flow(self, request: httpx2.Request) -> AsyncGenerator[httpx2.Request, httpx2.Response]:
        owner = self._owner
        await owner._seed()
        context = owner.provider.context
        await owner.renew_if_due()
        if not context.is_token_valid():
            await owner._take_up_stored()
        refreshed = False
        flow = owner.provider.async_auth_flow(request)
        try:
            with AuthorizationErrors(owner.upstream, owner._config.issuer):
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


ISSUER_MISMATCH = re.compile(r"^Authorization server metadata issuer mismatch: (\S+) != (\S+)$")
"""The SDK's refusal of metadata naming another issuer (`validate_metadata_issuer`): seen, then expected."""
ADVERTISED_ANOTHER = re.compile(rf"^{re.escape(sdk.ADVERTISED_ANOTHER)}: (\S+) != (\S+)$")


class AuthorizationErrors:
    """The SDK's OAuth failures as Triad's upstream errors (their messages carry no token); an issuer mismatch
    says which issuer was expected, which was seen, and the setting that allows it, in one line."""

    def __init__(self, upstream: str, issuer: str | None = None) -> None:
        """`issuer`: the upstream's `auth.issuer`, if set."""
        self._upstream = upstream
        self._issuer = issuer

    def __enter__(self) -> None:
        return None

    def __exit__(self, kind: type[BaseException] | None, exc: BaseException | None, _tb: object) -> None:
        if isinstance(exc, OAuthFlowError) and (message := self._issuer_message(str(exc))) is not None:
            raise UpstreamAuthorizationFailed(self._upstream, message) from None
        if isinstance(exc, OAuthFlowError | OAuthTokenError | OAuthRegistrationError | httpx2.HTTPError | OSError):
            raise UpstreamAuthorizationFailed(
                self._upstream, f"upstream {self._upstream!r}: authorization failed: {exc}") from exc

    def _issuer_message(self, error: str) -> str | None:
        setting = f"upstreams.{self._upstream}.auth.issuer"
        if (advertised := ADVERTISED_ANOTHER.match(error)) is not None:
            return (f"upstream {self._upstream!r}: it advertises the authorization server {advertised[1]!r}, not "
                    f"the issuer {advertised[2]!r} that {setting} names")
        if (mismatch := ISSUER_MISMATCH.match(error)) is None:
            return None
        seen, expected = mismatch[1], mismatch[2]
        where = f"that {setting} names" if self._issuer is not None else "the upstream advertises"
        return (f"upstream {self._upstream!r}: the authorization server's metadata presents the issuer {seen!r}, "
                f"not {expected!r} as {where} (RFC 8414 compares them exactly); if that server is the one meant, "
                f"set {setting}: {seen!r}")
