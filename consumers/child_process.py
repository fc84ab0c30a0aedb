"""A stdio upstream's child process: spawned as the leader of a session of its own (so of its own process group),
spoken to over its stdin and stdout, and on close stopped together with every process in its group.

Why not the SDK's `stdio_client`: it kills the process group only when the child outlives the grace period after
its stdin closes. A server started through `npx`, `uvx` or a shell has children of its own; the leader exits at
once when its stdin closes and leaves them running (issue 17, point 15). Here the group is always ended: close
stdin (the MCP spec's first step), wait for the leader, then SIGTERM to the whole group, then SIGKILL to what is
left. Every wait is bounded, and the caller's cancellation cannot interrupt the stop (it runs shielded).

On Linux the child dies with Triad, even when Triad is killed -9 (`PR_SET_PDEATHSIG`, armed by the tiny exec
wrapper `consumers._child_exec`), and its group is recorded (`consumers.child_groups`) so that the next start ends
what the rest of a group left running.

With `sandbox:` the command runs in bubblewrap (`consumers._bwrap`): the exec wrapper applies its limits (and
joins its pids cgroup, made here and removed once the group is stopped) and execs bwrap, which stays in the
child's process group, so the same stop ends the whole sandbox. A sandbox that cannot be set up raises
`UpstreamUnavailable` with the reason before anything is spawned: never a bare start.

Ownership: the upstream's owner task enters and exits `open_child`; two pump tasks inside it move lines between
the pipes and the session's memory streams, and a thread reads the child's stderr into Triad's log (INFO) and into
the upstream's `ChildOutput`, which keeps the last lines and the exit code with the upstream's state, so that
"why is it down?" is answered by `/readyz`, `triad plan` and the WARNING line, not only by an INFO log.
"""

from __future__ import annotations

import logging
import os
import shutil
import signal
import subprocess
import sys
import threading
from collections import deque
from collections.abc import AsyncIterator, Callable, Iterable, Mapping, Sequence
from contextlib import asynccontextmanager, suppress

import anyio
from anyio.abc import Process
from anyio.streams.memory import MemoryObjectReceiveStream, MemoryObjectSendStream
from mcp.client.stdio import get_default_environment
from mcp.shared.message import SessionMessage

from consumers import _child_exec, child_groups
from consumers._bwrap import bwrap_argv, sandbox_env
from consumers._cgroups import PidsGroup
from consumers._json import parse_message
from consumers.child_groups import ChildGroups
from consumers.errors import UpstreamUnavailable
from consumers.masking import SecretMask
from consumers.sandbox import SandboxConfig
from consumers.sandbox import problems as sandbox_problems

logger = logging.getLogger("triad.upstream")

STDIN_CLOSE_GRACE = 2.0
"""How long a child may take to exit once its stdin is closed (the SDK's figure), before its group gets SIGTERM."""
TERM_GRACE = 2.0
"""How long the group may take to exit after SIGTERM, before SIGKILL."""
REAP_LIMIT = 2.0
"""How long the event loop may take to see the leader's death after SIGKILL; only an unkillable process waits it."""
POLL_INTERVAL = 0.02
"""How often the state of an exiting process or group is looked at (there is no event for a group's end)."""
STDERR_DRAIN_LIMIT = 1.0
"""After the group is stopped, how long its stderr may take to reach its end (so the last lines are kept); only a
process that escaped the group and holds the pipe makes this wait in full."""
STDERR_TAIL = 20
"""Lines of the latest child's stderr kept with its upstream's state (`triad plan` shows them all)."""
REASON_LINES = 3
"""Of those, how many the one-line reason carries (`/readyz`, the WARNING line, `triad plan`'s upstream row)."""
MAX_LINE = 300
"""Characters kept of one stderr line: a child may print a whole JSON document on one line."""

CHILD_EXEC = _child_exec.__file__
"""Run by path with `-I -S`: it imports nothing of Triad's, and the interpreter starts in a few milliseconds."""

ReadStream = MemoryObjectReceiveStream[SessionMessage | Exception]
WriteStream = MemoryObjectSendStream[SessionMessage]


class ChildOutput:
    """What is known of the latest child process of one stdio upstream: the last lines of its stderr, and how it
    ended. Every configured secret is masked in the lines (`consumers.masking`; a child may print its own token,
    from its env or its args), and the values of its `env` at the least.

    Ownership: the `Upstream` creates one and keeps it across restarts; `open_child` resets it at each spawn,
    its stderr thread appends lines (hence the lock), and its cleanup records the end; the owner task reads it
    once the transport is closed, to say why the upstream is down."""

    def __init__(self, name: str, mask: SecretMask | None = None, groups: ChildGroups | None = None) -> None:
        self.name = name
        self.groups = groups
        """Where this run records its children's process groups (the daemon's; None for `plan` and tests)."""
        self._lines: deque[str] = deque(maxlen=STDERR_TAIL)
        self._lock = threading.Lock()
        self.mask = mask or SecretMask()
        """The config's secrets (the upstream sets it anew on a reload); `spawned` adds the child's env values."""
        self._mask = self.mask
        self.returncode: int | None = None
        """The leader's exit status once it ended (negative: the signal that ended it), else None."""
        self.stopped = False
        """Triad had to signal the leader to end it (it did not exit by itself once its stdin was closed)."""
        self.ended_exit = ""
        self.ended_lines: list[str] = []
        """`exit` and `lines` of the latest child that ended: what explains an upstream that is down, kept while
        the next child starts (which clears the live record)."""

    def spawned(self, secrets: Iterable[str]) -> None:
        with self._lock:
            self._lines.clear()
            self._mask = self.mask.with_values(secrets)
        self.returncode, self.stopped = None, False

    def add(self, line: str) -> str:
        """Keep one line of stderr; returns it as kept (secrets masked) for the log."""
        line = self._mask(line.rstrip())
        if line.strip():
            with self._lock:
                self._lines.append(line[:MAX_LINE] + ("..." if len(line) > MAX_LINE else ""))
        return line

    @property
    def lines(self) -> list[str]:
        with self._lock:
            return list(self._lines)

    def ended(self, returncode: int | None, stopped: bool) -> None:
        self.returncode, self.stopped = returncode, stopped
        self.ended_exit, self.ended_lines = self.exit, self.lines

    @property
    def exit(self) -> str:
        """How the latest child ended, in words ("" while it runs, or when Triad ended it)."""
        code = self.returncode
        if code is None or self.stopped:
            return ""
        if code < 0:
            try:
                return f"killed by {signal.Signals(-code).name}"
            except ValueError:
                return f"killed by signal {-code}"
        return f"exit code {code}"

    def explain(self, reason: str) -> str:
        """`reason` with the exit status and the last stderr lines, on one line (for `/readyz` and the log)."""
        notes = [self.exit] if self.exit else []
        if lines := self.lines[-REASON_LINES:]:
            notes.append("stderr: " + " | ".join(lines))
        return f"{reason} ({'; '.join(notes)})" if notes else reason


@asynccontextmanager
async def open_child(command: str, args: Sequence[str], env: Mapping[str, str] | None, cwd: str | None,
                     output: ChildOutput, sandbox: SandboxConfig | None = None
                     ) -> AsyncIterator[tuple[ReadStream, WriteStream]]:
    """Spawn the child (in bubblewrap, with `sandbox`) and yield the session's (read, write) streams; on exit,
    stop its whole process group and record how it ended in `output` (with the last lines of its stderr)."""
    output.spawned((env or {}).values())
    full_env = {**get_default_environment(), **(env or {})} if sandbox is None else sandbox_env(sandbox, env or {})
    if (missing := _missing(command, cwd if sandbox is None else None, full_env)) is not None:
        raise UpstreamUnavailable(output.name, missing)  # the wrapper's exec would fail in the child
    wrapped = child_groups.supported()
    pids, limits = _sandbox_limits(output.name, sandbox, wrapped)
    argv = [command, *args] if sandbox is None else bwrap_argv(sandbox, command, args, cwd, full_env["PATH"])
    read_fd, write_fd = os.pipe()
    try:
        process = await anyio.open_process(
            [sys.executable, "-I", "-S", CHILD_EXEC, str(os.getpid()), limits, *argv] if wrapped else argv,
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=write_fd, env=full_env,
            cwd=cwd if sandbox is None else None, start_new_session=True)
    except BaseException as exc:
        os.close(read_fd)
        if pids is not None:
            pids.remove()
        if isinstance(exc, FileNotFoundError):
            raise UpstreamUnavailable(output.name, _missing(command, cwd, full_env)
                                      or f"command not found: {command}") from None
        raise
    finally:
        os.close(write_fd)  # the child holds its own copy; EOF arrives when it and its children have exited
    if output.groups is not None:
        output.groups.record(process.pid, argv)
    reader = threading.Thread(target=_read_stderr, args=(output, read_fd), name=f"stderr:{output.name}",
                              daemon=True)
    reader.start()
    # No await until the task group is entered and its `finally` can stop the child.
    to_session, read = anyio.create_memory_object_stream[SessionMessage | Exception](0)
    write, from_session = anyio.create_memory_object_stream[SessionMessage](0)
    async with anyio.create_task_group() as tg:
        tg.start_soon(_pump_out, process, to_session)
        tg.start_soon(_pump_in, process, from_session, to_session)
        try:
            yield read, write
        finally:
            with anyio.CancelScope(shield=True):
                read.close()  # the stdout pump drains from here on, so a child blocked writing can exit
                write.close()
                stopped = await stop_group(process)
                if output.groups is not None:
                    output.groups.forget(process.pid)
                await _until(lambda: not reader.is_alive(), STDERR_DRAIN_LIMIT)
                if pids is not None:
                    pids.remove()
                output.ended(process.returncode, stopped)
            tg.cancel_scope.cancel()


def _sandbox_limits(name: str, sandbox: SandboxConfig | None, wrapped: bool) -> tuple[PidsGroup | None, str]:
    """The pids cgroup (made here) and the exec wrapper's LIMITS argument of a sandbox; a sandbox that cannot be
    set up is an `UpstreamUnavailable` with the reason, never a bare start."""
    if sandbox is None:
        return None, "-"
    if not wrapped:
        raise UpstreamUnavailable(name, f"upstream {name!r}: sandbox: needs Linux (bubblewrap and /proc)")
    if found := sandbox_problems(sandbox):
        key, problem = found[0]
        raise UpstreamUnavailable(name, f"upstream {name!r}: sandbox{'.' + key if key else ''}: {problem}")
    limits = [f"as={sandbox.memory}"] if sandbox.memory is not None else []
    limits += [f"cpu={sandbox.cpu}"] if sandbox.cpu is not None else []
    pids = None
    if sandbox.pids is not None:
        try:
            pids = PidsGroup.make(sandbox.pids)
        except OSError as exc:
            raise UpstreamUnavailable(name, f"upstream {name!r}: sandbox.pids: cannot make a pids cgroup: "
                                      f"{exc.strerror or exc}") from None
        limits.append(f"cgroup={pids.procs}")
    return pids, ",".join(limits) or "-"


def _missing(command: str, cwd: str | None, env: Mapping[str, str]) -> str | None:
    """Why the child cannot be started, looked up as `execvp` will (a path relative to `cwd`, a bare command on the
    child's PATH): the working directory or the command is missing, and for a bare command the PATH it was looked
    for on (a client such as Claude Desktop starts Triad with a short PATH). None: it can be tried."""
    if cwd is not None and not os.path.isdir(cwd):
        return f"working directory not found: {cwd}"
    if os.sep in command:
        return None if os.path.exists(os.path.join(cwd or "", command)) else f"command not found: {command}"
    path = env.get("PATH", os.defpath)
    if shutil.which(command, path=path) is None:
        return f"command not found: {command} (not on the PATH {path}; give its full path)"
    return None


def _read_stderr(output: ChildOutput, fd: int) -> None:
    """Runs in a thread per child (blocking reads); ends at EOF, when the child and its children have exited."""
    with os.fdopen(fd, "r", errors="replace") as stream:
        for line in stream:
            logger.info("[%s] %s", output.name, output.add(line))


async def _pump_out(process: Process, to_session: MemoryObjectSendStream[SessionMessage | Exception]) -> None:
    """The child's stdout, one JSON-RPC message per line, to the session; after the session is gone, drained."""
    assert process.stdout is not None
    buffer = b""
    delivering = True
    async with to_session:
        with suppress(anyio.EndOfStream, anyio.ClosedResourceError, anyio.BrokenResourceError, OSError):
            async for chunk in process.stdout:
                if not delivering:
                    continue
                *lines, buffer = (buffer + chunk).split(b"\n")
                for line in lines:
                    if not line.strip():
                        continue
                    try:
                        await to_session.send(_parse(line))
                    except (anyio.ClosedResourceError, anyio.BrokenResourceError):
                        delivering = False
                        break


def _parse(line: bytes) -> SessionMessage | Exception:
    try:
        return SessionMessage(parse_message(line))
    except ValueError as exc:  # the session reports it and goes on; the line is not logged (it may hold secrets)
        return exc


async def _pump_in(process: Process, from_session: MemoryObjectReceiveStream[SessionMessage],
                   to_session: MemoryObjectSendStream[SessionMessage | Exception]) -> None:
    """The session's messages to the child's stdin; when the pipe breaks, the session sees its read stream end."""
    assert process.stdin is not None
    async with from_session:
        try:
            async for message in from_session:
                line = message.message.model_dump_json(by_alias=True, exclude_unset=True) + "\n"
                await process.stdin.send(line.encode())
        except (anyio.ClosedResourceError, anyio.BrokenResourceError, OSError):
            await to_session.aclose()


async def stop_group(process: Process) -> bool:
    """Close stdin and wait for the leader; then SIGTERM, and if need be SIGKILL, to the whole process group,
    whether or not the leader is still there (its children may be). Bounded; call it shielded. Returns whether
    the leader had to be signalled (it did not exit by itself)."""
    assert process.stdin is not None
    with suppress(anyio.ClosedResourceError, anyio.BrokenResourceError, OSError):
        await process.stdin.aclose()
    stopped = not await _until(lambda: process.returncode is not None, STDIN_CLOSE_GRACE)
    pgid = process.pid  # the leader's pid is the group's id (start_new_session); it stays so after the leader died
    if _signal_group(pgid, signal.SIGTERM) and not await _until(lambda: not _group_alive(pgid, process), TERM_GRACE):
        logger.info("process group %d did not exit within %gs of SIGTERM; killing it", pgid, TERM_GRACE)
        _signal_group(pgid, signal.SIGKILL)
        await _until(lambda: not _group_alive(pgid, process), REAP_LIMIT)
    with anyio.move_on_after(REAP_LIMIT):
        await process.aclose()
    return stopped


async def _until(condition: Callable[[], bool], limit: float) -> bool:
    """Whether `condition()` became true within `limit` seconds (looked at every `POLL_INTERVAL`)."""
    with anyio.move_on_after(limit):
        # no event tells that a process group ended; `process.wait()` would also wait for a grandchild's pipes
        while not condition():  # noqa: ASYNC110
            await anyio.sleep(POLL_INTERVAL)
        return True
    return False


def _signal_group(pgid: int, signum: signal.Signals) -> bool:
    """False when the group is gone already."""
    try:
        os.killpg(pgid, signum)
    except ProcessLookupError:
        return False
    except PermissionError:  # a member we may not signal (or a zombie, on macOS): keep waiting and escalating
        logger.debug("no permission to signal some of process group %d", pgid)
    return True


def _group_alive(pgid: int, leader: Process) -> bool:
    _ = leader.returncode  # lets the leader be reaped: a zombie leader keeps its group alive
    if child_groups.supported():
        child_groups.reap_group(pgid, leader.pid)  # as are zombies re-parented to Triad (a child subreaper)
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        pass
    return True
