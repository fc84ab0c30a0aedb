"""The audit hook on a full file system (a real 64 KiB tmpfs): never a torn line; `fail: closed` refuses calls whose
record cannot be written, `fail: open` lets them through and says so in the log."""

from __future__ import annotations

import json
import os
import subprocess
from collections.abc import Iterator
from pathlib import Path

import anyio
import pytest

from tests.conftest import Proc, start_triad, stdio_upstream, write_config
from tests.test_gateway_e2e import call, http_session

pytestmark = pytest.mark.anyio

MAX_CALLS = 60
"""Calls until the disk is full: each record is about 300 bytes, and the tmpfs has 64 KiB, filled beforehand."""
REFUSED = "Refused: the gateway cannot write its audit record"


@pytest.fixture
def small_disk(tmp_path: Path) -> Iterator[Path]:
    mount = tmp_path / "disk"
    mount.mkdir()
    done = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=64k", "tmpfs", str(mount)], capture_output=True,
                          text=True)
    if done.returncode != 0:
        pytest.fail(f"this test needs to mount a small tmpfs (root, or CAP_SYS_ADMIN): {done.stderr.strip()}")
    try:
        yield mount
    finally:
        subprocess.run(["umount", "-l", str(mount)], check=True)


def fill(directory: Path) -> Path:
    """Fill the file system of `directory` to the last byte."""
    filler = directory / "filler"
    with filler.open("wb", buffering=0) as stream:
        for size in (4096, 1):
            try:
                while True:
                    stream.write(b"x" * size)
            except OSError:
                pass
    return filler


def whole_lines(path: Path) -> list[dict[str, object]]:
    data = path.read_bytes()
    assert data.endswith(b"\n"), "the audit file ends in a torn line"
    return [json.loads(line) for line in data.splitlines()]


@pytest.mark.parametrize("mode", ["closed", "open"])
async def test_a_full_disk_never_tears_a_line_and_closed_refuses_unaudited_calls(mode: str, small_disk: Path,
                                                                                procs: list[Proc],
                                                                                tmp_path: Path) -> None:
    audit = small_disk / "audit.jsonl"
    config = write_config(tmp_path, {"upstreams": {"fx": stdio_upstream(f"audit-{mode}")},
                                     "hooks": [{"audit": {"path": str(audit), "fail": mode}}]})
    url = start_triad(procs, config, wait_ready=1)
    triad = procs[-1]
    async with http_session(url) as via:
        assert (await call(via, "echo", {"text": "recorded"}))["content"][0]["text"] == "recorded"
        filler = fill(small_disk)
        answers = [await call(via, "echo", {"text": f"call {i}"}) for i in range(MAX_CALLS)]
        texts = [answer["content"][0]["text"] for answer in answers]
        await triad.until(r"audit: cannot write to .*audit\.jsonl")
        records = whole_lines(audit)
        if mode == "closed":
            first_refused = next(i for i, text in enumerate(texts) if text.startswith(REFUSED))
            assert all(text.startswith(REFUSED) for text in texts[first_refused:]), texts
            assert all(answer.get("isError") for answer in answers[first_refused:])
            # every result handed out was recorded first
            assert [r["outcome"] for r in records].count("ok") == 1 + first_refused
        else:
            assert texts == [f"call {i}" for i in range(MAX_CALLS)]
            assert "calls go on unaudited (fail: open)" in triad.stderr
        filler.unlink()
        # closed: the first call after room is back is refused but recorded (the probe); then calls go on
        for _attempt in range(2):
            last = await call(via, "echo", {"text": "room again"})
        assert last["content"][0]["text"] == "room again"
        await triad.until(r"audit: writing to .* works again")
        assert whole_lines(audit)[-1]["outcome"] == "ok"


@pytest.mark.parametrize("mode", ["closed", "open"])
async def test_an_audit_path_that_is_a_fifo_never_blocks_the_daemon(mode: str, procs: list[Proc],
                                                                     tmp_path: Path) -> None:
    """Found by an outside attack: a FIFO with no reader at the audit path blocked the first call's open, and the
    event loop with it (SIGTERM did not stop it). It is a file that cannot be written: closed refuses, open goes on."""
    audit = tmp_path / "audit.jsonl"
    os.mkfifo(audit)
    config = write_config(tmp_path, {"upstreams": {"fx": stdio_upstream(f"audit-fifo-{mode}")},
                                     "hooks": [{"audit": {"path": str(audit), "fail": mode}}]})
    url = start_triad(procs, config, wait_ready=1)
    triad = procs[-1]
    async with http_session(url) as via:
        with anyio.fail_after(30):
            texts = [(await call(via, "echo", {"text": f"call {i}"}))["content"][0]["text"] for i in range(3)]
    await triad.until(r"audit: cannot write to .*audit\.jsonl")
    if mode == "closed":
        assert all(text.startswith(REFUSED) for text in texts[1:]), texts
    else:
        assert texts == [f"call {i}" for i in range(3)]
    assert triad.terminate() == 0
