"""A Triad killed -9 leaves no stdio child running: each child dies with it (`PR_SET_PDEATHSIG`), and what a
child left in its process group is killed at the next start, from the record of the dead run; a record is trusted
only for processes that are still the ones that run started (issue 29, point 13)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from consumers.child_groups import ChildGroups
from tests.conftest import PYTHON, Proc, marker, start_triad, stdio_upstream, surviving_processes, write_config
from tests.test_shutdown import upstream_with_a_grandchild, wait_until_gone

SHAPES = {
    "double-fork": lambda name: stdio_upstream(name, "--fork-grandchild"),  # re-parented, still in the group
    "own-child": upstream_with_a_grandchild,  # a shell's background child, as `npx` starts `node`
}


def is_left(line: str, mark: str) -> bool:
    """A child's own child (the fixture's double fork, or the shell's background child), not the child itself."""
    return f"{mark}-orphan" in line or f"{mark}-grandchild" in line


def left_behind(mark: str) -> list[str]:
    return [p for p in surviving_processes(mark) if is_left(p, mark)]


def leaders(mark: str) -> list[str]:
    return [p for p in surviving_processes(mark) if not is_left(p, mark)]


@pytest.mark.parametrize("shape", SHAPES)
def test_after_a_sigkill_no_child_survives_the_next_start(procs: list[Proc], tmp_path: Path, shape: str) -> None:
    mark = marker(f"killed-{shape}")
    config = write_config(tmp_path, {"upstreams": {"fx": SHAPES[shape](f"killed-{shape}")}})
    start_triad(procs, config, wait_ready=1)
    first = procs[-1]
    assert len(left_behind(mark)) == 1 and len(leaders(mark)) == 1
    orphans = {line.split(":")[0] for line in left_behind(mark)}
    first.popen.kill()  # SIGKILL: no cleanup of Triad's runs
    first.popen.wait(10)
    assert [p for p in wait_until_gone(mark) if p in leaders(mark)] == []  # the child died with Triad
    assert {line.split(":")[0] for line in left_behind(mark)} == orphans  # what no signal of the kernel reaches
    start_triad(procs, config, wait_ready=1)
    second = procs[-1]
    second.wait_for(r"killed 1 process\(es\) of process group \d+, left by Triad run \d+")
    assert not orphans & {line.split(":")[0] for line in wait_until_gone(mark, 0) if is_left(line, mark)}
    assert second.terminate() == 0, second.stderr
    assert wait_until_gone(mark) == []
    assert list((tmp_path / "triad.children").iterdir()) == []  # a clean stop leaves no record


def group_leader(name: str) -> subprocess.Popen[bytes]:
    return subprocess.Popen([PYTHON, "-c", "import time; time.sleep(600)", marker(name)], start_new_session=True)


def start_of(pid: int) -> int:
    stat = Path(f"/proc/{pid}/stat").read_bytes()
    return int(stat[stat.rfind(b")") + 2:].split()[19])


def dead_pid() -> int:
    """The pid of a process that has ended and been reaped."""
    done = subprocess.Popen(["true"])
    done.wait()
    return done.pid


CASES: dict[str, tuple[bool, Any]] = {
    # name: (killed?, how the record differs from the truth)
    "the run died and the group is its own": (True, None),
    "the run is alive (another Triad on this config)": (False, "live run"),
    "the leader's command line is another": (False, "argv"),
    "the leader started at another time (its pid was reused)": (False, "start"),
    "the record is not a record": (False, "garbage"),
}


@pytest.mark.parametrize("case", CASES)
def test_only_the_groups_of_a_run_that_died_are_ended_and_only_if_still_theirs(tmp_path: Path, case: str) -> None:
    if not sys.platform.startswith("linux"):
        pytest.fail("process groups are recorded on Linux only (this test needs /proc)")
    killed, differs = CASES[case]
    leader = group_leader(f"record-{len(case)}")
    try:
        argv = [PYTHON, "-c", "import time; time.sleep(600)", marker(f"record-{len(case)}")]
        start = start_of(leader.pid)
        run = [os.getpid(), start_of(os.getpid())] if differs == "live run" else [dead_pid(), 1]
        group = [start + 1 if differs == "start" else start, [*argv, "x"] if differs == "argv" else argv]
        record = {"run": run, "groups": {str(leader.pid): group}}
        body = "[not json" if differs == "garbage" else json.dumps(record)
        directory = tmp_path / "triad.children"
        directory.mkdir()
        (directory / "1234567.json").write_text(body)
        groups = ChildGroups(directory)
        assert groups.end_left_over() == (1 if killed else 0)
        if killed:
            assert leader.wait(10) == -9
        else:
            assert leader.poll() is None
        assert list(directory.iterdir()) == ([] if differs != "live run" else [directory / "1234567.json"])
    finally:
        leader.kill()
        leader.wait()
