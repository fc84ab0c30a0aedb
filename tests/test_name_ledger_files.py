"""A name ledger that cannot be read is never silently replaced (issue 29, point 2).

Before, a corrupt ledger made the names start afresh (a tool denied by its exposed name became callable) and the
file was overwritten with a WARNING. Now: the last good copy (`.bak`) is restored, with the bad file kept aside;
without a readable copy the daemon refuses to start, and the bad file stays. A table over every kind of bad file.
"""

from __future__ import annotations

import json
import subprocess
from collections.abc import Callable
from pathlib import Path

import pytest

from gateway.state import NameLedger, NameLedgerUnreadable
from gateway.state import _name_ledger as name_ledger
from tests.bad_files import device, directory, fifo, holding
from tests.conftest import TRIAD, write_config
from tests.test_stable_names import config

GOOD = {("fs", "a.b"): "fs__a-b-2", ("fs", "a:b"): "fs__a-b"}
GOOD_FILE = json.dumps({"version": 1, "tools": {"fs": {"a.b": "fs__a-b-2", "a:b": "fs__a-b"}}}).encode()


BAD: dict[str, Callable[[Path], None]] = {
    "corrupt JSON": holding(b'{"version": 1, "tools": {"fs": {"a.b": "fs__a-b-2",, }}}'),
    "truncated": holding(GOOD_FILE[: len(GOOD_FILE) // 2]),
    "empty": holding(b""),
    "binary garbage": holding(bytes(range(256)) * 8),
    "UTF-16": holding(GOOD_FILE.decode().encode("utf-16")),
    "a list": holding(b"[]"),
    "tools as a list": holding(b'{"version": 1, "tools": {"fs": ["a.b"]}}'),
    "a name that is not text": holding(b'{"version": 1, "tools": {"fs": {"a.b": 7}}}'),
    "another version": holding(b'{"version": 2, "tools": {}}'),
    "an unknown section": holding(b'{"version": 1, "tool": {}}'),
    "too large": holding(b'{"version": 1, "tools": {}}' + b" " * 2048),
    "nested past the recursion limit": holding(b"[" * 1020),
    "unreadable (a directory)": directory,
    "a FIFO (a read would block)": fifo,
    "a device that never ends": device,
}


@pytest.fixture(autouse=True)
def _small_limit(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(name_ledger, "MAX_FILE_BYTES", 1024)


def _snapshot(directory: Path) -> dict[str, bytes | None]:
    return {p.name: p.read_bytes() if p.is_file() else None for p in sorted(directory.iterdir())}


@pytest.mark.parametrize("kind", BAD)
def test_a_bad_ledger_without_a_good_copy_stops_the_start_and_stays(kind: str, tmp_path: Path) -> None:
    path = tmp_path / "triad.names.json"
    BAD[kind](path)
    before = _snapshot(tmp_path)
    with pytest.raises(NameLedgerUnreadable, match=r"To recover: put a good copy at .* or move .* aside"):
        NameLedger(path, persist=True)
    assert _snapshot(tmp_path) == before


@pytest.mark.parametrize("kind", BAD)
def test_a_bad_ledger_whose_copy_is_bad_too_stops_the_start(kind: str, tmp_path: Path) -> None:
    path = tmp_path / "triad.names.json"
    BAD[kind](path)
    (tmp_path / "triad.names.json.bak").write_bytes(b"{")
    with pytest.raises(NameLedgerUnreadable, match=r"triad\.names\.json\.bak it cannot be read"):
        NameLedger(path, persist=True)


@pytest.mark.parametrize("kind", BAD)
def test_a_bad_ledger_is_set_aside_and_restored_from_its_last_good_copy(
        kind: str, tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    path = tmp_path / "triad.names.json"
    BAD[kind](path)
    bad = _snapshot(tmp_path)["triad.names.json"]
    (tmp_path / "triad.names.json.bak").write_bytes(GOOD_FILE)
    ledger = NameLedger(path, persist=True)
    assert dict(ledger.pinned("tools")) == GOOD
    [aside] = [p for p in tmp_path.iterdir() if p.name.startswith("triad.names.json.corrupt-")]
    assert (aside.read_bytes() if aside.is_file() else None) == bad
    assert path.read_bytes() == GOOD_FILE
    assert [r.levelname for r in caplog.records] == ["ERROR"]
    assert aside.name in caplog.text and "restored" in caplog.text


@pytest.mark.parametrize("kind", BAD)
def test_a_reader_takes_the_last_good_copy_and_writes_nothing(kind: str, tmp_path: Path) -> None:
    path = tmp_path / "triad.names.json"
    BAD[kind](path)
    (tmp_path / "triad.names.json.bak").write_bytes(GOOD_FILE)
    before = _snapshot(tmp_path)
    assert dict(NameLedger(path).pinned("tools")) == GOOD
    assert _snapshot(tmp_path) == before


def test_each_write_keeps_the_previous_good_version(tmp_path: Path) -> None:
    path = tmp_path / "triad.names.json"
    ledger = NameLedger(path, persist=True)
    ledger.record("tools", {("fs", "a:b"): "fs__a-b"})
    first = path.read_bytes()
    ledger.record("tools", {("fs", "a.b"): "fs__a-b-2"})
    assert (tmp_path / "triad.names.json.bak").read_bytes() == first
    assert dict(NameLedger(path).pinned("tools")) == {("fs", "a:b"): "fs__a-b", ("fs", "a.b"): "fs__a-b-2"}
    assert sorted(p.name for p in tmp_path.iterdir()) == ["triad.names.json", "triad.names.json.bak"]


def test_serve_refuses_to_start_on_a_bad_ledger_and_says_how_to_recover(tmp_path: Path) -> None:
    path = write_config(tmp_path, config("delete_file", "read"))
    ledger = tmp_path / "triad.names.json"
    ledger.write_bytes(b'{"version": 1, "tools": {"fsA": {"delete_file": "fsA__del')
    done = subprocess.run([*TRIAD, "serve", "-c", str(path), "--port", "0"], capture_output=True, text=True,
                          timeout=120)
    assert done.returncode == 1
    assert "ERROR" in done.stderr and "To recover" in done.stderr and "Traceback" not in done.stderr
    assert ledger.read_bytes() == b'{"version": 1, "tools": {"fsA": {"delete_file": "fsA__del'
    assert sorted(p.name for p in tmp_path.iterdir()) == ["triad.names.json", "triad.yaml"]
