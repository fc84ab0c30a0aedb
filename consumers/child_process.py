"""A stdio upstream's child process: spawned as the leader of a session of its own (so of its own process group),
spoken to over its stdin and stdout, and on close stopped together with every process in its group.

Why not the SDK's `stdio_client`: it kills the process group only when the child outlives the grace period after
its stdin closes. A server started through `npx`, `uvx` or a shell has children of its own; the leader exits at
once when its stdin closes and leaves them running (issue 17, point 15). Here the group is always ended: close
stdin (the MCP spec's first step), wait for the leader, then SIGTERM to the whole group, then SIGKILL to what is
left. Every wait is bounded, and the caller's cancellation cannot interrupt the stop (it runs shielded).

Ownership: the upstream's owner task enters and exits `open_child`; two pump tasks inside it move lines between
the pipes and the session's memory streams.
"""

from __future__ import annotations

import logging
import os
import signal
import subprocess
from collections.abc import AsyncIterator, Callable, Mapping, Sequence
from contextlib import asynccontextmanager, suppress
from typing import IO

import anyio
import mcp_types as types
from anyio.abc import Process
from anyio.streams.memory import MemoryObjectReceiveStream, MemoryObjectSendStream
from mcp.client.stdio import get_default_environment
from mcp.shared.message import SessionMessage

logger = logging.getLogger("triad.upstream")

STDIN_CLOSE_GRACE = 2.0
"""How long a child may take to exit once its stdin is closed (the SDK's figure), before its group gets SIGTERM."""
TERM_GRACE = 2.0
"""How long the group may take to exit after SIGTERM, before SIGKILL."""
REAP_LIMIT = 2.0
"""How long the event loop may take to see the leader's death after SIGKILL; only an unkillable process waits it."""
POLL_INTERVAL = 0.02
"""How often the state of an exiting process or group is looked at (there is no event for a group's end)."""

ReadStream = MemoryObjectReceiveStream[SessionMessage | Exception]
WriteStream = MemoryObjectSendStream[SessionMessage]


@asynccontextmanager
async def open_child(command: str, args: Sequence[str], env: Mapping[str, str] | None, cwd: str | None,
                     stderr: IO[str]) -> AsyncIterator[tuple[ReadStream, WriteStream]]:
    """Spawn the child and yield the session's (read, write) streams; on exit, stop its whole process group."""
    process = await anyio.open_process([command, *args], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                       stderr=stderr, env={**get_default_environment(), **(env or {})}, cwd=cwd,
                                       start_new_session=True)
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
                await stop_group(process)
            tg.cancel_scope.cancel()


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
        return SessionMessage(types.jsonrpc_message_adapter.validate_json(line, by_name=False))
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


async def stop_group(process: Process) -> None:
    """Close stdin and wait for the leader; then SIGTERM, and if need be SIGKILL, to the whole process group,
    whether or not the leader is still there (its children may be). Bounded; call it shielded."""
    assert process.stdin is not None
    with suppress(anyio.ClosedResourceError, anyio.BrokenResourceError, OSError):
        await process.stdin.aclose()
    await _until(lambda: process.returncode is not None, STDIN_CLOSE_GRACE)
    pgid = process.pid  # the leader's pid is the group's id (start_new_session); it stays so after the leader died
    if _signal_group(pgid, signal.SIGTERM) and not await _until(lambda: not _group_alive(pgid, process), TERM_GRACE):
        logger.info("process group %d did not exit within %gs of SIGTERM; killing it", pgid, TERM_GRACE)
        _signal_group(pgid, signal.SIGKILL)
        await _until(lambda: not _group_alive(pgid, process), REAP_LIMIT)
    with anyio.move_on_after(REAP_LIMIT):
        await process.aclose()


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
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        pass
    return True
