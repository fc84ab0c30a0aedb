"""Hot reload: a new config is validated whole, then applied as a diff; an invalid one changes nothing.

Ownership: the daemon creates one `Reloader` and runs `watch()` as a task in its root task group; SIGHUP and
`POST /admin/reload` call `reload()` directly. Reloads are serialised by a lock. Applying a config never awaits an
upstream: the pool starts or retires connections in its own tasks, the dispatcher swaps its config, policy and
registry by assignment, and the notifier tells each session whose view changed.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass, field
from pathlib import Path

import anyio
import watchfiles

from consumers import UpstreamPool
from gateway.config import TriadConfig, load_config
from gateway.dispatch import Dispatcher
from gateway.errors import ConfigError
from gateway.hooks import HookConfigError, build_chain

logger = logging.getLogger("triad.reload")

WATCH_DEBOUNCE_MS = 300
"""Editors write in bursts (truncate, write, rename); one reload per burst."""


@dataclass
class ReloadStatus:
    reloads: int = 0
    failures: int = 0
    last_error: list[str] = field(default_factory=list)
    last_attempt: float | None = None
    last_success: float | None = None

    def as_dict(self) -> dict[str, object]:
        return {"reloads": self.reloads, "failures": self.failures, "last_error": self.last_error,
                "last_attempt": self.last_attempt, "last_success": self.last_success}


@dataclass(frozen=True)
class ReloadResult:
    ok: bool
    errors: list[str] = field(default_factory=list)
    changes: dict[str, list[str]] = field(default_factory=dict)


class Reloader:
    def __init__(self, path: Path, config: TriadConfig, pool: UpstreamPool, dispatcher: Dispatcher) -> None:
        self.path = path
        self.config = config
        self.status = ReloadStatus()
        self._pool = pool
        self._dispatcher = dispatcher
        self._lock = anyio.Lock()
        self._stop_watching = anyio.Event()

    def stop(self) -> None:
        """End `watch()`. Its watcher thread only notices this event (cancellation waits for the thread)."""
        self._stop_watching.set()

    async def reload(self, trigger: str) -> ReloadResult:
        async with self._lock:
            self.status.last_attempt = time.time()
            try:
                new = await anyio.to_thread.run_sync(load_config, self.path)
            except ConfigError as exc:
                self.status.failures += 1
                self.status.last_error = exc.problems
                logger.error("reload (%s) refused, the running config stays in force:\n  %s", trigger,
                             "\n  ".join(exc.problems))
                return ReloadResult(False, exc.problems)
            try:
                hooks = build_chain(new.hooks)
            except HookConfigError as exc:
                self.status.failures += 1
                self.status.last_error = [new.hide_values(f"hooks: {exc}")]
                logger.error("reload (%s) refused, the running config stays in force: %s", trigger,
                             self.status.last_error[0])
                return ReloadResult(False, self.status.last_error)
            if new.listen != self.config.listen:
                logger.warning("reload (%s): listen changed (%s:%d -> %s:%d); it takes effect on restart only",
                               trigger, self.config.listen.host, self.config.listen.port, new.listen.host,
                               new.listen.port)
            changes = self._pool.apply(new)
            self._dispatcher.apply_config(new, hooks)
            self.config = new
            self.status.reloads += 1
            self.status.last_success = time.time()
            self.status.last_error = []
            summary = ", ".join(f"{kind} {', '.join(names)}" for kind, names in changes.items()
                                if names and kind != "kept") or "no upstream changes"
            logger.info("reloaded config (%s): %s; registry version %d", trigger, summary,
                        self._dispatcher.registry.version)
            return ReloadResult(True, [], changes)

    async def watch(self) -> None:
        """Reload when the config file changes. The directory is watched, so a write-and-rename (what editors
        do) is seen as well as an in-place write."""
        target = self.path.resolve()

        def is_config(_change: watchfiles.Change, changed: str) -> bool:
            return Path(changed).resolve() == target

        async for _changes in watchfiles.awatch(target.parent, watch_filter=is_config,
                                                debounce=WATCH_DEBOUNCE_MS, step=50, recursive=False,
                                                stop_event=self._stop_watching):
            if target.exists():
                await self.reload("file changed")
