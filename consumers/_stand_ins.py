"""Upstream sessions of their own for callers that have no session with a way back: a 2026-07-28 request to a
handshake-era `sessions: per_client` upstream.

Such a request has no downstream session that lasts (each is its own), so it cannot have an upstream session of
its own the way a handshake-era client does. It gets one bound to who it is and what it declared instead: one
stand-in per (caller, declared capabilities), whose upstream session lists and serves for that caller alone, and
closes after `IDLE_CLOSE` without requests (`consumers.per_client` closes it). A caller has at most its share's
`stand_ins` declarations (`limits.stand_ins`; `MAX_PER_CALLER` without a share) with a session open at once. A
caller Triad cannot name goes on the shared session.
"""

from __future__ import annotations

import json
import secrets
import time
from collections.abc import Awaitable, Callable

from consumers._json import JSONObject, loads
from consumers.errors import QuotaExceeded
from consumers.relay import ClientOrigin, Downstream, Share

IDLE_CLOSE = 300.0
"""Seconds without a request after which a stand-in's upstream session closes (the next request opens a new one)."""
MAX_PER_CALLER = 8
"""Distinct capability declarations a caller without a share (`consumers.Share.stand_ins`) may have upstream
sessions for at once (declarations are the caller's free choice: each would otherwise cost an upstream session,
up to the upstream's `max_sessions`)."""
HANDED_OUT = 60.0
"""Seconds a new stand-in counts as open before its upstream session exists (its request is on its way there):
requests of one caller sent at once must not each take a place another is about to use."""
MAX_STAND_INS = 1024
"""Stand-ins kept at once; past it, those whose upstream session is closed are dropped."""


class StandIn:
    """A caller's stand-in downstream session (`consumers.relay.ClientOrigin`): no way back outside a request
    (what the upstream sends during a call still goes to the call's own request), and no end but idling out."""

    back: Downstream | None = None

    def __init__(self, key: tuple[str, str], share: Share | None) -> None:
        self.made = time.monotonic()
        self.user: str | None = key[0]
        self.share = share
        """Its caller's: its upstream session counts among that identity's slots."""
        self.declared: JSONObject | None = loads(key[1])
        self.id = "c-" + secrets.token_hex(6)
        """Its label in log lines (`consumers.log_fields`): random, since a hash of who it is could be guessed."""

    def on_close(self, callback: Callable[[], Awaitable[None]]) -> None:
        """Nobody ends a stand-in: its upstream session idles out."""

    def __repr__(self) -> str:
        return f"StandIn({self.id})"  # whose it is stays out of logs


class StandIns:
    """The stand-ins of one upstream's callers, by (caller, declared capabilities)."""

    def __init__(self, upstream: str) -> None:
        self._upstream = upstream
        self._by_key: dict[tuple[str, str], StandIn] = {}

    def of(self, client: ClientOrigin, declared: JSONObject, is_open: Callable[[StandIn], bool]
           ) -> StandIn | None:
        """`client`'s stand-in for what its session would declare (`declared`); None when Triad does not know who
        the caller is. `is_open`: whether a stand-in's upstream session is open (those are kept when pruning)."""
        if client.user is None:
            return None
        key = (client.user, json.dumps(declared, sort_keys=True, default=str))
        found = self._by_key.get(key)
        if found is None:
            now = time.monotonic()

            def in_use(stand_in: StandIn) -> bool:
                return is_open(stand_in) or now - stand_in.made < HANDED_OUT

            if len(self._by_key) >= MAX_STAND_INS:
                self._by_key = {k: v for k, v in self._by_key.items() if in_use(v)}
            mine = [k for k in self._by_key if k[0] == client.user]
            most = client.share.stand_ins if client.share is not None else MAX_PER_CALLER
            if len(mine) >= most:
                idle = [k for k in mine if not in_use(self._by_key[k])]
                if not idle:
                    raise QuotaExceeded("stand_ins", most, (
                        f"upstream {self._upstream!r} already has sessions for {len(mine)} capability declarations "
                        f"of this client, its quota limits.stand_ins ({most}); one must idle out before another "
                        "declaration can be used"))
                del self._by_key[idle[0]]
            found = self._by_key[key] = StandIn(key, client.share)
        return found
