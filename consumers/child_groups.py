"""The process groups of one Triad run's stdio children, recorded in a file so that the next start ends what a run
that died (SIGKILL, the OOM killer) left running: a child's own children, which no signal of the kernel reaches.

Each child leads a process group of its own (`consumers.child_process`) and dies with Triad (`PR_SET_PDEATHSIG`,
armed by `consumers._child_exec`); Triad is a child subreaper (`PR_SET_CHILD_SUBREAPER`), so while it lives what
its children leave behind stays its descendant, and it reaps those (`reap_group`). What outlives a Triad killed -9
is the rest of each group: `end_left_over` kills it at the next start, and only it. A group is ended only if the
run that recorded it is dead (pid and start time), its leader, if still there, is the process Triad started (start
time and command line), and each process is ours (same user, in the group and its session).

Ownership: the daemon creates one `ChildGroups` per run (`serve` and `stdio`, which have a state directory), calls
`end_left_over` before any upstream starts and hands it to the pool; `open_child` records each group it starts and
forgets it once stopped, in the owner task of its upstream. The file is this run's alone
(`<state_dir>/<config name>.children/<pid>.json`), so runs on one config never touch each other's records; it is
removed when its last group is forgotten.
"""

from __future__ import annotations

import contextlib
import ctypes
import json
import logging
import os
import signal
import sys
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

from consumers._files import read_regular
from consumers._json import loads

logger = logging.getLogger("triad.upstream")

PR_SET_CHILD_SUBREAPER = 36
PROC = Path("/proc")
MAX_RECORD_BYTES = 1 << 20
"""A record file larger than this is not one of ours (a run records a few hundred bytes per child)."""


@dataclass(frozen=True, slots=True)
class _Process:
    pid: int
    ppid: int
    pgid: int
    sid: int
    start: int
    """Clock ticks after boot at which it started (`/proc/<pid>/stat` field 22): with the pid, it names one process."""
    uid: int
    zombie: bool


def _process(pid: int) -> _Process | None:
    """What `/proc` says of `pid` (None: gone, or not readable)."""
    try:
        stat = (PROC / str(pid) / "stat").read_bytes()
        uid = (PROC / str(pid)).stat().st_uid
    except OSError:
        return None
    fields = stat[stat.rfind(b")") + 2:].split()  # the command name may hold spaces and parentheses
    try:
        return _Process(pid, int(fields[1]), int(fields[2]), int(fields[3]), int(fields[19]), uid, fields[0] == b"Z")
    except (IndexError, ValueError):
        return None


def _processes() -> Iterator[_Process]:
    for entry in PROC.iterdir():
        if entry.name.isdigit() and (found := _process(int(entry.name))) is not None:
            yield found


def _cmdline(pid: int) -> list[str] | None:
    try:
        raw = (PROC / str(pid) / "cmdline").read_bytes()
    except OSError:
        return None
    return raw.decode(errors="surrogateescape").split("\0")[:-1]


def supported() -> bool:
    """Linux, with `/proc`: elsewhere a child is still ended with its group on close, but not after a SIGKILL."""
    return sys.platform == "linux" and PROC.is_dir()


def become_subreaper() -> None:
    """Orphans of Triad's children are re-parented to Triad rather than to init, while Triad lives."""
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) != 0:
        logger.warning("cannot become a child subreaper: %s", os.strerror(ctypes.get_errno()))


def reap_group(pgid: int, leader: int) -> None:
    """Reap the zombies of group `pgid` that are Triad's children as a subreaper (never `leader`, which the event
    loop waits for): a zombie would keep the group alive."""
    me = os.getpid()
    for found in _processes():
        if found.zombie and found.ppid == me and found.pgid == pgid and found.pid != leader:
            with contextlib.suppress(ChildProcessError):
                os.waitpid(found.pid, os.WNOHANG)


def _kill(found: _Process) -> bool:
    """SIGKILL to `found`, if it is still that process (a pidfd pins the pid between the check and the signal)."""
    try:
        fd = os.pidfd_open(found.pid)
    except OSError:
        return False
    try:
        now = _process(found.pid)
        if now is None or (now.start, now.pgid, now.uid) != (found.start, found.pgid, found.uid):
            return False
        signal.pidfd_send_signal(fd, signal.SIGKILL)
        return True
    except OSError:
        return False
    finally:
        os.close(fd)


class ChildGroups:
    def __init__(self, directory: Path) -> None:
        self._directory = directory
        self._path = directory / f"{os.getpid()}.json"
        me = _process(os.getpid())
        self._run = [os.getpid(), me.start if me is not None else 0]
        self._groups: dict[int, tuple[int, list[str]]] = {}
        """This run's live groups: pgid -> (the leader's start time, its command line)."""

    @classmethod
    def start(cls, directory: Path) -> ChildGroups | None:
        """This run's record in `directory`, once what dead runs left there is ended; Triad becomes a child
        subreaper. None where unsupported (not Linux)."""
        if not supported():
            return None
        become_subreaper()
        groups = cls(directory)
        groups.end_left_over()
        return groups

    def record(self, pgid: int, argv: Sequence[str]) -> None:
        """`pgid`'s leader was started (by this run) to run `argv`."""
        found = _process(pgid)
        if found is None:  # it is gone already: nothing of it to find at the next start
            return
        self._groups[pgid] = (found.start, list(argv))
        self._write()

    def forget(self, pgid: int) -> None:
        if self._groups.pop(pgid, None) is not None:
            self._write()

    def _write(self) -> None:
        """Atomically (a crash leaves the old record or the new one, never half of one); no groups: no file."""
        try:
            if not self._groups:
                self._path.unlink(missing_ok=True)
                return
            self._directory.mkdir(parents=True, exist_ok=True)
            body = {"run": self._run, "groups": {str(pgid): [start, argv]
                                                 for pgid, (start, argv) in self._groups.items()}}
            staged = self._path.with_suffix(".tmp")
            staged.write_text(json.dumps(body))
            os.replace(staged, self._path)
        except OSError as exc:  # the children run on; only their end after a crash of Triad's is at stake
            logger.warning("cannot record the process groups of stdio children in %s (%s): if Triad is killed, "
                           "their own children may outlive it", self._path, exc.strerror)

    def end_left_over(self) -> int:
        """Kill what the groups recorded by runs that died still hold; returns how many processes were killed."""
        killed = 0
        try:
            files = sorted(self._directory.glob("*.json"))
        except OSError:
            return 0
        table: list[_Process] | None = None
        for path in files:  # this run's own path too: a file there is a dead run's that had this pid
            record = _read_record(path)
            if record is None:
                logger.warning("%s is not a record of Triad's process groups; removing it", path)
            else:
                (pid, start), groups = record
                run = _process(pid)
                if run is not None and run.start == start:
                    continue  # a live run (another Triad on this config): its groups are its own
                table = table if table is not None else list(_processes())
                for pgid, (leader_start, argv) in groups.items():
                    killed += _end_group(table, pgid, leader_start, argv, pid)
            with contextlib.suppress(OSError):
                path.unlink()
        return killed


def _read_record(path: Path) -> tuple[tuple[int, int], dict[int, tuple[int, list[str]]]] | None:
    """The (run, groups) of a record file, or None if it is not one (every field checked)."""
    try:
        if path.stat().st_size > MAX_RECORD_BYTES or path.stat().st_uid != os.getuid():
            return None
        body = loads(read_regular(path, MAX_RECORD_BYTES)[0].decode())
        run, groups = body["run"], body["groups"]
        if not (isinstance(run, list) and len(run) == 2 and all(type(v) is int for v in run)
                and isinstance(groups, dict)):
            return None
        out: dict[int, tuple[int, list[str]]] = {}
        for key, value in groups.items():
            start, argv = value
            if not (key.isdigit() and int(key) > 1 and type(start) is int and isinstance(argv, list) and argv
                    and all(isinstance(a, str) for a in argv)):
                return None
            out[int(key)] = (start, argv)
        return (run[0], run[1]), out
    except (OSError, ValueError, KeyError, TypeError):
        return None


def _end_group(table: list[_Process], pgid: int, start: int, argv: list[str], run: int) -> int:
    """Kill the members of group `pgid` if it is still the one run `run` started; returns how many."""
    leader = next((p for p in table if p.pid == pgid), None)
    if leader is not None and (leader.start != start or leader.pgid != pgid or _cmdline(pgid) != argv):
        return 0  # the pid now names another process (the leader itself died with Triad: PDEATHSIG)
    # While any process is in the group, the kernel gives its id to no new process: these are the group's own.
    members = [p for p in table if p.pgid == pgid and p.sid == pgid and p.uid == os.getuid() and not p.zombie]
    killed = sum(_kill(p) for p in members)
    if killed:
        logger.warning("killed %d process(es) of process group %d, left by Triad run %d that ended without "
                       "stopping its stdio children (%s)", killed, pgid, run, argv[0])
    return killed
