"""Where an upstream's OAuth tokens and client registration are kept: the SDK's `TokenStorage` interface, over a
file in Triad's state directory (mode 0600, replaced whole on each write) or in memory.

One store holds one credential: one upstream's gateway-wide login, or (later) one user's. Kept behind the SDK's
small interface so that another backend (a shared store for several Triads) can take its place. Around a store,
what the SDK's OAuth client is given: a pre-registered client (`Preregistered`), and a registration made for another
redirect URI kept quiet (`ForRedirect`).
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import time
from pathlib import Path
from typing import Protocol

import anyio
from mcp.client.auth import TokenStorage
from mcp.shared.auth import OAuthClientInformationFull, OAuthToken
from pydantic import AnyUrl

from consumers._files import read_regular
from consumers._json import JSONObject, loads
from consumers.config import UpstreamAuthConfig

__all__ = ["CredentialStore", "ForRedirect", "MemoryTokens", "Preregistered", "TokenFile", "TokenStorage",
           "token_store"]


class CredentialStore(TokenStorage, Protocol):
    """What Triad keeps of one credential: the SDK's `TokenStorage` (tokens, client registration), the tokens'
    expiry, and what discovery found. The seam for another backend (a store shared by several Triads)."""

    expires_at: float | None
    """When the stored access token expires (epoch seconds), as of the last `get_tokens`/`set_tokens`."""

    async def forget_tokens(self) -> None: ...

    def refresh_lock(self) -> contextlib.AbstractAsyncContextManager[None]:
        """Held around a refresh, by one holder of this credential at a time where several processes share the
        store (with `cluster:`, a lock in Redis); nothing where only this process uses it."""
        ...

    async def get_discovery(self) -> JSONObject: ...

    async def set_discovery(self, discovery: JSONObject) -> None: ...


class MemoryTokens:
    """Tokens for the life of the process (a config without a file has no state directory)."""

    def __init__(self) -> None:
        self._tokens: OAuthToken | None = None
        self._client: OAuthClientInformationFull | None = None
        self._discovery: JSONObject = {}
        self.expires_at: float | None = None

    async def get_tokens(self) -> OAuthToken | None:
        return self._tokens

    async def set_tokens(self, tokens: OAuthToken) -> None:
        self._tokens = tokens
        self.expires_at = _expiry(tokens)

    async def forget_tokens(self) -> None:
        self._tokens = self.expires_at = None

    def refresh_lock(self) -> contextlib.AbstractAsyncContextManager[None]:
        return contextlib.nullcontext()

    async def get_discovery(self) -> JSONObject:
        return self._discovery

    async def set_discovery(self, discovery: JSONObject) -> None:
        self._discovery = discovery

    async def get_client_info(self) -> OAuthClientInformationFull | None:
        return self._client

    async def set_client_info(self, client_info: OAuthClientInformationFull) -> None:
        self._client = client_info


class TokenFile:
    """`{"tokens", "client", "expires_at", "discovery"}` in one JSON file, readable by its owner only."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.expires_at: float | None = None

    def __repr__(self) -> str:
        return f"TokenFile({str(self.path)!r})"

    async def get_tokens(self) -> OAuthToken | None:
        document = await anyio.to_thread.run_sync(self._read)
        self.expires_at = document.get("expires_at")
        found = document.get("tokens")
        return OAuthToken.model_validate(found) if isinstance(found, dict) else None

    async def set_tokens(self, tokens: OAuthToken) -> None:
        self.expires_at = _expiry(tokens)
        await anyio.to_thread.run_sync(self._update, {"tokens": tokens.model_dump(mode="json", exclude_none=True),
                                                      "expires_at": self.expires_at})

    async def forget_tokens(self) -> None:
        """Drop the tokens, keep the registration (`triad login` asks anew)."""
        self.expires_at = None
        await anyio.to_thread.run_sync(self._update, {"tokens": None, "expires_at": None})

    def refresh_lock(self) -> contextlib.AbstractAsyncContextManager[None]:
        return contextlib.nullcontext()  # one daemon per file; `triad login` asks anew rather than refreshing

    async def get_discovery(self) -> JSONObject:
        """What discovery found (the resource's and the authorization server's metadata), so that a restarted
        Triad refreshes at the right token endpoint before any 401 made it discover them again."""
        found = (await anyio.to_thread.run_sync(self._read)).get("discovery")
        return found if isinstance(found, dict) else {}

    async def set_discovery(self, discovery: JSONObject) -> None:
        await anyio.to_thread.run_sync(self._update, {"discovery": discovery})

    async def get_client_info(self) -> OAuthClientInformationFull | None:
        found = (await anyio.to_thread.run_sync(self._read)).get("client")
        return OAuthClientInformationFull.model_validate(found) if isinstance(found, dict) else None

    async def set_client_info(self, client_info: OAuthClientInformationFull) -> None:
        await anyio.to_thread.run_sync(self._update, {"client": client_info.model_dump(mode="json",
                                                                                        exclude_none=True)})

    def _read(self) -> JSONObject:
        try:
            document = loads(read_regular(self.path)[0].decode("utf-8"))
        except FileNotFoundError:
            return {}
        except (OSError, ValueError) as exc:  # the message names the file, never its content
            raise OSError(f"cannot read the token file {self.path}: {type(exc).__name__}") from None
        return document if isinstance(document, dict) else {}

    def _update(self, changes: JSONObject) -> None:
        document = {**self._read(), **changes}
        self.path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
        temporary = self.path.with_name(f".{self.path.name}.tmp")
        temporary.unlink(missing_ok=True)  # created anew below, so its mode is 0600 whatever a leftover's was
        descriptor = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(descriptor, "w", encoding="utf-8") as stream:
            json.dump(document, stream)
            stream.flush()
            os.fsync(stream.fileno())
        os.replace(temporary, self.path)


def _expiry(tokens: OAuthToken) -> float | None:
    return time.time() + int(tokens.expires_in) if tokens.expires_in is not None else None


class Preregistered:
    """A store that answers the configured client registration until the flow records another one."""

    def __init__(self, inner: TokenStorage, client: OAuthClientInformationFull) -> None:
        self._inner = inner
        self._client = client
        self.get_tokens = inner.get_tokens
        self.set_tokens = inner.set_tokens
        self.set_client_info = inner.set_client_info

    async def get_client_info(self) -> OAuthClientInformationFull | None:
        stored = await self._inner.get_client_info()
        return stored if stored is not None and stored.client_id == self._client.client_id else self._client


class ForRedirect:
    """A store that keeps quiet about a registration made for another redirect URI (`triad login` on the loopback
    one, another `listen.public_url`) while no token could be refreshed with it: the authorization that comes
    next then registers anew, since an authorization server refuses a redirect URI it was not given."""

    def __init__(self, inner: TokenStorage, redirect: str) -> None:
        self._inner = inner
        self._redirect = str(AnyUrl(redirect))
        self.get_tokens = inner.get_tokens
        self.set_tokens = inner.set_tokens
        self.set_client_info = inner.set_client_info

    async def get_client_info(self) -> OAuthClientInformationFull | None:
        stored = await self._inner.get_client_info()
        if stored is None or not stored.redirect_uris or self._redirect in {str(uri) for uri in stored.redirect_uris}:
            return stored
        tokens = await self._inner.get_tokens()
        return stored if tokens is not None and tokens.refresh_token else None


def token_store(config: UpstreamAuthConfig, user: str | None = None) -> CredentialStore:
    """Triad's own credential (`user` None), or one user's: `<store>.users/<hash of the user>.json` beside it."""
    if config.token_store is None:
        return MemoryTokens()
    path = Path(config.token_store)
    if user is None:
        return TokenFile(path)
    digest = hashlib.sha256(user.encode()).hexdigest()[:32]
    return TokenFile(path.with_name(f"{path.stem}.users") / f"{digest}.json")
