"""OAuth 2.1 access tokens in, Triad identities out (MCP authorization, 2025-11-25 and 2026-07-28).

A token is a JWT checked here, locally, with PyJWT (with `token_type: at+jwt`, only one whose `typ` says it is
an access token), or, with `introspection` configured, an opaque token the authorization server vouches for
(`exposers.auth`, RFC 7662), held to the same checks: its signature by one of the issuer's keys
(`exposers.auth`), `iss` equal to `auth.oauth.issuer`, `aud` holding Triad's canonical resource URI
(RFC 8707: a token minted for another resource is refused), `exp` and `nbf` (with `leeway`), a subject, and the
configured scopes. What the token says then becomes an `Identity`: the client claim picks a configured client (or
the default one), the groups claim adds groups, the agent and provider claims fill what the client's config leaves
open, and the issuer and subject become the identity's `principal`, to which its sessions are bound. The token
itself goes no further than this module: nothing downstream of the HTTP edge ever sees it, and no upstream is
ever sent it (upstreams get their own configured headers, or nothing).

    TriadError
     ├── TokenRejected          401 `invalid_token`: bad signature, issuer, audience, expiry, shape
     │    ├── InsufficientScope 403 `insufficient_scope`: a good token without the scopes Triad requires
     │    └── MalformedAuthorization 400 `invalid_request`: an `Authorization` header that is no bearer credential
     └── KeysUnavailable        503: the issuer's keys cannot be had (`exposers.auth`)

Ownership: `TokenValidator` holds one `KeySet`; `TokenGate` keeps the validator of the config in force and
replaces it when a reload changes `auth.oauth`.
"""

from __future__ import annotations

import dataclasses
import logging
import re
import time
from collections.abc import Mapping
from typing import Any

import jwt

from consumers import JSON, JSONObject
from exposers.auth._introspection import Introspector, TokenInactive
from exposers.auth._keys import KeySet, KeysUnavailable, UnknownKey
from gateway.config import OAuthConfig, TriadConfig
from gateway.errors import INVALID_REQUEST, TriadError
from gateway.identity import Identity, identity_for

__all__ = ["InsufficientScope", "KeysUnavailable", "MalformedAuthorization", "TokenGate", "TokenRejected",
           "TokenValidator", "bearer_token", "identity_from_claims", "token_scopes"]

logger = logging.getLogger(__name__)

ACCESS_TOKEN_TYPES = ("at+jwt", "application/at+jwt")
"""The JWT `typ` of an access token (RFC 9068 §2.1), required with `token_type: at+jwt`."""
MAX_TOKEN_LENGTH = 16_384
"""Characters of an access token; a longer one is refused unread."""
MAX_GROUPS = 256
MAX_CLAIM_VALUE = 256
"""Groups taken from a token, and characters of one group, agent or provider value; longer values are dropped."""


class TokenRejected(TriadError):
    """The access token is not one Triad accepts. `error` is the RFC 6750 code of the challenge."""

    code = INVALID_REQUEST
    status = 401
    error = "invalid_token"


class InsufficientScope(TokenRejected):
    """A valid token without every scope Triad requires: the client may step up (re-authorize with `scopes`)."""

    status = 403
    error = "insufficient_scope"


class MalformedAuthorization(TokenRejected):
    """RFC 6750 §3.1: a request with a malformed `Authorization` header is answered 400 `invalid_request` (a
    missing one stays 401, without an error code)."""

    status = 400
    error = "invalid_request"


BEARER = re.compile(r"[Bb][Ee][Aa][Rr][Ee][Rr] +([A-Za-z0-9\-._~+/]+=*)")
"""RFC 6750 §2.1, `credentials = "Bearer" 1*SP b64token`; the scheme is case-insensitive (RFC 9110 §11.1)."""


def bearer_token(headers: list[tuple[bytes, bytes]]) -> str | None:
    """The bearer token of a request's headers (ASGI's raw list: several `Authorization` fields stay visible);
    None without one; `MalformedAuthorization` for several, another scheme, no token, or anything but a
    b64token after the scheme (non-ASCII, spaces or a second parameter included)."""
    fields = [value for key, value in headers if key.lower() == b"authorization"]
    if not fields:
        return None
    if len(fields) > 1:
        raise MalformedAuthorization("a request carries one Authorization header")
    found = BEARER.fullmatch(fields[0].decode("latin-1"))
    if found is None or len(found.group(1)) > MAX_TOKEN_LENGTH:
        raise MalformedAuthorization("the Authorization header must be `Bearer <token>` (RFC 6750)")
    return found.group(1)


def token_scopes(claims: Mapping[str, JSON]) -> frozenset[str]:
    """`scope` (RFC 9068: space-separated) or `scp` (a list, as some servers write it)."""
    found = claims.get("scope", claims.get("scp"))
    if isinstance(found, str):
        return frozenset(found.split())
    if isinstance(found, list):
        return frozenset(item for item in found if isinstance(item, str))
    return frozenset()


class TokenValidator:
    def __init__(self, config: OAuthConfig, keys: KeySet | None = None) -> None:
        self.config = config
        self.keys = keys or KeySet(config)
        self.introspector = Introspector(config, config.introspection) if config.introspection is not None else None

    async def claims(self, token: str) -> JSONObject:
        """The verified claims of `token`, or `TokenRejected` / `InsufficientScope` saying why not."""
        config = self.config
        if len(token) > MAX_TOKEN_LENGTH:
            raise TokenRejected("the access token is too long")
        try:
            header = jwt.get_unverified_header(token)
        except jwt.PyJWTError as exc:
            if self.introspector is None:
                raise TokenRejected("the access token is not a JWT") from exc
            return self._checked(await self._introspected(token))
        if config.token_type == "at+jwt" and str(header.get("typ", "")).lower() not in ACCESS_TOKEN_TYPES:
            raise TokenRejected("the token is not an access token (its typ is not at+jwt)")
        algorithm = header.get("alg")
        if algorithm not in config.algorithms:
            raise TokenRejected("the access token is signed with an algorithm Triad does not accept")
        kid = header.get("kid")
        try:
            key = await self.keys.key(kid if isinstance(kid, str) else None)
        except UnknownKey as exc:
            raise TokenRejected(exc.message) from exc
        try:
            try:
                claims: JSONObject = self._decoded(token, key, algorithm)
            except jwt.InvalidSignatureError:
                # Perhaps a key replaced under the same kid: refetch (rate limited) and try the new key once.
                if (replaced := await self.keys.refetched(kid if isinstance(kid, str) else None, key)) is None:
                    raise
                claims = self._decoded(token, replaced, algorithm)
        except jwt.ExpiredSignatureError as exc:
            raise TokenRejected("the access token has expired") from exc
        except jwt.ImmatureSignatureError as exc:
            raise TokenRejected("the access token is not valid yet") from exc
        except jwt.InvalidAudienceError as exc:
            raise TokenRejected("the access token was not issued for this resource") from exc
        except jwt.InvalidIssuerError as exc:
            raise TokenRejected("the access token was not issued by the configured issuer") from exc
        except jwt.InvalidSignatureError as exc:
            raise TokenRejected("the access token's signature does not verify") from exc
        except jwt.PyJWTError as exc:
            raise TokenRejected(f"the access token is invalid ({type(exc).__name__})") from exc
        return self._checked(claims)

    def _decoded(self, token: str, key: jwt.PyJWK, algorithm: str) -> JSONObject:
        config = self.config
        claims: JSONObject = jwt.decode(token, key, algorithms=[algorithm], audience=config.audience,
                                        issuer=config.issuer, leeway=config.leeway,
                                        options={"require": ["exp", "iss", "aud", "sub"]})
        return claims

    async def _introspected(self, token: str) -> JSONObject:
        """An opaque token's claims from the authorization server, held to what a JWT's are (RFC 7662 §4: the
        resource server decides what an active token may do here)."""
        config = self.config
        assert self.introspector is not None
        try:
            claims = await self.introspector.claims(token)
        except TokenInactive as exc:
            raise TokenRejected("the access token is not active") from exc
        if claims.get("iss", config.issuer) != config.issuer:
            raise TokenRejected("the access token was not issued by the configured issuer")
        audience = claims.get("aud")
        if config.audience not in ([audience] if isinstance(audience, str) else audience or []):
            raise TokenRejected("the access token was not issued for this resource")
        now = time.time()
        expires, not_before = claims.get("exp"), claims.get("nbf")
        if not isinstance(expires, int | float) or expires + config.leeway <= now:
            raise TokenRejected("the access token has expired")
        if isinstance(not_before, int | float) and not_before - config.leeway > now:
            raise TokenRejected("the access token is not valid yet")
        # A machine's token (client credentials) may name no subject: it is the client (RFC 9068 §2.2 on `sub`).
        subject = claims.get("sub") or claims.get("client_id")
        return {**claims, "iss": config.issuer, "sub": subject}

    def _checked(self, claims: JSONObject) -> JSONObject:
        if not isinstance(claims.get("sub"), str) or not claims["sub"]:
            raise TokenRejected("the access token names no subject")
        missing = [scope for scope in self.config.scopes if scope not in token_scopes(claims)]
        if missing:
            raise InsufficientScope(f"the access token lacks the scope {' '.join(missing)}")
        return claims


def identity_from_claims(config: TriadConfig, oauth: OAuthConfig, claims: Mapping[str, JSON]) -> Identity:
    """Who a verified token makes the caller (see the module docstring). `owner` comes only from a configured
    client that a mapping in `auth.oauth.clients` names, never from a claim."""
    named = claims.get(oauth.client_claim)
    client_id = (oauth.clients.get(named) if isinstance(named, str) else None) or oauth.default_client
    identity = identity_for(config, client_id) if client_id in config.clients else Identity(client_id)
    # Any: keyword arguments of dataclasses.replace, each of its own field's type (not JSON)
    changes: dict[str, Any] = {"principal": (str(claims["iss"]), str(claims["sub"]))}
    if oauth.groups_claim is not None:
        extra = _groups(claims.get(oauth.groups_claim))
        changes["groups"] = (*identity.groups, *(group for group in extra if group not in identity.groups))
    if identity.agent is None and (agent := _short(claims, oauth.agent_claim)) is not None:
        changes["agent"] = agent
    if identity.provider is None and (provider := _short(claims, oauth.provider_claim)) is not None:
        changes["provider"] = provider
    return dataclasses.replace(identity, **changes)


def _groups(value: JSON) -> tuple[str, ...]:
    items = value.split() if isinstance(value, str) else value if isinstance(value, list) else []
    found = [item for item in items if isinstance(item, str) and 0 < len(item) <= MAX_CLAIM_VALUE]
    return tuple(dict.fromkeys(found))[:MAX_GROUPS]


def _short(claims: Mapping[str, JSON], name: str | None) -> str | None:
    value = claims.get(name) if name is not None else None
    return value if isinstance(value, str) and 0 < len(value) <= MAX_CLAIM_VALUE else None


class TokenGate:
    """The validator for the config in force: kept while `auth.oauth` stays the same across reloads (its cached
    keys with it), replaced when it changes."""

    def __init__(self) -> None:
        self._validator: TokenValidator | None = None

    def validator(self, oauth: OAuthConfig) -> TokenValidator:
        if self._validator is None or self._validator.config != oauth:
            self._validator = TokenValidator(oauth)
        return self._validator

    async def identify(self, config: TriadConfig, token: str) -> Identity:
        """The identity of an OAuth access token; `TokenRejected` (or `KeysUnavailable`) when it is not one."""
        oauth = config.auth.oauth
        if oauth is None:
            raise TokenRejected("a valid bearer token is required")
        try:
            claims = await self.validator(oauth).claims(token)
        except TokenRejected as exc:
            logger.info("OAuth: refused an access token: %s", exc.message)
            raise
        return identity_from_claims(config, oauth, claims)
