"""An upstream's OAuth credentials, held across its connections: Triad's own, and with `auth: per_user` one per
user. Every connection of one credential (the shared session, each client session, a reconnect) uses the same
token source, so a token is refreshed once, under one lock, and a rotated refresh token is never sent twice.

Ownership: the upstream (`consumers.upstream.Upstream`) creates one `Credentials` and hands it to every transport
it opens; nothing in it holds a task or a connection. Bounded by `MAX_HELD` (the oldest user's goes first; its
tokens stay in their file).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

from consumers.config import UpstreamAuthConfig
from consumers.oauth._client import UpstreamOAuth

if TYPE_CHECKING:
    from consumers.oauth._asking import Asker
    from consumers.oauth._redirects import Redirects
    from consumers.oauth._token_store import CredentialStore

MAX_HELD = 10_000
"""Users whose token source is kept in memory at once."""


@dataclass
class UserAuthorization:
    """What the daemon lends every upstream for per-user credentials (`auth: per_user`); unset, a user's tokens
    are kept in a file beside Triad's and come back on the loopback redirect."""

    redirects: Redirects | None = None
    """Triad serves HTTP: an authorization comes back on its own `/oauth/callback/<upstream>`."""
    stores: Callable[[str, str], CredentialStore] | None = None
    """(upstream, user) -> where that user's tokens are kept (with `cluster:`, Redis, shared by the replicas)."""


class Credentials:
    def __init__(self, upstream: str) -> None:
        self._upstream = upstream
        self._held: dict[str | None, UpstreamOAuth] = {}
        self.for_users = UserAuthorization()
        """Replaced by the pool's (one for all its upstreams), which the daemon fills in."""

    def get(self, url: str, config: UpstreamAuthConfig, user: str | None, ask: Asker | None) -> UpstreamOAuth:
        """`user`'s token source (None: Triad's own), made anew when the upstream's URL or auth block changed.
        `ask`: how to reach that user now (their latest session's client), if at all."""
        found = self._held.pop(user, None)
        if found is None or not found.serves(url, config):
            if len(self._held) >= MAX_HELD:
                del self._held[next(iter(self._held))]
            found = UpstreamOAuth(self._upstream, url, config, ask, user,
                                  self.for_users if user is not None else None)
        elif ask is not None:
            found.ask = ask
        self._held[user] = found  # most recently used last
        return found


@dataclass(frozen=True)
class CredentialUse:
    """Which credential a connection to an OAuth upstream uses: from the upstream's `credentials` (None: one made
    for this connection alone, as `triad login` does), whose (`user`; None: Triad's own), and how to show that
    person an authorization URL (`ask`; None: `auth.browser`, or no one)."""

    credentials: Credentials | None = None
    user: str | None = None
    ask: Asker | None = None
