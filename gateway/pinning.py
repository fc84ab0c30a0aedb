"""Pinned tool definitions: a JSON state file of approved definition hashes, keyed by `upstream:raw name`.

The hash covers what a model reads and what shapes a call: description, title, input and output schemas,
annotations. The store re-reads the file when it changes on disk, so `triad approve` takes effect without a
restart. Writes go to a temporary file renamed over the old one (no torn state file).
"""

from __future__ import annotations

import hashlib
import json
import os
import threading
from collections.abc import Mapping
from pathlib import Path
from typing import Any

HASHED_FIELDS = ("description", "title", "inputSchema", "outputSchema", "annotations")


def definition_hash(definition: Mapping[str, Any]) -> str:
    subset = {key: definition.get(key) for key in HASHED_FIELDS}
    return hashlib.sha256(json.dumps(subset, sort_keys=True, default=str).encode()).hexdigest()


class PinStore:
    def __init__(self, path: Path) -> None:
        self.path = path
        self._lock = threading.Lock()
        self._pins: dict[str, str] = {}
        self._mtime: float | None = None

    def _load(self) -> None:
        try:
            mtime = self.path.stat().st_mtime
        except FileNotFoundError:
            self._pins, self._mtime = {}, None
            return
        if mtime != self._mtime:
            self._pins = json.loads(self.path.read_text() or "{}").get("pins", {})
            self._mtime = mtime

    def _save(self) -> None:
        temporary = self.path.with_name(self.path.name + ".tmp")
        temporary.write_text(json.dumps({"pins": self._pins}, indent=2, sort_keys=True))
        os.replace(temporary, self.path)
        self._mtime = self.path.stat().st_mtime

    def check(self, upstream: str, raw: str, definition: Mapping[str, Any], trust_new: bool) -> str | None:
        """None when the definition is approved (or new and trusted on first use); else why it is blocked."""
        key, digest = f"{upstream}:{raw}", definition_hash(definition)
        with self._lock:
            self._load()
            pinned = self._pins.get(key)
            if pinned is None:
                if not trust_new:
                    return "its definition has not been approved yet"
                self._pins[key] = digest
                self._save()
                return None
            if pinned != digest:
                return f"its definition changed since it was approved (approved {pinned[:12]}, now {digest[:12]})"
            return None

    def approve(self, upstream: str, raw: str, definition: Mapping[str, Any]) -> bool:
        """Pin the current definition; True if that changed the state file."""
        key, digest = f"{upstream}:{raw}", definition_hash(definition)
        with self._lock:
            self._load()
            if self._pins.get(key) == digest:
                return False
            self._pins[key] = digest
            self._save()
            return True
