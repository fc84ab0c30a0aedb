"""Writing a state file whole: the name ledger's and the pin state's one way of replacing a file."""

from __future__ import annotations

import contextlib
import os
from pathlib import Path


def write_atomically(path: Path, content: bytes) -> None:
    """`content` at `path`, never torn: written and synced under a temporary name, then renamed over it. The
    temporary name is one per process, so replicas sharing a state directory never write each other's."""
    temporary = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    try:
        with temporary.open("wb") as stream:
            stream.write(content)
            stream.flush()
            os.fsync(stream.fileno())
        os.replace(temporary, path)
    except OSError:
        with contextlib.suppress(OSError):
            temporary.unlink(missing_ok=True)
        raise
