"""One user's upstream credential (`auth: per_user`) kept in the cluster's vault, so that a token obtained or
refreshed on one replica is the one every replica uses (`consumers.oauth.CredentialStore`).

Three records per user and upstream, each encrypted and bound to the user (`Vault`): the tokens with their expiry,
the client registration, and what discovery found; written separately, so that two replicas writing different
parts never undo each other. A replica takes up tokens stored by another before it refreshes or answers a 401
(`consumers.oauth`). While Redis is unreachable, reading or writing fails as an unreadable token file does
(the user's upstream is unavailable to them meanwhile): never another user's token, never Triad's.
"""

from __future__ import annotations

import contextlib
import json
import secrets
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import TypeVar

import anyio
from mcp.shared.auth import OAuthClientInformationFull, OAuthToken

from consumers import JSONObject, loads
from gateway.cluster._link import OP_TIMEOUT, RedisDown
from gateway.cluster._secret_box import SecretUnreadable
from gateway.cluster._vault import SecretTooLarge, Vault

__all__ = ["VaultTokens", "vault_stores"]

_T = TypeVar("_T")


def vault_stores(vault: Vault) -> Callable[[str, str], VaultTokens]:
    """(upstream, user) -> that user's store: `consumers.UserAuthorization.stores` with `cluster:`."""
    return lambda upstream, user: VaultTokens(vault, user, upstream)


REFRESH_LOCK_TTL = 60.0
"""The longest one replica holds a credential's refresh lock: twice a token request's own limit
(`consumers.oauth`: 30 s), so that a replica that dies holding it delays the others that long at most."""
LOCK_POLL = 0.05
"""How often a replica waiting for another's refresh looks whether the lock was given back."""


class VaultTokens:
    def __init__(self, vault: Vault, user: str, upstream: str) -> None:
        self._vault = vault
        self._user = user
        self._name = f"upstream-oauth:{upstream}:"
        self.expires_at: float | None = None

    def __repr__(self) -> str:  # names no user: the repr may reach a log line
        return "VaultTokens()"

    async def get_tokens(self) -> OAuthToken | None:
        found = await self._get("tokens")
        self.expires_at = found.get("expires_at")
        tokens = found.get("tokens")
        return OAuthToken.model_validate(tokens) if isinstance(tokens, dict) else None

    async def set_tokens(self, tokens: OAuthToken) -> None:
        self.expires_at = time.time() + int(tokens.expires_in) if tokens.expires_in is not None else None
        await self._put("tokens", {"tokens": tokens.model_dump(mode="json", exclude_none=True),
                                   "expires_at": self.expires_at})

    async def forget_tokens(self) -> None:
        self.expires_at = None
        await self._run(self._vault.delete(self._user, self._name + "tokens"))

    async def get_discovery(self) -> JSONObject:
        return await self._get("discovery")

    async def set_discovery(self, discovery: JSONObject) -> None:
        await self._put("discovery", discovery)

    async def get_client_info(self) -> OAuthClientInformationFull | None:
        found = await self._get("client")
        return OAuthClientInformationFull.model_validate(found) if found else None

    async def set_client_info(self, client_info: OAuthClientInformationFull) -> None:
        await self._put("client", client_info.model_dump(mode="json", exclude_none=True))

    @contextlib.asynccontextmanager
    async def refresh_lock(self) -> AsyncIterator[None]:
        """Held by the one replica refreshing this credential: the others wait for it, then take up the tokens
        it stored, so that a rotated refresh token is never sent twice (a server with reuse detection would
        revoke the grant). Waits `REFRESH_LOCK_TTL` at most; an OSError while Redis is unreachable."""
        holder = secrets.token_hex(16)
        deadline = time.monotonic() + REFRESH_LOCK_TTL
        while not await self._run(self._vault.acquire(self._user, self._name + "refresh", holder, REFRESH_LOCK_TTL)):
            if time.monotonic() >= deadline:
                raise OSError(f"another replica held this credential's refresh lock for {REFRESH_LOCK_TTL:g}s "
                              "(REFRESH_LOCK_TTL)")
            await anyio.sleep(LOCK_POLL)
        try:
            yield
        finally:
            with anyio.move_on_after(OP_TIMEOUT, shield=True), contextlib.suppress(RedisDown):
                await self._vault.release(self._user, self._name + "refresh", holder)  # else it expires

    async def _get(self, part: str) -> JSONObject:
        try:
            raw = await self._run(self._vault.get(self._user, self._name + part))
        except SecretUnreadable:  # written under another cluster key: as if never stored (the user authorizes anew)
            return {}
        try:
            found = loads(raw) if raw is not None else {}
        except ValueError:  # sealed by this cluster's key yet no JSON: as if never stored, like an unreadable one
            return {}
        return found if isinstance(found, dict) else {}

    async def _put(self, part: str, document: JSONObject) -> None:
        await self._run(self._vault.put(self._user, self._name + part, json.dumps(document).encode()))

    @staticmethod
    async def _run(operation: Awaitable[_T]) -> _T:
        try:
            return await operation
        except RedisDown:  # an OSError, as for an unreadable token file: the flow reports it as such
            raise OSError("the cluster's Redis is unreachable: per-user upstream tokens cannot be read or kept") \
                from None
        except SecretTooLarge as exc:  # as a token file that cannot be written
            raise OSError(f"per-user upstream tokens cannot be kept: {exc}") from None
