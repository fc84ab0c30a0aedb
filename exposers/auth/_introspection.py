"""Opaque access tokens, checked by asking the authorization server (token introspection, RFC 7662).

Configured by `auth.oauth.introspection`: Triad posts the token to the introspection endpoint (its own, or the one
the issuer's metadata names) with its client credentials, and takes an `active` answer as the token's claims,
which then go through the same checks as a JWT's (`exposers.auth`): issuer, audience, expiry, subject, scopes.
An active answer is cached for `cache` (never past its `exp`), keyed by a hash of the token, so a busy client
does not cost one round trip per request; at most `MAX_CACHED` answers are kept.

Ownership: one `Introspector` per `OAuthConfig`, held by `exposers.auth.TokenValidator`; no task of its own.
"""

from __future__ import annotations

import hashlib
import time
from collections.abc import Callable

import httpx2

from consumers import JSONObject
from exposers.auth._keys import FETCH_TIMEOUT, KeysUnavailable, issuer_endpoint
from gateway.config import IntrospectionConfig, OAuthConfig

__all__ = ["MAX_CACHED", "Introspector", "TokenInactive"]

MAX_CACHED = 10_000
"""Active answers kept at once; the oldest goes first."""


class TokenInactive(Exception):
    """The authorization server says the token is not active (unknown, expired, revoked)."""


class Introspector:
    def __init__(self, oauth: OAuthConfig, config: IntrospectionConfig, *,
                 clock: Callable[[], float] = time.time) -> None:
        self._issuer = oauth.issuer
        self._config = config
        self._endpoint = config.endpoint
        self._clock = clock
        self._cache: dict[str, tuple[float, JSONObject]] = {}
        self.requests = 0
        """How many times the endpoint was asked (tests read it to see the cache at work)."""

    async def claims(self, token: str) -> JSONObject:
        """The active token's claims; `TokenInactive`, or `KeysUnavailable` when the server cannot be asked."""
        key = hashlib.sha256(token.encode()).hexdigest()
        now = self._clock()
        cached = self._cache.get(key)
        if cached is not None and cached[0] > now:
            return cached[1]
        self._cache.pop(key, None)
        answer = await self._ask(token)
        if answer.get("active") is not True:
            raise TokenInactive
        expires = answer.get("exp")
        until = now + self._config.cache
        if isinstance(expires, int | float):
            until = min(until, float(expires))
        if len(self._cache) >= MAX_CACHED:
            del self._cache[next(iter(self._cache))]
        self._cache[key] = (until, answer)
        return answer

    async def _ask(self, token: str) -> JSONObject:
        self.requests += 1
        secret = self._config.client_secret.get_secret_value()
        async with httpx2.AsyncClient(timeout=FETCH_TIMEOUT, follow_redirects=False) as http:
            if self._endpoint is None:
                self._endpoint = await issuer_endpoint(http, self._issuer, "introspection_endpoint")
            try:
                response = await http.post(self._endpoint, data={"token": token, "token_type_hint": "access_token"},
                                           auth=(self._config.client_id, secret),
                                           headers={"Accept": "application/json"})
            except httpx2.HTTPError as exc:
                raise KeysUnavailable(f"the introspection endpoint failed: {type(exc).__name__}") from exc
        if response.status_code != 200:
            raise KeysUnavailable(f"the introspection endpoint answered {response.status_code}")
        try:
            answer = response.json()
        except ValueError as exc:
            raise KeysUnavailable("the introspection endpoint did not answer JSON") from exc
        if not isinstance(answer, dict):
            raise KeysUnavailable("the introspection endpoint did not answer a JSON object")
        return answer
