"""Stopping Triad: calls in flight are drained, then answered with JSON-RPC errors; no descendant of a stdio
upstream (a child's own children included) outlives Triad, whether it got SIGTERM or its stdio client left."""

from __future__ import annotations

import shlex
import subprocess
import time
from pathlib import Path
from typing import Any

from tests.conftest import FIXTURE, PYTHON, RUN_MARKER, TRIAD, Proc, marker, start_triad, write_config


def upstream_with_a_grandchild(name: str, **settings: Any) -> dict[str, Any]:
    """A stdio upstream whose process starts a child of its own (as `npx` starts `node`): a shell forks the
    grandchild, then becomes the fixture server (exec), so the grandchild's parent is the upstream itself."""
    grandchild = shlex.join([PYTHON, "-c", "import time; time.sleep(600)", marker(f"{name}-grandchild")])
    server = shlex.join([PYTHON, str(FIXTURE), "--name", marker(name)])
    return {"command": "sh", "args": ["-c", f"{grandchild} >/dev/null & exec {server}"], **settings}


def wait_until_gone(mark: str, limit: float = 10) -> list[str]:
    """The processes carrying `mark` that are still alive after `limit` seconds (polling /proc for the state)."""
    from tests.conftest import surviving_processes

    deadline = time.monotonic() + limit
    while (left := surviving_processes(mark)) and time.monotonic() < deadline:
        time.sleep(0.1)
    return left


def test_sigterm_stops_every_descendant_of_stdio_upstreams(procs: list[Proc], tmp_path: Path) -> None:
    config = write_config(tmp_path, {"upstreams": {"a": upstream_with_a_grandchild("term-a"),
                                                   "b": upstream_with_a_grandchild("term-b")}})
    start_triad(procs, config, wait_ready=2)
    triad = procs[-1]
    mark = f"{RUN_MARKER}-term-"
    assert len([p for p in wait_until_gone(mark, 0) if "grandchild" in p]) == 2
    assert triad.terminate() == 0, triad.stderr
    assert wait_until_gone(mark) == []


def test_closing_triad_stdio_stops_every_descendant_of_stdio_upstreams(tmp_path: Path) -> None:
    config = write_config(tmp_path, {"upstreams": {"a": upstream_with_a_grandchild("close-a")}})
    triad = Proc([*TRIAD, "stdio", "-c", str(config), "--log-level", "INFO"], stdin=subprocess.PIPE)
    try:
        triad.wait_for(r"upstream a ready")
        mark = f"{RUN_MARKER}-close-"
        assert len(wait_until_gone(mark, 0)) == 2
        assert triad.popen.stdin is not None
        triad.popen.stdin.close()  # the client goes away
        assert triad.popen.wait(30) == 0, triad.stderr
        assert wait_until_gone(mark) == []
    finally:
        triad.terminate()
