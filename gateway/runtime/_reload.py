"""Hot reload: a new config is validated whole, then applied as a diff; an invalid one changes nothing.

Ownership: the daemon creates one `Reloader` and runs `watch()` as a task in its root task group; SIGHUP and
`POST /admin/reload` call `reload()` directly. Reloads are serialised by a lock. Applying a config never awaits an
upstream: the pool starts or retires connections in its own tasks, the dispatcher swaps its config, policy and
registry by assignment, and the notifier tells each session whose view changed.

Fail closed: a file caught mid-write is never applied (the watcher waits until two readings `reload.settle` apart
agree, then parses exactly that content); an empty file is invalid; and a reload that would turn authentication off or
remove every upstream is refused unless the new file says so (`clients: {}`, `upstreams: {}`), since a truncated
or half-written file looks just like that. A reload that removes some upstreams (what a writer paused mid-file for
longer than the settle interval looks like) is held back while the file it read had been unchanged for less than
`reload.settle` when the read began (`written_ago`): it is logged with why, and the watcher's next stable read
applies it, so a removal needs the file quiet for two settle intervals.
"""

from __future__ import annotations

import functools
import logging
import time
from collections.abc import Awaitable, Callable
from pathlib import Path

import anyio
import watchfiles

from consumers import UpstreamPool, read_regular
from gateway.calls import Dispatcher
from gateway.config import TriadConfig
from gateway.errors import ConfigError
from gateway.hooks import HookConfigError, build_chain
from gateway.identity import requires_token
from gateway.observe import ReloadResult, ReloadStatus, mask_logs
from gateway.runtime._loading import decode_config, parse_config
from gateway.runtime._watch import Fingerprint, fingerprint

logger = logging.getLogger("triad.reload")

WATCH_DEBOUNCE_MS = 300
"""Editors write in bursts (truncate, write, rename); one reload per burst."""
WATCH_POLL_MS = 1000
"""Between events, the link chain and the file are compared this often: a change no event announced (a directory
that was swapped away under the watch, a network file system) is seen within it."""


def fail_closed_problems(old: TriadConfig, new: TriadConfig) -> list[str]:
    """What a reload from `old` to `new` would drop that an empty or truncated file drops too: every token, every
    upstream. Allowed only when the new file writes the empty block itself."""
    problems = []
    if requires_token(old) and not requires_token(new) and not _written_empty(new, "clients"):
        problems.append("clients: this reload would turn authentication off (no client has a token any more); "
                        "if that is meant, write `clients: {}` in the file")
    if old.upstreams and not new.upstreams and not _written_empty(new, "upstreams"):
        problems.append("upstreams: this reload would remove every upstream; if that is meant, write "
                        "`upstreams: {}` in the file")
    return problems


def changed_settings(old: TriadConfig, new: TriadConfig) -> list[str]:
    """The top-level keys besides `upstreams` whose value a reload changes (`hooks`, `policy`, `clients`...), so
    that a reload that changed only those says so instead of reading like one that changed nothing."""
    fields = [key for key in TriadConfig.model_fields if key not in ("upstreams", "source")]
    return [key for key in fields if getattr(old, key) != getattr(new, key)]


def _written_empty(config: TriadConfig, key: str) -> bool:
    return key in config.model_fields_set and not getattr(config, key)


class Reloader:
    def __init__(self, path: Path, config: TriadConfig, pool: UpstreamPool, dispatcher: Dispatcher,
                 announce: Callable[[], Awaitable[None]] | None = None) -> None:
        self.path = path
        self.config = config
        self.status = ReloadStatus()
        self._pool = pool
        self._dispatcher = dispatcher
        self._lock = anyio.Lock()
        self._stop_watching = anyio.Event()
        self._last_text: str | None = None
        """The content the last reload read: the watcher does not reload a file whose content did not change."""
        self._announce = announce
        """With `cluster:`, tells the other replicas to reload too (after a reload asked of this one succeeded)."""

    def stop(self) -> None:
        """End `watch()`. Its watcher thread only notices this event (cancellation waits for the thread)."""
        self._stop_watching.set()

    async def reload(self, trigger: str, text: str | None = None, *, announce: bool = False,
                     written_ago: float | None = None) -> ReloadResult:
        """Validate the file (or `text`, content already read from it, `written_ago` seconds after its last write)
        and apply it; refuse it whole if invalid. With `announce` (a reload an operator asked of this replica), the
        cluster's other replicas reload too."""
        result = await self._reload(trigger, text, written_ago)
        if announce and result.ok and self._announce is not None:
            await self._announce()
        return result

    async def _reload(self, trigger: str, text: str | None, written_ago: float | None) -> ReloadResult:
        async with self._lock:
            self.status.last_attempt = time.time()
            try:
                if text is None:
                    text, written_ago = await _read(self.path)
                new = await anyio.to_thread.run_sync(functools.partial(parse_config, text, source=self.path))
                if problems := fail_closed_problems(self.config, new):
                    self._last_text = text
                    raise ConfigError(problems)
                if (held := self._still_written(new, written_ago)) is not None:
                    return self._deferred(trigger, held)
                self._last_text = text
                hooks = build_chain(new.hooks, self._dispatcher.shared, on_block=self._dispatcher.metrics.blocked,
                                    resolve=new.resolve_path)
            except ConfigError as exc:
                self._last_text = text
                return self._refused(trigger, exc.problems)
            except HookConfigError as exc:
                return self._refused(trigger, [new.hide_values(f"hooks: {exc}")])
            except Exception as exc:  # no file may take the daemon down: whatever reading it raised, it is refused
                logger.exception("reload (%s): reading the config failed unexpectedly", trigger)
                return self._refused(trigger, [f"the file could not be read ({type(exc).__name__})"])
            if new.listen != self.config.listen:
                logger.warning("reload (%s): listen changed (%s:%d -> %s:%d); it takes effect on restart only",
                               trigger, self.config.listen.host, self.config.listen.port, new.listen.host,
                               new.listen.port)
            changes = await self._pool.apply(new)
            changes["settings"] = changed_settings(self.config, new)
            self._dispatcher.apply_config(new, hooks)
            mask_logs(new.secret_mask())
            self.config = new
            self.status.reloads += 1
            self.status.last_success = time.time()
            self.status.last_error = []
            self.status.record(trigger, True, [], changes)
            summary = ", ".join(f"{kind} {', '.join(names)}" for kind, names in changes.items()
                                if names and kind != "kept") or "nothing changed"
            logger.info("reloaded config (%s): %s; registry version %d", trigger, summary,
                        self._dispatcher.registry.version)
            return ReloadResult(True, [], changes)

    def _still_written(self, new: TriadConfig, written_ago: float | None) -> str | None:
        """Why `new` is held back: it removes upstreams, and its file had been unchanged for less than the settle
        interval when it was read (a writer paused mid-file looks like that); None: apply it."""
        removed = sorted(set(self.config.upstreams) - set(new.upstreams))
        settle = self.config.reload.settle
        if not removed or written_ago is None or written_ago >= settle:
            return None
        return (f"upstreams: this reload would remove {', '.join(removed)}, and the file had been written "
                f"{max(written_ago, 0):.2f}s before it was read (less than reload.settle, {settle:g}s): it may "
                "still be being written; the next stable read of the file applies it")

    def _deferred(self, trigger: str, why: str) -> ReloadResult:
        self.status.record(trigger, False, [why], {})
        logger.warning("reload (%s) held back, the running config stays in force for now: %s", trigger, why)
        return ReloadResult(False, [why], deferred=True)

    def _refused(self, trigger: str, problems: list[str]) -> ReloadResult:
        self.status.failures += 1
        self.status.last_error = problems
        self.status.record(trigger, False, problems, {})
        logger.error("reload (%s) refused, the running config stays in force:\n  %s", trigger, "\n  ".join(problems))
        return ReloadResult(False, problems)

    async def watch(self) -> None:
        """Reload when the config file changes: written in place, renamed over, or reached through a symlink that
        is retargeted (`ln -sfn`, a Kubernetes ConfigMap's `..data` swap). Every directory on the link chain is
        watched, the chain is recomputed on each change, and a poll every `WATCH_POLL_MS` catches what no event
        announced (`gateway.runtime._watch`)."""
        seen = fingerprint(self.path)
        while not self._stop_watching.is_set():
            directories = seen.directories(self.path)
            try:
                seen = await self._watch_chain(seen, directories)
            except OSError as exc:  # a watched directory went away (the old side of a swap): watch the new chain
                logger.debug("config watch restarted: %s", exc)
                await anyio.sleep(WATCH_POLL_MS / 1000)  # not a busy loop while a directory is missing
                seen = await self._apply_if_changed(seen)

    async def _watch_chain(self, seen: Fingerprint, directories: frozenset[Path]) -> Fingerprint:
        """Watch `directories` until the chain leads elsewhere; the fingerprint last applied."""
        names = seen.names(self.path)
        async for _changes in watchfiles.awatch(*(d for d in directories if d.is_dir()), debounce=WATCH_DEBOUNCE_MS,
                                                step=50, recursive=False, stop_event=self._stop_watching,
                                                rust_timeout=WATCH_POLL_MS, yield_on_timeout=True,
                                                watch_filter=lambda _change, changed: changed in names):
            seen = await self._apply_if_changed(seen)
            if seen.directories(self.path) != directories or seen.names(self.path) != names:
                logger.info("config file %s is now reached through %s; watching there", self.path,
                            seen.target[0] if seen.target is not None else "a missing file")
                break
        return seen

    async def _apply_if_changed(self, seen: Fingerprint) -> Fingerprint:
        if fingerprint(self.path) == seen:
            return seen
        now = fingerprint(self.path)  # before reading: a change during the read shows as a difference next time
        settled = await self._settled_text()
        if isinstance(settled, ConfigError):  # not UTF-8: refused like any broken file, not silently skipped
            async with self._lock:
                self._last_text = None
                self._refused("file changed", settled.problems)
        elif settled is not None and settled[0] != self._last_text:
            result = await self.reload("file changed", settled[0], written_ago=settled[1])
            if result.deferred:
                return seen  # still "changed": the next poll reads it again
        elif settled is not None:
            logger.debug("config file touched, content unchanged; not reloaded")
        return now

    async def _settled_text(self) -> tuple[str, float] | ConfigError | None:
        """The file's text once two readings `reload.settle` apart agree, and how long it had been unchanged when
        the first of them began; None if it cannot be read; the problem if its settled content is not UTF-8 (a
        writer caught half-way through a character is not: the bytes are compared before they are decoded)."""
        try:
            content, written_ago = await _read_bytes(self.path)
            while True:
                await anyio.sleep(self.config.reload.settle)
                again, again_ago = await _read_bytes(self.path)
                if again == content:
                    break
                content, written_ago = again, again_ago
        except ConfigError:
            return None
        try:
            return decode_config(content, self.path), written_ago
        except ConfigError as exc:
            return exc


async def _read(path: Path) -> tuple[str, float]:
    """The file's text, and the seconds between its last write and the start of this read (the modification time
    is taken after the read: a write during it makes the file look younger, never older)."""
    content, written_ago = await _read_bytes(path)
    return decode_config(content, path), written_ago


async def _read_bytes(path: Path) -> tuple[bytes, float]:
    began = time.time()
    try:
        return await anyio.to_thread.run_sync(_read_now, path, began)
    except OSError as exc:
        raise ConfigError([f"{path}: cannot read ({exc.strerror})"]) from None


def _read_now(path: Path, began: float) -> tuple[bytes, float]:
    content, modified = read_regular(path)
    return content, began - modified
