"""What reloads happened, for operators (`/readyz`, the web console), and what the edge may ask of the reloader.

The daemon's `Reloader` (`gateway.runtime`) records each attempt here and satisfies `Reloads`; the HTTP app and the
console are given it as a `Reloads`, so the edge needs nothing of the runtime that assembles it.
"""

from __future__ import annotations

import time
from collections import deque
from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol

MAX_HISTORY = 50
"""Reloads remembered for operators (the web console); counters cover the rest."""


@dataclass(frozen=True)
class ReloadEvent:
    """One reload attempt: when, what asked for it, and what changed or why it was refused (errors name a
    `${VAR}`, never its value)."""

    time: float
    trigger: str
    ok: bool
    errors: tuple[str, ...] = ()
    changes: tuple[tuple[str, tuple[str, ...]], ...] = ()


@dataclass
class ReloadStatus:
    reloads: int = 0
    failures: int = 0
    last_error: list[str] = field(default_factory=list)
    last_attempt: float | None = None
    last_success: float | None = None
    history: deque[ReloadEvent] = field(default_factory=lambda: deque(maxlen=MAX_HISTORY))
    """The latest reloads, oldest first."""

    def record(self, trigger: str, ok: bool, errors: list[str], changes: dict[str, list[str]]) -> None:
        self.history.append(ReloadEvent(time.time(), trigger, ok, tuple(errors),
                                        tuple((kind, tuple(names)) for kind, names in changes.items())))

    def as_dict(self) -> dict[str, object]:
        return {"reloads": self.reloads, "failures": self.failures, "last_error": self.last_error,
                "last_attempt": self.last_attempt, "last_success": self.last_success}


@dataclass(frozen=True)
class ReloadResult:
    ok: bool
    errors: list[str] = field(default_factory=list)
    changes: dict[str, list[str]] = field(default_factory=dict)
    deferred: bool = False
    """Refused for now: the file may still be being written (it would remove upstreams and was written within
    `reload.settle`); the watcher's next stable read applies it."""



class Reloads(Protocol):
    """The reloader as the edge sees it: its file, its record, and a reload asked for by an operator."""

    @property
    def path(self) -> Path: ...

    @property
    def status(self) -> ReloadStatus: ...

    async def reload(self, trigger: str, text: str | None = None, *, announce: bool = False) -> ReloadResult: ...
