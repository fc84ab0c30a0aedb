"""Pinned tool definitions: a JSON state file of approved definition hashes, keyed by `upstream:raw name`.

The hash covers what a model reads and what shapes a call: description, title, input and output schemas,
annotations. The store re-reads the file when it changes on disk, so `triad approve` takes effect without a
restart. Writes go to a temporary file renamed over the old one (no torn state file). Beside each hash the file
keeps the hashed fields of the approved definition, so that an operator can see what changed (`pending`); a file
written before definitions were kept has hashes only.
"""

from __future__ import annotations

import difflib
import hashlib
import json
import os
import threading
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from consumers import JSON, JSONObject

HASHED_FIELDS = ("description", "title", "inputSchema", "outputSchema", "annotations")


def pinned_fields(definition: Mapping[str, JSON]) -> JSONObject:
    """What the hash covers (and the state file keeps) of a definition."""
    return {key: definition.get(key) for key in HASHED_FIELDS}


def definition_hash(definition: Mapping[str, JSON]) -> str:
    return hashlib.sha256(json.dumps(pinned_fields(definition), sort_keys=True, default=str).encode()).hexdigest()


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


class PinStore:
    def __init__(self, path: Path) -> None:
        self.path = path
        self._lock = threading.Lock()
        self._pins: dict[str, str] = {}
        self._definitions: dict[str, JSONObject] = {}
        self._mtime: float | None = None

    def _load(self) -> None:
        try:
            mtime = self.path.stat().st_mtime
        except FileNotFoundError:
            self._pins, self._definitions, self._mtime = {}, {}, None
            return
        if mtime != self._mtime:
            state = json.loads(self.path.read_text() or "{}")
            self._pins, self._definitions = state.get("pins", {}), state.get("definitions", {})
            self._mtime = mtime

    def _save(self) -> None:
        # one temporary name per process: replicas sharing a state directory never write each other's
        temporary = self.path.with_name(f"{self.path.name}.{os.getpid()}.tmp")
        temporary.write_text(json.dumps({"pins": self._pins, "definitions": self._definitions}, indent=2,
                                        sort_keys=True, default=str))
        os.replace(temporary, self.path)
        self._mtime = self.path.stat().st_mtime

    def check(self, upstream: str, raw: str, definition: Mapping[str, JSON], trust_new: bool) -> str | None:
        """None when the definition is approved (or new and trusted on first use); else why it is blocked."""
        key, digest = f"{upstream}:{raw}", definition_hash(definition)
        with self._lock:
            self._load()
            pinned = self._pins.get(key)
            if pinned is None:
                if not trust_new:
                    return "its definition has not been approved yet"
                self._pin(key, digest, definition)
                return None
            if pinned != digest:
                return f"its definition changed since it was approved (approved {pinned[:12]}, now {digest[:12]})"
            return None

    def approve(self, upstream: str, raw: str, definition: Mapping[str, JSON]) -> bool:
        """Pin the current definition; True if that changed the state file."""
        key, digest = f"{upstream}:{raw}", definition_hash(definition)
        with self._lock:
            self._load()
            if self._pins.get(key) == digest:
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
        return PinStatus("approved" if pinned == definition_hash(definition) else "changed", approved, current)

    def pinned(self, upstream: str, raw: str) -> tuple[str, JSONObject | None] | None:
        """The approved digest of `upstream:raw` and its kept fields; None when none is."""
        key = f"{upstream}:{raw}"
        with self._lock:
            self._load()
            digest = self._pins.get(key)
            return (digest, self._definitions.get(key)) if digest is not None else None

    def remember(self, upstream: str, raw: str, digest: str, fields: JSONObject | None) -> bool:
        """Keep an approval made elsewhere (the cluster's); True if that changed the state file."""
        key = f"{upstream}:{raw}"
        with self._lock:
            self._load()
            if self._pins.get(key) == digest:
                return False
            self._pins[key] = digest
            if fields is not None:
                self._definitions[key] = fields
            else:
                self._definitions.pop(key, None)
            self._save()
            return True

    def _pin(self, key: str, digest: str, definition: Mapping[str, JSON]) -> None:
        self._pins[key] = digest
        self._definitions[key] = pinned_fields(definition)
        self._save()
