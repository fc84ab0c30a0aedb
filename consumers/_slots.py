"""Who gives way when a `sessions: per_client` upstream has no room for one more client session.

Each identity has a fair share of an upstream's sessions (`consumers.Share.upstream_slots`, from `limits:`), and
the upstream as a whole its `max_sessions`. A session with a call in flight (or still opening) is never closed for
room; an idle one may be, and the next request of its client opens a new one. `consumers.per_client` asks
`room_for` before it opens a session and closes what it names.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from consumers._stand_ins import StandIn
from consumers.errors import QuotaExceeded, UpstreamUnavailable
from consumers.relay import ClientOrigin


@dataclass(frozen=True, slots=True)
class Slot:
    """One open (or opening) client session of the upstream."""

    origin: ClientOrigin
    used: float
    """When a request last asked for it."""
    idle: bool
    """Open, with nothing in flight."""


def room_for(upstream: str, origin: ClientOrigin, slots: Sequence[Slot], most: int) -> ClientOrigin | None:
    """The session to close so that `origin` can open one (None: there is room), or an error naming the bound.

    At its share, the identity reclaims only its own least recently used idle session. Within it, at
    `max_sessions`, the upstream takes in this order: the identity's own least recently used idle session; an idle
    stand-in's (it reopens on its next request); the least recently used idle session of the identity holding the
    most, if it holds more than this one would (so that abandoned sessions of one client keep no one else out)."""
    held: dict[str | None, list[Slot]] = {}
    for slot in slots:
        held.setdefault(slot.origin.user, []).append(slot)
    mine = held.get(origin.user, []) if origin.user is not None else []
    share = origin.share
    if share is not None and len(mine) >= share.upstream_slots:
        if (own := _least_used(mine)) is None:
            raise QuotaExceeded("upstream_slots", share.upstream_slots, (
                f"this client holds {len(mine)} sessions on upstream {upstream!r}, its quota limits.upstream_slots "
                f"({share.upstream_slots}), each with a call in flight; wait for one to finish"))
        return own
    if len(slots) < most:
        return None
    others = [links for user, links in held.items() if user != origin.user or origin.user is None]
    largest = max(others, key=len, default=[])
    found = _least_used(mine) or _least_used([slot for slot in slots if isinstance(slot.origin, StandIn)]) \
        or (_least_used(largest) if len(largest) > len(mine) + 1 else None)
    if found is None:
        raise UpstreamUnavailable(upstream, (
            f"upstream {upstream!r} has {most} client sessions open, its max_sessions, each busy or of a client "
            "that holds no more than this one; one must end before another client can use it"))
    return found


def holders(origins: Iterable[ClientOrigin]) -> dict[str, int]:
    """Sessions by identity class (`consumers.Share.holder`; `unknown` without a share)."""
    counts: dict[str, int] = {}
    for origin in origins:
        holder = origin.share.holder if origin.share is not None else "unknown"
        counts[holder] = counts.get(holder, 0) + 1
    return counts


def _least_used(slots: Sequence[Slot]) -> ClientOrigin | None:
    idle = [slot for slot in slots if slot.idle]
    return min(idle, key=lambda slot: slot.used).origin if idle else None
