"""Pinned tool definitions: a JSON state file of approved definition hashes, keyed by `upstream:raw name`.

The hash covers what a model reads and what shapes a call: description, title, input and output schemas,
annotations, icons, `_meta` and `execution` (outside attack F5: a tracking icon or `_meta` text reached clients
unchecked). A pin recorded before the last three were hashed (`legacy_hash`) still holds for its five fields, and is
taken over by the full hash of the definition first seen after the upgrade, from then on enforced whole. The store
re-reads the file when it changes on disk, so `triad approve` takes effect without a restart. Writes go to a
temporary file renamed over the old one (no torn state file). Beside each hash the file keeps the hashed fields of
the approved definition, so that an operator can see what changed (`pending`); a file written before definitions
were kept has hashes only.

The file is never silently replaced: after each write a copy of it is kept as `<file>.bak`. A file that cannot
be read (not UTF-8 JSON, another shape, too large, no regular file) is set aside as `<file>.corrupt-<unix time>`
(ERROR) and written again from what this process read, or, by a process that has not read it, from `.bak` when
that one is readable; else every pinned tool is blocked with a reason that says how to recover
(`PinStateUnreadable`: never fail open, never first-use pin over the bad file), and the file is left as it is.
"""

from __future__ import annotations

import difflib
import hashlib
import json
import logging
import os
import threading
import time
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from consumers import JSON, JSONObject, loads, read_regular
from gateway.state._files import write_atomically

logger = logging.getLogger("triad.pins")

LEGACY_FIELDS = ("description", "title", "inputSchema", "outputSchema", "annotations")
"""What a pin hashed before icons, `_meta` and `execution` were pinned too."""
HASHED_FIELDS = (*LEGACY_FIELDS, "icons", "_meta", "execution")


MAX_STATE_BYTES = 64 * 1024 * 1024
"""A state file larger than this is not read (it is unreadable, as a corrupt one)."""
BACKUP_SUFFIX = ".bak"
CORRUPT_SUFFIX = ".corrupt-"


class PinStateUnreadable(Exception):
    """The state file and its last good copy cannot be read: what is pinned is unknown, so every pinned tool is
    blocked (the message names files, never their content, and says how to recover)."""


class _Unreadable(Exception):
    """One file that cannot be read as a state file; the message is why."""


def pinned_fields(definition: Mapping[str, JSON]) -> JSONObject:
    """What the hash covers (and the state file keeps) of a definition."""
    return {key: definition.get(key) for key in HASHED_FIELDS}


def definition_hash(definition: Mapping[str, JSON]) -> str:
    return _hash(pinned_fields(definition))


def legacy_hash(definition: Mapping[str, JSON]) -> str:
    """The hash a pin recorded before every field of `HASHED_FIELDS` was hashed: only `LEGACY_FIELDS`."""
    return _hash({key: definition.get(key) for key in LEGACY_FIELDS})


def _hash(fields: Mapping[str, JSON]) -> str:
    return hashlib.sha256(json.dumps(fields, sort_keys=True, default=str).encode()).hexdigest()


def pin_match(pinned: str, definition: Mapping[str, JSON]) -> Literal["same", "legacy", "changed"]:
    """How a pinned digest stands to `definition`: `legacy` is a pin recorded before the full hash whose five fields
    still hold, to be taken over by the full hash (the two hashes never coincide: their inputs differ in shape)."""
    if pinned == definition_hash(definition):
        return "same"
    return "legacy" if pinned == legacy_hash(definition) else "changed"


def pin_diff(approved: Mapping[str, JSON] | None, current: Mapping[str, JSON]) -> list[str]:
    """Unified diff of the approved definition's fields against the current ones (empty: none was kept)."""
    if approved is None:
        return []
    old = json.dumps(approved, indent=2, sort_keys=True, default=str).splitlines()
    new = json.dumps(current, indent=2, sort_keys=True, default=str).splitlines()
    return list(difflib.unified_diff(old, new, "approved", "current", lineterm="", n=3))[2:]


@dataclass(frozen=True)
class PinStatus:
    """Where a tool's current definition stands: `approved`, `changed` (since approval), or `new` (never pinned)."""

    state: Literal["approved", "changed", "new"]
    approved: JSONObject | None
    """The approved definition's hashed fields, when the state file kept them."""
    current: JSONObject
    legacy: bool = False
    """Approved by a pin of the five legacy fields only: `check` takes it over with the full hash."""


class PinStore:
    def __init__(self, path: Path) -> None:
        self.path = path
        self._lock = threading.Lock()
        self._pins: dict[str, str] = {}
        self._definitions: dict[str, JSONObject] = {}
        self._first_use: dict[str, float] = {}
        """When each pin that no operator approved was made on first use (`trust_new`): in a cluster, a weaker
        claim than an approval, and than an older first use (`gateway.cluster.RedisPins`)."""
        self._mtime: float | None = None
        self._unreadable: tuple[float, PinStateUnreadable] | None = None
        """The mtime of a bad file without a good copy, and why: reported once, blocking until it changes."""

    def _load(self) -> None:
        try:
            mtime = self.path.stat().st_mtime
        except FileNotFoundError:
            self._gone()
            return
        if mtime == self._mtime:
            return
        if self._unreadable is not None and self._unreadable[0] == mtime:
            raise self._unreadable[1]  # the same bad file: reported once, still blocking
        try:
            (self._pins, self._definitions, self._first_use), _ = _parse(self.path)
        except FileNotFoundError:  # renamed away between the stat and the read
            self._gone()
            return
        except _Unreadable as bad:
            if self._mtime is not None:  # read whole by this process before: what it holds is the latest
                self._restore_from_memory(bad)
                return
            try:
                (self._pins, self._definitions, self._first_use) = self._recover(bad)
            except PinStateUnreadable as exc:
                logger.error("%s", exc)
                self._pins, self._definitions, self._first_use, self._mtime = {}, {}, {}, None
                self._unreadable = (mtime, exc)
                raise
        self._unreadable = None
        self._mtime = self.path.stat().st_mtime

    def _gone(self) -> None:
        """No state file. Only a first start has none: one deleted (by hand, by a cleanup job) is put back from
        its last good copy, or from what this process last read, never taken as "nothing approved", which would
        pin first uses over every approval (outside attack F4). To start over, remove the file and its `.bak`."""
        backup = self.path.with_name(self.path.name + BACKUP_SUFFIX)
        if self._mtime is None and not os.path.lexists(backup):
            self._pins, self._definitions, self._first_use = {}, {}, {}
            return
        source = str(backup) if self._mtime is None else "the approvals this process read"
        if self._mtime is None:  # not read by this process: the last good copy is what was approved
            (self._pins, self._definitions, self._first_use) = self._recover(_Unreadable("it was deleted"))
        else:
            self._save()
        logger.error("the pin_definitions state file %s was deleted: it is written again from %s", self.path, source)
        self._mtime = self.path.stat().st_mtime

    def _restore_from_memory(self, bad: _Unreadable) -> None:
        """The file went bad under this process (truncated, replaced by a FIFO): set it aside and write what this
        process holds, which is newer than any copy (outside attack: restoring `.bak` then forgot the last pin)."""
        aside = self.path.with_name(f"{self.path.name}{CORRUPT_SUFFIX}{int(time.time())}")
        try:
            os.replace(self.path, aside)
            self._save()
        except OSError as exc:
            message = (f"the pin_definitions state file {self.path} cannot be read ({bad}) nor written again "
                       f"({exc.strerror}); every pinned tool is blocked until the file or its directory is fixed")
            raise PinStateUnreadable(message) from None
        logger.error("the pin_definitions state file %s cannot be read (%s): it is kept as %s, and written again "
                     "from the approvals this process read", self.path, bad, aside)

    def _recover(self, bad: _Unreadable) -> _State:
        """The state of the last good copy, put back in place of the bad file (kept aside); else
        `PinStateUnreadable`, the bad file left where it is."""
        backup = self.path.with_name(self.path.name + BACKUP_SUFFIX)
        try:
            state, content = _parse(backup)
        except (FileNotFoundError, _Unreadable) as no_copy:
            why = "there is none" if isinstance(no_copy, FileNotFoundError) else f"it cannot be read: {no_copy}"
            message = (f"the pin_definitions state file {self.path} cannot be read ({bad}), and of its last good "
                       f"copy {backup} {why}; every pinned tool is blocked until it is fixed. To recover: put a "
                       f"good copy at {self.path}, or move it aside and approve the tools again "
                       "(`triad approve -c <config>`)")
            raise PinStateUnreadable(message) from None
        aside = self.path.with_name(f"{self.path.name}{CORRUPT_SUFFIX}{int(time.time())}")
        moved = os.path.lexists(self.path)
        try:
            if moved:
                os.replace(self.path, aside)
            write_atomically(self.path, content)
        except OSError as exc:
            message = (f"the pin_definitions state file {self.path} cannot be read ({bad}), and it cannot be "
                       f"replaced by its last good copy {backup} ({exc.strerror}); every pinned tool is blocked "
                       "until the file or its directory is fixed")
            raise PinStateUnreadable(message) from None
        if moved:
            logger.error("the pin_definitions state file %s cannot be read (%s): it is kept as %s, and the "
                         "approvals are restored from its last good copy %s", self.path, bad, aside, backup)
        return state

    def _save(self) -> None:
        content = json.dumps({"pins": self._pins, "definitions": self._definitions, "first_use": self._first_use},
                             indent=2, sort_keys=True, default=str).encode()
        self.path.parent.mkdir(parents=True, exist_ok=True)  # a first `triad approve` before any daemon ran
        write_atomically(self.path, content)
        self._mtime = self.path.stat().st_mtime
        # the copy is of this write, not the one before: a copy one version old forgot the newest approval
        write_atomically(self.path.with_name(self.path.name + BACKUP_SUFFIX), content)

    def check(self, upstream: str, raw: str, definition: Mapping[str, JSON], trust_new: bool) -> str | None:
        """None when the definition is approved (or new and trusted on first use); else why it is blocked."""
        key, digest = f"{upstream}:{raw}", definition_hash(definition)
        with self._lock:
            try:
                self._load()
            except PinStateUnreadable as exc:
                return f"its approval cannot be read ({exc})"
            pinned = self._pins.get(key)
            if pinned is None:
                if not trust_new:
                    return "its definition has not been approved yet"
                self._pin(key, digest, definition, first_use=time.time())
                return None
            match = pin_match(pinned, definition)
            if match == "changed":
                return f"its definition changed since it was approved (approved {pinned[:12]}, now {digest[:12]})"
            if match == "legacy":
                self._pin(key, digest, definition, first_use=self._first_use.get(key))
            return None

    def approve(self, upstream: str, raw: str, definition: Mapping[str, JSON]) -> bool:
        """Pin the current definition; True if that changed the state file."""
        key, digest = f"{upstream}:{raw}", definition_hash(definition)
        with self._lock:
            self._load()
            if self._pins.get(key) == digest and key not in self._first_use:
                return False
            self._pin(key, digest, definition)
            return True

    def status(self, upstream: str, raw: str, definition: Mapping[str, JSON]) -> PinStatus:
        """Where `definition` stands against the approved one; changes nothing."""
        key, current = f"{upstream}:{raw}", pinned_fields(definition)
        with self._lock:
            self._load()
            pinned, approved = self._pins.get(key), self._definitions.get(key)
        if pinned is None:
            return PinStatus("new", None, current)
        match = pin_match(pinned, definition)
        return PinStatus("changed" if match == "changed" else "approved", approved, current, match == "legacy")

    def pinned(self, upstream: str, raw: str) -> tuple[str, JSONObject | None, float | None] | None:
        """The approved digest of `upstream:raw`, its kept fields, and when it was pinned on first use (None: an
        operator approved it); None when none is."""
        key = f"{upstream}:{raw}"
        with self._lock:
            self._load()
            digest = self._pins.get(key)
            return (digest, self._definitions.get(key), self._first_use.get(key)) if digest is not None else None

    def remember(self, upstream: str, raw: str, digest: str, fields: JSONObject | None,
                 first_use: float | None = None) -> bool:
        """Keep an approval made elsewhere (the cluster's: `first_use` when a replica pinned it on first use);
        True if that changed the state file."""
        key = f"{upstream}:{raw}"
        with self._lock:
            self._load()
            if self._pins.get(key) == digest and self._first_use.get(key) == first_use:
                return False
            self._pins[key] = digest
            if fields is not None:
                self._definitions[key] = fields
            else:
                self._definitions.pop(key, None)
            self._mark(key, first_use)
            self._save()
            return True

    def _pin(self, key: str, digest: str, definition: Mapping[str, JSON], first_use: float | None = None) -> None:
        self._pins[key] = digest
        self._definitions[key] = pinned_fields(definition)
        self._mark(key, first_use)
        self._save()

    def _mark(self, key: str, first_use: float | None) -> None:
        if first_use is None:
            self._first_use.pop(key, None)
        else:
            self._first_use[key] = first_use


_State = tuple[dict[str, str], dict[str, JSONObject], dict[str, float]]
"""Pins, kept definitions, first-use times."""


def _parse(path: Path) -> tuple[_State, bytes]:
    """(pins, definitions) in a state file and its bytes; `FileNotFoundError` when there is none, else
    `_Unreadable`."""
    try:
        content, _ = read_regular(path, MAX_STATE_BYTES)
    except FileNotFoundError:
        raise
    except OSError as exc:
        raise _Unreadable(exc.strerror or type(exc).__name__) from None
    if not content.strip():  # a state file is never written empty: this one was cut short, or emptied
        raise _Unreadable("empty")
    try:
        state = loads(content.decode("utf-8"))
    except UnicodeDecodeError:
        raise _Unreadable("not UTF-8") from None
    except json.JSONDecodeError as exc:
        raise _Unreadable(f"not JSON: {exc.msg} at line {exc.lineno} column {exc.colno}") from None
    pins = state.get("pins", {}) if isinstance(state, dict) else None
    definitions = state.get("definitions", {}) if isinstance(state, dict) else None
    if not isinstance(pins, dict) or not all(isinstance(k, str) and isinstance(v, str) for k, v in pins.items()):
        raise _Unreadable("not a pin state: `pins` is not an object of digests")
    if not isinstance(definitions, dict) or not all(isinstance(v, dict) for v in definitions.values()):
        raise _Unreadable("not a pin state: `definitions` is not an object of definitions")
    first_use = state.get("first_use", {})  # absent in files written before first uses were marked
    if not isinstance(first_use, dict) or not all(
            type(v) in (int, float) for v in first_use.values()):
        raise _Unreadable("not a pin state: `first_use` is not an object of times")
    return (pins, definitions, {k: float(v) for k, v in first_use.items()}), content

