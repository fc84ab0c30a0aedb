"""`auth:` — Triad as an OAuth 2.1 protected resource: which access tokens it accepts, and who they make the
caller (checked by `exposers.auth`)."""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import BaseModel, BeforeValidator, ConfigDict, Field, SecretStr

from consumers import JSON
from consumers.config import Duration, parse_duration


class _Model(BaseModel):  # as in `gateway.config._models`: unknown keys are errors, a loaded config never changes
    model_config = ConfigDict(extra="forbid", frozen=True)


DEFAULT_OAUTH_CLIENT = "oauth"
"""The client an OAuth token acts as when its client claim names no client in `auth.oauth.clients`."""


def _duration_or_zero(value: JSON) -> float:
    """A duration, or zero (`0`, `0s`): for settings where none at all is meaningful, such as a clock leeway."""
    if not isinstance(value, bool) and isinstance(value, int | float | str) and str(value).strip() in ("0", "0s",
                                                                                                         "0.0"):
        return 0.0
    return parse_duration(value)


DurationOrZero = Annotated[float, BeforeValidator(_duration_or_zero)]


class IntrospectionConfig(_Model):
    """`auth.oauth.introspection`: how Triad asks the authorization server about an opaque token (RFC 7662)."""

    endpoint: str | None = Field(default=None, pattern=r"^https?://")
    """Default: `introspection_endpoint` of the issuer's metadata."""
    client_id: str = Field(min_length=1)
    client_secret: SecretStr
    """Triad's credentials at the endpoint (HTTP Basic)."""
    cache: Duration = 60.0
    """How long an active answer is reused (never past the token's `exp`); inactive answers are not kept."""


class OAuthConfig(_Model):
    """Triad as an OAuth 2.1 protected resource (`auth.oauth`): which access tokens it accepts, and who they make
    the caller. Tokens are JWTs checked locally (`exposers.auth`) against the issuer's published keys."""

    issuer: str = Field(min_length=1)
    """The authorization server; compared with `iss` exactly as written (no trailing-slash normalisation)."""
    audience: str = Field(pattern=r"^https?://[^#]+$")
    """Triad's canonical resource URI (RFC 8707), e.g. `https://triad.example/mcp`: a token's `aud` must hold it,
    and it is the `resource` of the protected resource metadata."""
    authorization_servers: tuple[str, ...] = ()
    """What the metadata document names (default: `issuer`)."""
    scopes: tuple[str, ...] = ()
    """Scopes every request's token must carry; named in 401 and 403 challenges and in `scopes_supported`."""
    jwks_uri: str | None = None
    """Where the signing keys are; default: `jwks_uri` of the issuer's metadata (RFC 8414, then OIDC discovery)."""
    algorithms: tuple[str, ...] = ("RS256", "PS256", "ES256", "EdDSA")
    client_claim: str = "client_id"
    """The claim naming the OAuth client; its value picks a configured client through `clients`."""
    clients: dict[str, str] = {}
    """Value of `client_claim` -> a client id of `clients:`, whose agent, provider, groups and owner flag apply."""
    default_client: str = DEFAULT_OAUTH_CLIENT
    """The client any other token acts as (configured in `clients:` or not; never an owner unless configured)."""
    groups_claim: str | None = None
    """A claim (a list, or a space-separated string) whose groups join the client's configured ones."""
    agent_claim: str | None = None
    provider_claim: str | None = None
    """Claims giving agent and provider when the client's config fixes none."""
    leeway: DurationOrZero = Field(default=30.0, ge=0)
    """Clock skew allowed on `exp` and `nbf`."""
    jwks_cache: Duration = Field(default=300.0, gt=0)
    """How long fetched keys are used before they are fetched again."""
    jwks_refetch_interval: DurationOrZero = Field(default=30.0, ge=0)
    """A token signed with an unknown `kid` refetches the keys once, at most this often (key rotation)."""
    token_type: Literal["any", "at+jwt"] = "any"
    """`at+jwt`: a JWT must say it is an access token (header `typ: at+jwt`, RFC 9068 §4), so that an ID token
    or another JWT the issuer signed is never taken for one."""
    introspection: IntrospectionConfig | None = None
    """Opaque (non-JWT) tokens are checked at the issuer's introspection endpoint (RFC 7662); unset: refused."""


class AuthConfig(_Model):
    oauth: OAuthConfig | None = None
