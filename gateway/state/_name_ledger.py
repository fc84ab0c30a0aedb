"""The name ledger: every exposed name once given, so that a name stays with its tool across reloads and restarts.

`gateway.registry` gives names from (upstream, raw name) alone, so without memory a tool an upstream adds later can
take the name another tool had (`Delete_File` sorts before `delete_file`) and slip past a rule written on that
name. The ledger remembers, per kind (`tools`, `prompts`), which exposed name each (upstream, raw name) was given;
`assign_names` gives them again and keeps them from every other tool.

Ownership: the daemon opens one ledger per dispatcher (`NameLedger.for_config`); the registry rebuild reads it and
records new names, synchronously. The daemons (`serve`, `stdio`) persist it in a small JSON file, written to a
temporary file and renamed over the old one; `plan`, `explain` and `approve` read the file and never write it. A
file that cannot be read or written is logged once and the ledger lives on in memory.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Literal

from gateway.config import TriadConfig

logger = logging.getLogger("triad.names")

Kind = Literal["tools", "prompts"]
Key = tuple[str, str]
KINDS: tuple[Kind, ...] = ("tools", "prompts")
LEDGER_SUFFIX = ".names.json"
MAX_NAMES = 20_000
"""Names kept per kind. Past it, names of tools no upstream offers now are forgotten, oldest first; the names of
the tools offered now are always kept."""


class NameLedger:
    def __init__(self, path: Path | None = None, *, persist: bool = False) -> None:
        self.path = path
        self._persist = persist and path is not None
        self._names: dict[Kind, dict[Key, str]] = {kind: {} for kind in KINDS}
        self._warned = False
        if path is not None:
            for kind, names in self._read().items():
                self._names[kind].update(names)

    @classmethod
    def for_config(cls, config: TriadConfig, *, persist: bool) -> NameLedger:
        """The ledger of `config`'s file: `<state_dir>/<config name>.names.json`; in memory without a file."""
        return cls(ledger_path(config), persist=persist)

    def pinned(self, kind: Kind) -> Mapping[Key, str]:
        return self._names[kind]

    def record(self, kind: Kind, given: Mapping[Key, str]) -> None:
        """Remember the names given by a rebuild; write the file if any is new."""
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

    def _read(self) -> dict[Kind, dict[Key, str]]:
        assert self.path is not None
        try:
            data = json.loads(self.path.read_text(encoding="utf-8"))
        except FileNotFoundError:
            return {}
        except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
            self._warn("cannot read %s (%s); exposed names start afresh", self.path, exc)
            return {}
        out: dict[Kind, dict[Key, str]] = {}
        for kind in KINDS:
            section = data.get(kind) if isinstance(data, dict) else None
            out[kind] = {(upstream, raw): name
                         for upstream, tools in (section.items() if isinstance(section, dict) else ())
                         if isinstance(tools, dict)
                         for raw, name in tools.items() if isinstance(name, str)}
        return out

    def _write(self) -> None:
        """Merge what another process wrote meanwhile (ours wins), then replace the file in one rename."""
        assert self.path is not None
        for kind, theirs in self._read().items():
            ours = self._names[kind]
            self._names[kind] = {**{k: v for k, v in theirs.items() if k not in ours}, **ours}
        document: dict[str, dict[str, dict[str, str]]] = {}
        for kind in KINDS:
            section = document.setdefault(kind, {})
            for (upstream, raw), name in self._names[kind].items():
                section.setdefault(upstream, {})[raw] = name
        temporary = self.path.with_name(f".{self.path.name}.{os.getpid()}.tmp")
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            with temporary.open("w", encoding="utf-8") as stream:
                json.dump({"version": 1, **document}, stream, indent=1, sort_keys=True)
                stream.flush()
                os.fsync(stream.fileno())
            os.replace(temporary, self.path)
        except OSError as exc:
            with contextlib.suppress(OSError):
                temporary.unlink(missing_ok=True)
            self._warn("cannot write %s (%s); exposed names are kept in memory only", self.path, exc.strerror)

    def _warn(self, message: str, *args: object) -> None:
        if not self._warned:
            self._warned = True
            logger.warning(message, *args)


def ledger_path(config: TriadConfig) -> Path | None:
    directory = config.state_directory()
    if directory is None or config.source is None:
        return None
    return directory / f"{config.source.stem}{LEDGER_SUFFIX}"
