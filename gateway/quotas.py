"""Each identity's fair share of the gateway: open sessions, streams and calls in flight, counted per identity.

Who counts: the HTTP edge takes a session or a stream before the SDK opens one (`exposers.admission`, refusing
with 429 and `Retry-After`), the one runner takes a call in flight (`exposers.request.serve`, refusing with a
JSON-RPC error). A taken place is a `Ticket`, given back exactly once by whoever holds it: the session's end, the
stream's end, the call's. Per-client upstream slots and stand-ins are counted where those sessions live
(`consumers.per_client`), against the `Share` made here.

An identity is one configured client (for an OAuth caller, one issuer and subject: `credential_owner`); every
anonymous caller is one identity. Besides each identity's own limit, non-owners together get at most a total minus
a reserve (`TOTALS`), so that an owner can always connect whatever the others hold. Memory is bounded: an
identity's counters exist only while it holds something.
"""

from __future__ import annotations

import contextlib
from collections import Counter
from collections.abc import Callable, Iterator, Mapping
from typing import Literal

from consumers import Share
from gateway.config import TriadConfig
from gateway.errors import QuotaExceeded
from gateway.identity import Identity, credential_owner

__all__ = ["HOLDERS", "TOTALS", "Counted", "Quotas", "Ticket", "holder_of", "share_of"]

Counted = Literal["sessions", "streams", "calls_in_flight"]
TOTALS: dict[Counted, tuple[int, int]] = {
    "sessions": (10_000, 500),
    "streams": (1_000, 50),
    "calls_in_flight": (4_096, 128),
}
"""Quota -> (what the whole gateway holds at most, the part of it only owners may use). `sessions` is the SDK's
own bound on streamable HTTP sessions (`exposers.http.MAX_SESSIONS`). Streams each hold a socket for as long as
they last: their total is what a daemon with a raised descriptor limit holds without starving its upstreams."""
HOLDERS = ("owner", "client", "anonymous")
"""The identity classes metrics are labelled by (never a client's name or token: bounded by construction)."""
NOUNS: dict[Counted, str] = {"sessions": "open sessions", "streams": "open streams",
                             "calls_in_flight": "calls in flight"}
HINTS: dict[Counted, str] = {
    "sessions": "end one (DELETE it) or let one idle out",
    "streams": "close one",
    "calls_in_flight": "wait for one to finish",
}

Ticket = Callable[[], None]
"""Gives a taken place back; a second call does nothing."""


def holder_of(config: TriadConfig, identity: Identity) -> str:
    """The identity's class: `owner`, `anonymous` (the client callers without a token act as), else `client`."""
    if identity.owner:
        return "owner"
    return "anonymous" if config.anonymous is not None and identity.client_id == config.anonymous else "client"


def share_of(config: TriadConfig, identity: Identity) -> Share:
    """The identity's share of each per-client upstream (`consumers.Share`)."""
    limits = config.limits_of(identity.client_id)
    return Share(holder_of(config, identity), limits.limit("upstream_slots"), limits.limit("stand_ins"))


class Quotas:
    """The places each identity holds, by quota. One per daemon (the dispatcher's); plain counters on the loop."""

    def __init__(self, totals: Mapping[Counted, tuple[int, int]] = TOTALS) -> None:
        self._totals = {**TOTALS, **totals}
        self._held: Counter[tuple[Counted, str]] = Counter()
        self._by_holder: Counter[tuple[Counted, str]] = Counter()
        self._refused: Counter[tuple[str, str]] = Counter()

    def take(self, quota: Counted, identity: Identity, config: TriadConfig) -> Ticket:
        """A place in `quota` for `identity`, or `QuotaExceeded` naming the quota and its limit."""
        key, holder = (quota, credential_owner(identity)), holder_of(config, identity)
        limit = config.limits_of(identity.client_id).limit(quota)
        total, reserve = self._totals[quota]
        held = sum(self._by_holder[quota, name] for name in HOLDERS)
        others = held - self._by_holder[quota, "owner"]
        if self._held[key] >= limit:
            self._refused[quota, holder] += 1
            raise QuotaExceeded(quota, limit, f"this client holds {self._held[key]} {NOUNS[quota]}, its quota "
                                f"limits.{quota} ({limit}); {HINTS[quota]} first")
        if held >= total or (holder != "owner" and others >= total - reserve):
            self._refused[quota, holder] += 1
            raise QuotaExceeded(quota, limit, f"the gateway holds all the {NOUNS[quota]} it gives "
                                f"{'anyone' if holder == 'owner' else 'non-owner clients'} ({held}); try again later")
        self._held[key] += 1
        self._by_holder[quota, holder] += 1
        given = False

        def give_back() -> None:
            nonlocal given
            if given:
                return
            given = True
            for counter, found in ((self._held, key), (self._by_holder, (quota, holder))):
                counter[found] -= 1
                if counter[found] <= 0:
                    del counter[found]

        return give_back

    @contextlib.contextmanager
    def hold(self, quota: Counted, identity: Identity, config: TriadConfig) -> Iterator[None]:
        """A place for the duration of the block. A quota refused inside it (a per-client upstream's slots) is
        counted as a refusal of that quota, for metrics."""
        ticket = self.take(quota, identity, config)
        try:
            yield
        except QuotaExceeded as exc:
            self._refused[exc.quota, holder_of(config, identity)] += 1
            raise
        finally:
            ticket()

    def use(self) -> dict[tuple[str, str], int]:
        """(quota, identity class) -> places held now."""
        return {key: count for key, count in self._by_holder.items() if count}

    def refusals(self) -> dict[tuple[str, str], int]:
        """(quota, identity class) -> refusals so far."""
        return dict(self._refused)
