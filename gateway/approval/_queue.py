"""The console's approval queue: calls waiting for an approver's answer (`ask: console`, `caller_then_console`).

Ownership: the dispatcher creates one `ApprovalQueue` (it outlives reloads); a waiting call adds its `Waiting` entry
and removes it itself when it is answered, times out or is cancelled (`wait`), so nothing is left behind by a
caller that goes away. The console lists `pending()` and answers with `answer()`.
"""

from __future__ import annotations

import secrets
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field

import anyio

MAX_WAITING = 1000
"""Calls that may wait in the queue at once; one more is refused (fail closed) with an error that names this."""


@dataclass(frozen=True, slots=True)
class Answer:
    approved: bool
    by: str
    """The approver's client id."""
    reason: str


@dataclass
class Waiting:
    """A call in the queue: what the approver is shown (never a secret: `summary` is redacted), and its answer."""

    client: str
    tool: str
    upstream: str
    summary: str
    notes: str
    rule: int
    id: str = field(default_factory=lambda: secrets.token_urlsafe(12))
    since: float = field(default_factory=time.time)
    answered: anyio.Event = field(default_factory=anyio.Event)
    answer: Answer | None = None


class QueueFull(Exception):
    pass


class ApprovalQueue:
    def __init__(self) -> None:
        self._waiting: dict[str, Waiting] = {}

    def pending(self) -> list[Waiting]:
        """The calls waiting, oldest first."""
        return sorted(self._waiting.values(), key=lambda item: item.since)

    async def wait(self, item: Waiting, seconds: float, tick: Callable[[float], Awaitable[None]] | None = None,
                   every: float = 5.0) -> Answer | None:
        """Queue `item` until an approver answers it (its answer) or `seconds` pass (None); `tick(elapsed)` is
        awaited every `every` seconds meanwhile (the caller's progress notifications)."""
        if len(self._waiting) >= MAX_WAITING:
            raise QueueFull(f"{MAX_WAITING} calls are waiting for an approver already (the queue's limit)")
        self._waiting[item.id] = item
        started = time.monotonic()
        try:
            with anyio.move_on_after(seconds):
                while not item.answered.is_set():
                    with anyio.move_on_after(every):
                        await item.answered.wait()
                    if not item.answered.is_set() and tick is not None:
                        await tick(time.monotonic() - started)
            return item.answer
        finally:
            self._waiting.pop(item.id, None)

    def answer(self, id: str, answer: Answer) -> bool:
        """Answer the waiting call `id`; False if there is none (answered already, timed out, or never was)."""
        item = self._waiting.pop(id, None)
        if item is None or item.answered.is_set():
            return False
        item.answer = answer
        item.answered.set()
        return True
