"""The console's approval queue: calls waiting for an approver's answer (`approval:` rules with `ask: console` or
`caller_then_console`), behind one interface (`Approvals`) whose embedded default is here (`LocalApprovals`) and
whose Redis version, where any replica's console can answer a call waiting on another, is `gateway.cluster`.

Ownership: the dispatcher holds one (it outlives reloads); a waiting call adds its entry and removes it itself when
it is answered, times out or is cancelled (`wait`), so nothing is left behind by a caller that goes away. The
console lists `pending()` and answers with `answer()`; only one answer of a call counts.
"""

from __future__ import annotations

import secrets
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Protocol

import anyio

MAX_WAITING = 1000
"""Calls that may wait in the queue at once; one more is refused (fail closed) with an error that names this."""

Tick = Callable[[float], Awaitable[None]]
"""Awaited now and then while a call waits (the seconds it has waited): the caller's progress notifications."""


@dataclass(frozen=True, slots=True)
class Answer:
    approved: bool
    by: str
    """The approver's client id."""
    reason: str


@dataclass(frozen=True, slots=True)
class Waiting:
    """A call in the queue, as an approver is shown it (never a secret: `summary` is redacted)."""

    client: str
    tool: str
    upstream: str
    summary: str
    notes: str
    rule: int
    id: str = field(default_factory=lambda: secrets.token_urlsafe(18))
    since: float = field(default_factory=time.time)


class QueueFull(Exception):
    """The call cannot wait: the queue is at its limit, or (with `cluster:`) unreachable. It is refused."""


class Approvals(Protocol):
    async def wait(self, item: Waiting, seconds: float, tick: Tick | None = None, every: float = 5.0
                   ) -> Answer | None:
        """Queue `item` until an approver answers it (the answer) or `seconds` pass (None); `tick(elapsed)` every
        `every` seconds meanwhile. `QueueFull` when it cannot be queued."""
        ...

    async def pending(self) -> list[Waiting]:
        """The calls waiting, oldest first (`SharedStateUnavailable` when they cannot be read)."""
        ...

    async def answer(self, id: str, answer: Answer) -> bool:
        """Answer the waiting call `id`; False if there is none (answered already, timed out, or never was)."""
        ...


async def wait_for_answer(answered: anyio.Event, seconds: float, tick: Tick | None, every: float) -> bool:
    """Wait for `answered` up to `seconds`, calling `tick` every `every` seconds meanwhile; whether it was set."""
    started = time.monotonic()
    with anyio.move_on_after(seconds):
        while not answered.is_set():
            with anyio.move_on_after(every):
                await answered.wait()
            if not answered.is_set() and tick is not None:
                await tick(time.monotonic() - started)
    return answered.is_set()


class LocalApprovals:
    """The queue of one process."""

    def __init__(self) -> None:
        self._waiting: dict[str, tuple[Waiting, anyio.Event]] = {}
        self._answers: dict[str, Answer] = {}

    async def wait(self, item: Waiting, seconds: float, tick: Tick | None = None, every: float = 5.0
                   ) -> Answer | None:
        if len(self._waiting) >= MAX_WAITING:
            raise QueueFull(f"{MAX_WAITING} calls are waiting for an approver already (the queue's limit)")
        answered = anyio.Event()
        self._waiting[item.id] = (item, answered)
        try:
            await wait_for_answer(answered, seconds, tick, every)
            return self._answers.pop(item.id, None)
        finally:
            self._waiting.pop(item.id, None)
            self._answers.pop(item.id, None)

    async def pending(self) -> list[Waiting]:
        return sorted((item for item, _ in self._waiting.values()), key=lambda item: item.since)

    async def answer(self, id: str, answer: Answer) -> bool:
        found = self._waiting.pop(id, None)
        if found is None:
            return False
        self._answers[id] = answer
        found[1].set()
        return True
