"""What a state file can be instead of a good one, for the bad-file tables of each state file (name ledger, pins):
each takes the path and leaves the bad thing there."""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path


def holding(content: bytes) -> Callable[[Path], None]:
    return lambda path: path.write_bytes(content)


def fifo(path: Path) -> None:
    path.unlink(missing_ok=True)
    os.mkfifo(path)


def device(path: Path) -> None:
    path.unlink(missing_ok=True)
    path.symlink_to("/dev/zero")


def directory(path: Path) -> None:
    path.unlink(missing_ok=True)
    path.mkdir()  # read as root too: permissions would not stop this test's reader
    (path / "x").write_text("x")
