"""The name ledger: the exposed names once given, so that names stay stable as tools come and go.

`gateway.registry` names a tool from the catalog first (an exact raw-name match gets its own name, whatever came
first); the ledger keeps the other names stable: per kind (`tools`, `prompts`), which exposed name each
(upstream, raw name) was given, which `assign_names` gives again and keeps from every other tool.

Ownership: the daemon opens one ledger per dispatcher (`NameLedger.for_config`); the registry rebuild reads it and
records new names, synchronously. The daemons (`serve`, `stdio`) persist it in a small JSON file; `plan`,
`explain` and `approve` read the file and never write it. With `cluster:` there is no ledger: one ledger per
replica would let a replica's history decide what a name means there, so names are the catalog's alone.

The file is never silently replaced. Each write goes to a temporary file renamed over the old one, after the
previous version (read back whole and valid just before) is kept as `<file>.bak`. A file that cannot be read
(unreadable, not UTF-8 JSON, another shape, too large) is recovered from `.bak` when that one is readable: the bad
file is kept aside as `<file>.corrupt-<unix time>` and an ERROR says so. Else Triad refuses to start
(`NameLedgerUnreadable`, the fail-closed choice: names a rule was written on could move to another tool) with an
ERROR that says how to recover, and the bad file stays where it is, so that the next start refuses too.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict, ValidationError

from consumers import loads, read_regular
from gateway.config import TriadConfig
from gateway.state._files import write_atomically

logger = logging.getLogger("triad.names")

Kind = Literal["tools", "prompts"]
Key = tuple[str, str]
Names = dict[Kind, dict[Key, str]]
KINDS: tuple[Kind, ...] = ("tools", "prompts")
LEDGER_SUFFIX = ".names.json"
BACKUP_SUFFIX = ".bak"
CORRUPT_SUFFIX = ".corrupt-"
MAX_NAMES = 20_000
"""Names kept per kind. Past it, names of tools no upstream offers now are forgotten, oldest first; the names of
the tools offered now are always kept."""
MAX_FILE_BYTES = 16 * 1024 * 1024
"""A ledger file larger than this is not read (it is unreadable, as a corrupt one): `MAX_NAMES` names of each
kind, at the spec's 128 characters a name and as long raw names, fit with room to spare."""


class NameLedgerUnreadable(Exception):
    """The ledger file and its last good copy cannot be read: the daemon does not start (the message says how to
    recover; it names files, never their content)."""


class _Unreadable(Exception):
    """One file that cannot be read as a ledger; the message is why."""


class _LedgerFile(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True)
    version: Literal[1]
    tools: dict[str, dict[str, str]] = {}
    prompts: dict[str, dict[str, str]] = {}


class NameLedger:
    def __init__(self, path: Path | None = None, *, persist: bool = False, remember: bool = True) -> None:
        """`remember=False`: a ledger that pins nothing (with `cluster:`), so names are the catalog's alone."""
        self.path = path
        self._persist = persist and path is not None
        self._remember = remember
        self._names: Names = {kind: {} for kind in KINDS}
        self._warned = False
        if path is not None and remember:
            for kind, names in self._open(path).items():
                self._names[kind].update(names)

    @classmethod
    def for_config(cls, config: TriadConfig, *, persist: bool) -> NameLedger:
        """The ledger of `config`'s file: `<state_dir>/<config name>.names.json`; in memory without a file; none
        with `cluster:`."""
        if config.cluster is not None:
            return cls(remember=False)
        return cls(ledger_path(config), persist=persist)

    def pinned(self, kind: Kind) -> Mapping[Key, str]:
        return self._names[kind]

    def record(self, kind: Kind, given: Mapping[Key, str]) -> None:
        """Remember the names given by a rebuild; write the file if any is new."""
        if not self._remember:
            return
        names = self._names[kind]
        changed = False
        for key, name in given.items():
            if names.get(key) != name:
                names.pop(key, None)  # a renamed entry moves to the end: it is the newest
                names[key] = name
                changed = True
        if len(names) > MAX_NAMES:
            for key in [k for k in names if k not in given][: len(names) - MAX_NAMES]:
                del names[key]
        if changed and self._persist:
            self._write()

    def _open(self, path: Path) -> Names:
        """The names in `path`, else in its last good copy (then a daemon sets the bad file aside and writes the
        good names back); neither readable: `NameLedgerUnreadable`. No file: a first start."""
        try:
            return _parse(path)[0]
        except FileNotFoundError:
            return {}
        except _Unreadable as bad:
            backup = _backup_of(path)
            try:
                names, content = _parse(backup)
            except (FileNotFoundError, _Unreadable) as no_copy:
                why = "there is none" if isinstance(no_copy, FileNotFoundError) else f"it cannot be read: {no_copy}"
                raise NameLedgerUnreadable(
                    f"the name ledger {path} cannot be read ({bad}), and of its last good copy {backup} {why}; "
                    "Triad does not start rather than give names that a rule may not have been written on. To "
                    f"recover: put a good copy at {path}, or move {path} aside to start from the names the "
                    "catalogs give (a tool whose raw name is exactly its name's form keeps it; others may change)"
                ) from None
            if not self._persist:
                logger.error("the name ledger %s cannot be read (%s); names are read from its last good copy %s "
                             "(the daemon will restore it)", path, bad, backup)
                return names
            aside = path.with_name(f"{path.name}{CORRUPT_SUFFIX}{int(time.time())}")
            try:
                os.replace(path, aside)
                write_atomically(path, content)
            except OSError as exc:
                raise NameLedgerUnreadable(f"the name ledger {path} cannot be read ({bad}), and it cannot be "
                                           f"replaced by its last good copy {backup} ({exc.strerror}); fix the "
                                           "file or its directory and restart") from None
            logger.error("the name ledger %s cannot be read (%s): it is kept as %s, and the names are restored "
                         "from its last good copy %s", path, bad, aside, backup)
            return names

    def _write(self) -> None:
        """Merge what another process wrote meanwhile (ours wins), keep that version as `.bak`, then replace the
        file in one rename. A file gone bad meanwhile is set aside (ERROR): ours are the last good names."""
        assert self.path is not None
        previous: bytes | None = None
        try:
            theirs, previous = _parse(self.path)
        except FileNotFoundError:
            theirs = {}
        except _Unreadable as bad:
            theirs = {}
            aside = self.path.with_name(f"{self.path.name}{CORRUPT_SUFFIX}{int(time.time())}")
            with contextlib.suppress(OSError):
                os.replace(self.path, aside)
                logger.error("the name ledger %s went bad while Triad ran (%s): it is kept as %s and written anew "
                             "from the names in memory", self.path, bad, aside)
        for kind, names in theirs.items():
            ours = self._names[kind]
            self._names[kind] = {**{k: v for k, v in names.items() if k not in ours}, **ours}
        document: dict[str, dict[str, dict[str, str]]] = {}
        for kind in KINDS:
            section = document.setdefault(kind, {})
            for (upstream, raw), name in self._names[kind].items():
                section.setdefault(upstream, {})[raw] = name
        content = json.dumps({"version": 1, **document}, indent=1, sort_keys=True).encode()
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            if previous is not None:
                write_atomically(_backup_of(self.path), previous)
            write_atomically(self.path, content)
        except OSError as exc:
            self._warn("cannot write %s (%s); exposed names are kept in memory only", self.path, exc.strerror)

    def _warn(self, message: str, *args: object) -> None:
        if not self._warned:
            self._warned = True
            logger.warning(message, *args)


def _parse(path: Path) -> tuple[Names, bytes]:
    """The names in a ledger file and its bytes; `FileNotFoundError` when there is none, else `_Unreadable`."""
    try:
        content, _ = read_regular(path, MAX_FILE_BYTES)
    except FileNotFoundError:
        raise
    except OSError as exc:
        raise _Unreadable(exc.strerror or type(exc).__name__) from None
    try:
        document = _LedgerFile.model_validate(loads(content.decode("utf-8")))
    except UnicodeDecodeError:
        raise _Unreadable("not UTF-8") from None
    except json.JSONDecodeError as exc:
        raise _Unreadable(f"not JSON: {exc.msg} at line {exc.lineno} column {exc.colno}") from None
    except ValidationError as exc:
        where = exc.errors()[0]
        raise _Unreadable(f"not a name ledger: {'.'.join(map(str, where['loc'])) or 'top'}: {where['msg']}") from None
    names: Names = {kind: {(upstream, raw): name for upstream, tools in getattr(document, kind).items()
                           for raw, name in tools.items()} for kind in KINDS}
    return names, content



def _backup_of(path: Path) -> Path:
    return path.with_name(path.name + BACKUP_SUFFIX)


def ledger_path(config: TriadConfig) -> Path | None:
    directory = config.state_directory()
    if directory is None or config.source is None:
        return None
    return directory / f"{config.source.stem}{LEDGER_SUFFIX}"
