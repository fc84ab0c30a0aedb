"""An upstream's life: its connection states and their transitions, and its calls in flight until it retires."""

from __future__ import annotations

import enum
import logging
from collections.abc import Iterator
from contextlib import contextmanager

import anyio

from consumers.log_fields import log_fields

logger = logging.getLogger("triad.upstream")

UNWIND_LIMIT = 5.0
"""How long calls cancelled at the end of a grace period may take to tell their upstream and answer their caller."""


class UpstreamState(enum.StrEnum):
    STARTING = "starting"
    READY = "ready"
    DEGRADED = "degraded"
    DOWN = "down"


TRANSITIONS: dict[UpstreamState, frozenset[UpstreamState]] = {
    UpstreamState.STARTING: frozenset({UpstreamState.READY, UpstreamState.DOWN}),
    UpstreamState.READY: frozenset({UpstreamState.DEGRADED, UpstreamState.DOWN}),
    UpstreamState.DEGRADED: frozenset({UpstreamState.READY, UpstreamState.DOWN}),
    UpstreamState.DOWN: frozenset({UpstreamState.READY}),
}
"""The owner task's state machine: connected (`ready`), failing fast (`degraded`, circuit open), `down` (and
reconnecting); a state may also stay the same with a new reason. Anything else is a bug, and raises."""


class IllegalTransition(Exception):
    """A state change the machine above does not have (a bug in the owner task, never an upstream's fault)."""


def check_transition(upstream: str, old: UpstreamState, new: UpstreamState) -> None:
    if new is not old and new not in TRANSITIONS[old]:
        raise IllegalTransition(f"upstream {upstream!r}: {old.value} -> {new.value}")


class CallsInFlight:
    """The deadline scope of each call in flight on one upstream, so that retiring it can wait for them to finish
    and cancel those still running when its grace period runs out."""

    def __init__(self, upstream: str) -> None:
        self._upstream = upstream
        self._scopes: set[anyio.CancelScope] = set()
        self._idle = anyio.Event()
        self._idle.set()
        self.retired: str | None = None
        """Why the upstream takes no new calls (removed or replaced by a reload, Triad shutting down)."""
        self.grace_over = False
        """Set when the grace period ran out and the calls still in flight were cancelled."""

    def __len__(self) -> int:
        return len(self._scopes)

    @contextmanager
    def track(self, scope: anyio.CancelScope) -> Iterator[None]:
        if not self._scopes:
            self._idle = anyio.Event()
        self._scopes.add(scope)
        try:
            yield
        finally:
            self._scopes.discard(scope)
            if not self._scopes:
                self._idle.set()

    async def retire(self, reason: str, grace: float) -> None:
        """Take no new calls; let those in flight finish within `grace` seconds, then cancel the rest and give them
        a moment to tell their upstream and answer their callers."""
        self.retired = reason
        with anyio.move_on_after(grace):
            await self._idle.wait()
        if self._scopes:
            logger.warning("upstream %s: %d call(s) still running after the %gs grace period; answering them with "
                           "an error and closing", self._upstream, len(self._scopes), grace,
                           extra=log_fields(self._upstream, "grace_over", seconds=grace))
            self.grace_over = True
            for scope in list(self._scopes):
                scope.cancel()
            with anyio.move_on_after(UNWIND_LIMIT):
                await self._idle.wait()
