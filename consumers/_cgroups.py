"""A pids cgroup per sandboxed child: the one exact bound on the processes and threads of a whole sandbox
(RLIMIT_NPROC counts every process of the user, across the machine, and root's not at all).

Ownership: `open_child` makes one with `PidsGroup.make` before the spawn, the exec wrapper (`consumers._child_exec`)
moves the child into it before it execs bwrap (so every process of the sandbox is in it from the start), and
`open_child` removes it once the child's process group is stopped, in the upstream's owner task; the next one
made removes those a run killed -9 left (empty: their processes died with it).
"""

from __future__ import annotations

import contextlib
import logging
import os
import uuid
from pathlib import Path

logger = logging.getLogger("triad.upstream")

V1_PIDS = Path("/sys/fs/cgroup/pids")
V2_ROOT = Path("/sys/fs/cgroup")


def pids_root() -> Path | None:
    """Where this process may make pids cgroups: cgroup v1's pids hierarchy, or its own cgroup v2 directory with the
    pids controller enabled for children; None if neither is writable here."""
    if (V1_PIDS / "cgroup.procs").is_file() and os.access(V1_PIDS, os.W_OK):
        return V1_PIDS
    try:
        own = next(line[3:] for line in Path("/proc/self/cgroup").read_text().splitlines() if line.startswith("0::"))
        here = V2_ROOT / own.lstrip("/")
        enabled = (here / "cgroup.subtree_control").read_text().split()
    except (OSError, StopIteration):
        return None
    return here if "pids" in enabled and os.access(here, os.W_OK) else None


def _remove_left_over(root: Path) -> None:
    """The groups of Triad runs that died (killed -9): their processes died with them (PR_SET_PDEATHSIG), the
    empty directories stay until removed."""
    for left in root.glob("triad-*-*"):
        run = left.name.split("-")[1]
        if run.isdigit() and int(run) != os.getpid() and not Path(f"/proc/{run}").exists():
            with contextlib.suppress(OSError):  # not empty (still in use), or not ours to remove
                left.rmdir()


class PidsGroup:
    def __init__(self, path: Path) -> None:
        self.path = path

    @classmethod
    def make(cls, most: int) -> PidsGroup:
        """A new group holding at most `most` tasks; OSError if none can be made."""
        root = pids_root()
        if root is None:
            raise OSError("no writable pids cgroup")
        _remove_left_over(root)
        path = root / f"triad-{os.getpid()}-{uuid.uuid4().hex[:12]}"
        path.mkdir()
        try:
            (path / "pids.max").write_text(str(most))
        except OSError:
            path.rmdir()
            raise
        return cls(path)

    @property
    def procs(self) -> str:
        """The file a process writes its pid to, to join the group."""
        return str(self.path / "cgroup.procs")

    def remove(self) -> None:
        """Once its processes are gone (a group with members cannot be removed: logged, left to the OS)."""
        try:
            self.path.rmdir()
        except OSError as exc:
            logger.warning("cannot remove the sandbox's pids cgroup %s: %s", self.path, exc.strerror)
