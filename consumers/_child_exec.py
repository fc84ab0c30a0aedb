"""Run as a script, `python -I -S _child_exec.py PARENT_PID LIMITS COMMAND [ARG...]`, between Triad's fork and a
stdio child's command: arm `PR_SET_PDEATHSIG` (SIGKILL), so that the child dies with Triad even when Triad is
killed -9, apply a sandbox's limits, then exec the command (same pid, process group, env and pipes).

LIMITS is `-` (none) or comma-separated `as=BYTES`, `cpu=SECONDS` (set as hard and soft rlimits, inherited by
every process of the sandbox) and `cgroup=PATH` (a `cgroup.procs` file this process joins first, so that bwrap
and all it starts count against that group's `pids.max`).

Why a script and not `preexec_fn`: code between fork and exec in a process with threads (Triad's stderr readers)
may deadlock on a lock another thread held at the fork; a fresh interpreter holds none. If Triad died before the
signal was armed, the parent is no longer `PARENT_PID` and the child exits at once. Stdlib only, and no imports of
Triad's (it runs with `-I -S`)."""

import ctypes
import os
import resource
import signal
import sys

PR_SET_PDEATHSIG = 1
NOT_FOUND = 127
"""The shell's status for a command that could not be run."""
LIMIT_FAILED = 126
RLIMITS = {"as": resource.RLIMIT_AS, "cpu": resource.RLIMIT_CPU}


def apply_limits(spec: str) -> None:
    for item in spec.split(",") if spec != "-" else ():
        key, _, value = item.partition("=")
        if key == "cgroup":
            with open(value, "w") as procs:
                procs.write(str(os.getpid()))
        else:
            resource.setrlimit(RLIMITS[key], (int(value), int(value)))


def main() -> None:
    parent, limits, argv = int(sys.argv[1]), sys.argv[2], sys.argv[3:]
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.prctl(PR_SET_PDEATHSIG, int(signal.SIGKILL), 0, 0, 0) != 0:
        sys.exit(f"triad: cannot arm PR_SET_PDEATHSIG: {os.strerror(ctypes.get_errno())}")
    if os.getppid() != parent:  # Triad is gone already: the signal armed too late would never come
        os._exit(1)
    try:
        apply_limits(limits)
    except (OSError, ValueError, KeyError) as exc:  # fail closed: a sandbox without its limits is not started
        print(f"triad: cannot apply the sandbox's limits ({limits}): {exc}", file=sys.stderr)
        os._exit(LIMIT_FAILED)
    try:
        os.execvp(argv[0], argv)
    except OSError as exc:  # Triad looked the command up before the fork: this is a race, or a permission
        print(f"triad: cannot run {argv[0]}: {exc.strerror}", file=sys.stderr)
        os._exit(NOT_FOUND)


if __name__ == "__main__":
    main()
