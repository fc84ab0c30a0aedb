"""Run as a script, `python -I -S _child_exec.py PARENT_PID COMMAND [ARG...]`, between Triad's fork and a stdio
child's command: arm `PR_SET_PDEATHSIG` (SIGKILL), so that the child dies with Triad even when Triad is killed -9,
then exec the command (same pid, process group, env and pipes).

Why a script and not `preexec_fn`: code between fork and exec in a process with threads (Triad's stderr readers)
may deadlock on a lock another thread held at the fork; a fresh interpreter holds none. If Triad died before the
signal was armed, the parent is no longer `PARENT_PID` and the child exits at once. Stdlib only, and no imports of
Triad's (it runs with `-I -S`)."""

import ctypes
import os
import signal
import sys

PR_SET_PDEATHSIG = 1
NOT_FOUND = 127
"""The shell's status for a command that could not be run."""


def main() -> None:
    parent, argv = int(sys.argv[1]), sys.argv[2:]
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.prctl(PR_SET_PDEATHSIG, int(signal.SIGKILL), 0, 0, 0) != 0:
        sys.exit(f"triad: cannot arm PR_SET_PDEATHSIG: {os.strerror(ctypes.get_errno())}")
    if os.getppid() != parent:  # Triad is gone already: the signal armed too late would never come
        os._exit(1)
    try:
        os.execvp(argv[0], argv)
    except OSError as exc:  # Triad looked the command up before the fork: this is a race, or a permission
        print(f"triad: cannot run {argv[0]}: {exc.strerror}", file=sys.stderr)
        os._exit(NOT_FOUND)


if __name__ == "__main__":
    main()
