"""A circuit breaker per upstream: after `threshold` consecutive connection-level failures (the connection broke or
could not be made, an HTTP upstream answered 502/503/504), calls fail fast for `cooldown` seconds; then one trial
call is let through, and its outcome closes or re-opens the circuit.

Only the connection is judged here. An error answer is an answer (the upstream is alive and said no); a call that
runs out of time says something about that call, not about the connection: six hung calls of one tool must not
fail the calls of every other tool on the same upstream. Such outcomes give no verdict (`release`)."""

from __future__ import annotations

import math


class CircuitBreaker:
    def __init__(self, threshold: int, cooldown: float) -> None:
        self.threshold = threshold
        self.cooldown = cooldown
        self.failures = 0
        self._open_until = -math.inf
        self._trial = False

    @property
    def is_open(self) -> bool:
        return self.failures >= self.threshold

    def admit(self, now: float) -> float | None:
        """None if a call may go; else the seconds until the next trial."""
        if not self.is_open:
            return None
        if now < self._open_until or self._trial:
            return max(self._open_until - now, 0.0)
        self._trial = True
        return None

    def record(self, ok: bool, now: float) -> None:
        self._trial = False
        if ok:
            self.failures = 0
            return
        self.failures += 1
        if self.is_open:
            self._open_until = now + self.cooldown

    def release(self) -> None:
        """A call ended without saying anything about the connection (a timeout): the next call may be the trial."""
        self._trial = False
