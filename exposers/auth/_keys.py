"""The authorization server's signing keys (JWKS), as Triad's token validation needs them.

Where the keys are: `auth.oauth.jwks_uri`, or the `jwks_uri` of the issuer's metadata, found as the MCP
authorization spec orders it (RFC 8414 path-inserted, then OIDC discovery path-inserted, then OIDC path-appended)
and used only when its `issuer` is the configured one, string for string.

Caching and rotation: the key set is fetched on first use and kept for `jwks_cache`; a token whose `kid` is not in
it, or whose signature fails with the key held for its `kid` (a key replaced under the same `kid`), refetches the
set once, at most once every `jwks_refetch_interval` (so a stream of forged tokens cannot turn Triad into a load
generator against the authorization server), and is refused if the key is still not there or still does not
verify. A key that left the set stops validating tokens at the next fetch. Without any key in hand, a request is
answered 503 with `Retry-After`: the seconds until the next fetch may be tried.

Ownership: one `KeySet` per `OAuthConfig`, held by `exposers.auth.TokenValidator`. It has no task of its own: a
fetch runs in the requesting task, under a lock so that concurrent requests fetch once.
"""

from __future__ import annotations

import json
import logging
import math
import time
from collections.abc import Callable, Mapping
from urllib.parse import urlsplit, urlunsplit

import anyio
import httpx2
import jwt

from consumers import JSON
from gateway.config import OAuthConfig
from gateway.errors import TriadError

__all__ = ["FETCH_TIMEOUT", "KeySet", "KeysUnavailable", "UnknownKey", "get_json", "issuer_endpoint", "metadata_urls"]

logger = logging.getLogger(__name__)

FETCH_TIMEOUT = 10.0
"""Seconds for one fetch of the issuer's metadata or keys."""
MAX_DOCUMENT = 1 * 2**20
"""Bytes of a metadata or JWKS document; a larger one is refused."""


class KeysUnavailable(TriadError):
    """The issuer's keys could not be fetched (Triad cannot tell a good token from a bad one: HTTP 503)."""

    retry_after: int = 1
    """Seconds until the keys may be fetched again (the 503's `Retry-After`)."""


class UnknownKey(TriadError):
    """The token names a key the issuer does not publish, even after a refetch."""


def metadata_urls(issuer: str) -> list[str]:
    """Where the issuer's metadata may be, in the order the MCP spec gives (2025-11-25 and 2026-07-28)."""
    parts = urlsplit(issuer)
    path = parts.path.rstrip("/")

    def at(new_path: str) -> str:
        return urlunsplit((parts.scheme, parts.netloc, new_path, "", ""))

    if path:
        return [at(f"/.well-known/oauth-authorization-server{path}"), at(f"/.well-known/openid-configuration{path}"),
                at(f"{path}/.well-known/openid-configuration")]
    return [at("/.well-known/oauth-authorization-server"), at("/.well-known/openid-configuration")]


class KeySet:
    def __init__(self, config: OAuthConfig, *, clock: Callable[[], float] = time.monotonic) -> None:
        self._config = config
        self._clock = clock
        self._jwks_uri = config.jwks_uri
        self._keys: dict[str | None, jwt.PyJWK] = {}
        self._fetched_at: float | None = None
        """When the keys in hand were fetched (None: never)."""
        self._attempted_at: float | None = None
        """When a fetch was last tried, whatever came of it: the refetch rate limit counts from here."""
        self._lock = anyio.Lock()
        self.fetches = 0
        """How many times the key set was fetched (tests read it to see the rate limit at work)."""

    async def key(self, kid: str | None) -> jwt.PyJWK:
        """The key a token names by `kid` (a set of one key serves a token without `kid`)."""
        if self._fresh() and (found := self._find(kid)) is not None:
            return found
        seen = self._attempted_at
        try:
            async with self._lock:
                await self._settle(seen, kid)
        except KeysUnavailable as exc:
            exc.retry_after = self.retry_after()
            raise
        found = self._find(kid)
        if found is None:
            raise UnknownKey("the token is signed with a key the issuer does not publish")
        return found

    async def refetched(self, kid: str | None, failed: jwt.PyJWK) -> jwt.PyJWK | None:
        """After a signature failed with `failed`, the key held for `kid`: the set is fetched again (at most once
        per `jwks_refetch_interval`, or not at all if another request refetched since); the new key for `kid`, or
        None when there is no other one to try."""
        seen = self._attempted_at
        async with self._lock:
            if seen == self._attempted_at and self._may_fetch():
                logger.info("OAuth: a token's signature fails with the key held for its key id; fetching the "
                            "issuer's keys again")
                try:
                    await self._fetch()
                except KeysUnavailable as exc:
                    logger.warning("OAuth: keeping the keys fetched before: %s", exc)
        found = self._find(kid)
        return found if found is not None and _public(found) != _public(failed) else None

    def retry_after(self) -> int:
        """Whole seconds (at least 1) until `_may_fetch` allows another fetch."""
        if self._attempted_at is None:
            return 1
        wait = self._config.jwks_refetch_interval - (self._clock() - self._attempted_at)
        return max(1, math.ceil(wait))

    async def _settle(self, seen: float | None, kid: str | None) -> None:
        """Under the lock: fetch what a request for `kid` needs, unless another request just did."""
        if seen != self._attempted_at:
            pass  # another request fetched while this one waited: use what it found
        elif not self._fresh():
            # Keys past `jwks_cache` still serve while the issuer cannot be reached (it says so in the log).
            if self._may_fetch():
                try:
                    await self._fetch()
                except KeysUnavailable as exc:
                    if not self._keys:
                        raise
                    logger.warning("OAuth: keeping the keys fetched before: %s", exc)
            elif not self._keys:
                raise KeysUnavailable("the issuer's keys could not be fetched; not trying again yet")
        elif self._find(kid) is None and self._may_fetch():
            logger.info("OAuth: a token names an unknown key id; fetching the issuer's keys again")
            await self._fetch()

    def _fresh(self) -> bool:
        return self._fetched_at is not None and self._clock() - self._fetched_at < self._config.jwks_cache

    def _may_fetch(self) -> bool:
        return self._attempted_at is None or self._clock() - self._attempted_at >= self._config.jwks_refetch_interval

    def _find(self, kid: str | None) -> jwt.PyJWK | None:
        if kid is None:
            return next(iter(self._keys.values())) if len(self._keys) == 1 else None
        return self._keys.get(kid)

    async def _fetch(self) -> None:
        # Stamped before the request: a failing fetch is rate limited like a successful one.
        self._attempted_at = self._clock()
        self.fetches += 1
        async with httpx2.AsyncClient(timeout=FETCH_TIMEOUT, follow_redirects=False) as http:
            if self._jwks_uri is None:
                self._jwks_uri = await self._discover(http)
            document = await get_json(http, self._jwks_uri)
        keys: dict[str | None, jwt.PyJWK] = {}
        for entry in document.get("keys", ()) if isinstance(document.get("keys"), list) else ():
            if not isinstance(entry, dict) or entry.get("use", "sig") != "sig":
                continue
            try:
                keys[entry.get("kid")] = jwt.PyJWK.from_dict(entry)
            except jwt.PyJWTError as exc:
                logger.info("OAuth: skipping a key of the issuer's set (%s)", exc)
        if not keys:
            raise KeysUnavailable("the issuer publishes no usable signing key")
        self._keys = keys
        self._fetched_at = self._attempted_at

    async def _discover(self, http: httpx2.AsyncClient) -> str:
        return await issuer_endpoint(http, self._config.issuer, "jwks_uri")


def _public(key: jwt.PyJWK) -> str:
    """A key's public parameters, to tell a replaced key from the one it replaced under the same `kid`."""
    return json.dumps(key.Algorithm.to_jwk(key.key, as_dict=True), sort_keys=True)


async def issuer_endpoint(http: httpx2.AsyncClient, issuer: str, field: str) -> str:
    """An endpoint the issuer's metadata names (`jwks_uri`, `introspection_endpoint`), from the first metadata
    document found whose `issuer` is the configured one, string for string."""
    for url in metadata_urls(issuer):
        try:
            document = await get_json(http, url)
        except KeysUnavailable:
            continue
        if document.get("issuer") != issuer:
            logger.warning("OAuth: metadata at %s names another issuer; not used", url)
            continue
        found = document.get(field)
        if isinstance(found, str) and found:
            return found
    raise KeysUnavailable(f"the issuer's metadata (with its {field}) could not be fetched")


async def get_json(http: httpx2.AsyncClient, url: str) -> Mapping[str, JSON]:
    try:
        response = await http.get(url, headers={"Accept": "application/json"})
    except httpx2.HTTPError as exc:
        raise KeysUnavailable(f"fetching {url} failed: {type(exc).__name__}") from exc
    if response.status_code != 200 or len(response.content) > MAX_DOCUMENT:
        raise KeysUnavailable(f"fetching {url} answered {response.status_code}")
    try:
        document = response.json()
    except ValueError as exc:
        raise KeysUnavailable(f"{url} did not answer JSON") from exc
    if not isinstance(document, dict):
        raise KeysUnavailable(f"{url} did not answer a JSON object")
    return document
