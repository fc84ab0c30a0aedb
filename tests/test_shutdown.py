"""Stopping Triad: calls in flight are drained, then answered with JSON-RPC errors; no descendant of a stdio
upstream (a child's own children included) outlives Triad, whether it got SIGTERM or its stdio client left."""

from __future__ import annotations

import shlex
import signal
import subprocess
import time
from pathlib import Path
from typing import Any

import anyio
import httpx2
import mcp_types as types
import pytest
from mcp.shared.exceptions import MCPError

from consumers._sdk import RAW
from tests.conftest import (
    FIXTURE,
    PYTHON,
    RUN_MARKER,
    TRIAD,
    Proc,
    marker,
    start_triad,
    surviving_processes,
    write_config,
)
from tests.test_gateway_e2e import http_session

pytestmark = pytest.mark.anyio


def upstream_with_a_grandchild(name: str, **settings: Any) -> dict[str, Any]:
    """A stdio upstream whose process starts a child of its own (as `npx` starts `node`): a shell forks the
    grandchild, then becomes the fixture server (exec), so the grandchild's parent is the upstream itself."""
    grandchild = shlex.join([PYTHON, "-c", "import time; time.sleep(600)", marker(f"{name}-grandchild")])
    server = shlex.join([PYTHON, str(FIXTURE), "--name", marker(name)])
    return {"command": "sh", "args": ["-c", f"{grandchild} >/dev/null & exec {server}"], **settings}


def wait_until_gone(mark: str, limit: float = 10) -> list[str]:
    """The processes carrying `mark` that are still alive after `limit` seconds (polling /proc for the state)."""
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


def test_sigterm_to_triad_stdio_stops_every_descendant_of_stdio_upstreams(tmp_path: Path) -> None:
    config = write_config(tmp_path, {"upstreams": {"a": upstream_with_a_grandchild("stdio-term-a")}})
    triad = Proc([*TRIAD, "stdio", "-c", str(config), "--log-level", "INFO"], stdin=subprocess.PIPE)
    try:
        triad.wait_for(r"upstream a ready")
        mark = f"{RUN_MARKER}-stdio-term-"
        assert len(wait_until_gone(mark, 0)) == 2
        triad.popen.send_signal(signal.SIGTERM)  # the client keeps its end of stdin open
        assert wait_until_gone(mark) == []
        assert triad.popen.wait(timeout=30) == 0, triad.stderr  # and Triad itself exits, stdin open or not
        assert "Traceback" not in triad.stderr, triad.stderr
    finally:
        triad.terminate()


async def test_sigterm_drains_calls_in_flight_then_answers_the_rest_with_json_rpc_errors(
        procs: list[Proc], tmp_path: Path) -> None:
    config = write_config(tmp_path, {"listen": {"shutdown_grace": "4s"},
                                     "upstreams": {"fx": {"command": PYTHON,
                                                          "args": [str(FIXTURE), "--name", marker("drain")]}}})
    url = start_triad(procs, config, wait_ready=1)
    triad = procs[-1]
    outcomes: dict[str, str] = {}
    started = {name: anyio.Event() for name in ("short", "long-1", "long-2", "long-3")}

    async def run(via: Any, name: str, steps: int) -> None:
        async def on_progress(progress: float, total: float | None, message: str | None) -> None:
            started[name].set()

        # a raw request: the SDK's `call_tool` lists the tools after a result, which a stopping Triad refuses
        request = types.CallToolRequest(params=types.CallToolRequestParams(
            name="progress", arguments={"steps": steps, "delay": 0.4}))
        try:
            result = await via.send_request(request, RAW, progress_callback=on_progress)
            outcomes[name] = f"result: {result['content'][0]['text']}"
        except MCPError as exc:
            outcomes[name] = f"error {exc.error.code}: {exc.error.message}"

    with anyio.fail_after(60):
        try:
            async with http_session(url) as via, anyio.create_task_group() as tg:
                tg.start_soon(run, via, "short", 2)  # ends 0.4 s after its first progress: within the grace
                for name in ("long-1", "long-2", "long-3"):
                    tg.start_soon(run, via, name, 1000)  # would run for minutes
                for event in started.values():
                    await event.wait()
                triad.popen.send_signal(signal.SIGTERM)
        except* httpx2.ConnectError:  # the client's goodbye (DELETE of its session) finds Triad gone
            pass
    assert outcomes.get("short") == "result: 2 steps", (outcomes, triad.stderr)
    for name in ("long-1", "long-2", "long-3"):
        assert outcomes[name].startswith("error -32"), outcomes
        assert "shutting down" in outcomes[name], outcomes
    assert triad.popen.wait(30) == 0, triad.stderr
    assert "Traceback" not in triad.stderr, triad.stderr
