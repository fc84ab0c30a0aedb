"""An upstream's life: its connection states and their transitions, the waits between its connection attempts
(and what a caller of a down upstream is told of them), and its calls in flight until it retires."""

from __future__ import annotations

import enum
import logging
import math
import random
from collections.abc import Awaitable, Callable, Iterator
from contextlib import contextmanager

import anyio

from consumers.errors import UpstreamUnavailable
from consumers.log_fields import log_fields

logger = logging.getLogger("triad.upstream")

BACKOFF_START = 0.5
BACKOFF_MAX = 30.0
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


class Reconnects:
    """The owner task's waits between connection attempts: exponential backoff with jitter, reset by a connection
    that was served; and when the next attempt is, so that a call of a down upstream's tool can say it."""

    def __init__(self) -> None:
        self._backoff = BACKOFF_START
        self._next: float | None = None
        """When the next attempt starts (`anyio.current_time()`), while waiting for it; None while connecting."""

    def served(self) -> None:
        self._backoff = BACKOFF_START

    async def wait(self, wait_for: Callable[[float], Awaitable[bool]]) -> None:
        """Wait for the next attempt (`wait_for(seconds)` returns early when the owner task is woken)."""
        delay = self._backoff * (1 + random.random() / 2)
        self._next = anyio.current_time() + delay
        try:
            await wait_for(delay)
        finally:
            self._next = None
        self._backoff = min(self._backoff * 2, BACKOFF_MAX)

    def down(self, upstream: str, state: UpstreamState, reason: str) -> UpstreamUnavailable:
        """What a call gets while the upstream is not connected: its state, why, and when it is tried next (whole
        seconds, rounded up; `data.retryIn`: 0 while an attempt is under way)."""
        wait = 0 if self._next is None else max(math.ceil(self._next - anyio.current_time()), 0)
        when = f"the next try is in {wait}s" if wait else "reconnecting now"
        return UpstreamUnavailable(upstream, f"upstream {upstream!r} is {state.value} ({reason}); {when}",
                                   data={"upstream": upstream, "state": state.value, "retryIn": wait})


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
