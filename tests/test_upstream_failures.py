"""One bad upstream never takes the others down: down at start, hanging in initialize, dying mid-call, too slow.
And no child process outlives `triad serve`."""

from __future__ import annotations

import json
import socket
import subprocess
import time
from pathlib import Path

import anyio
import mcp_types as types
import pytest
from mcp import ClientSession
from mcp.shared.exceptions import MCPError

from tests.conftest import (
    FIXTURE,
    PYTHON,
    ROOT,
    RUN_MARKER,
    TRIAD,
    Proc,
    marker,
    start_fixture,
    start_triad,
    stdio_upstream,
    surviving_processes,
    write_config,
)
from tests.servers.fixture_upstream import TOOL_COUNT
from tests.test_gateway_e2e import ListChanges, call, http_session

pytestmark = pytest.mark.anyio


def closed_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def failing_config(tmp_path: Path) -> Path:
    return write_config(tmp_path, {"upstreams": {
        "healthy": stdio_upstream("healthy"),
        "down": {"url": f"http://127.0.0.1:{closed_port()}/mcp", "timeout": "3s"},
        # `timeout` bounds calls only; connecting, initialize and listing have `connect_timeout`
        "hanging": stdio_upstream("hanging", "--hang-initialize", timeout="1s", connect_timeout="2s"),
        "missing": {"command": "/nonexistent/mcp-server", "timeout": "3s"},
    }})


async def test_down_and_hanging_upstreams_do_not_block_the_healthy_one(procs: list[Proc], tmp_path: Path) -> None:
    url = start_triad(procs, failing_config(tmp_path))
    await procs[-1].until(r"upstream healthy ready")
    async with http_session(url) as via:
        result = await call(via, "healthy__echo", {"text": "still here"})
        assert result["content"][0]["text"] == "still here"


def test_plan_shows_why_upstreams_are_missing(tmp_path: Path) -> None:
    done = subprocess.run([*TRIAD, "plan", "-c", str(failing_config(tmp_path)), "--json"], capture_output=True,
                          text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    report = json.loads(done.stdout)
    states = {name: (up["state"], up["reason"]) for name, up in report["upstreams"].items()}
    assert states["healthy"] == ("ready", "")
    assert states["down"][0] == "down" and "ConnectError" in states["down"][1]
    assert states["hanging"] == ("down", "did not finish initialize and listing within 2s")
    assert states["missing"] == ("down", "command not found: /nonexistent/mcp-server")
    assert "healthy__echo" in [t["name"] for t in report["visible"]]
    text = subprocess.run([*TRIAD, "plan", "-c", str(failing_config(tmp_path))], capture_output=True, text=True,
                          timeout=60)
    assert "did not finish initialize and listing within 2s" in text.stdout
    assert "healthy__echo" in text.stdout


async def test_upstream_dying_mid_call_gets_an_error_naming_it_and_comes_back(procs: list[Proc],
                                                                              tmp_path: Path) -> None:
    config = write_config(tmp_path, {"upstreams": {"a": stdio_upstream("die-a"), "b": stdio_upstream("die-b")}})
    url = start_triad(procs, config, wait_ready=2)
    changes = ListChanges()
    async with http_session(url, message_handler=changes) as via:
        with pytest.raises(MCPError) as raised:
            await call(via, "a__die")
        assert "upstream 'a'" in raised.value.error.message
        assert (await call(via, "b__echo", {"text": "b lives"}))["content"][0]["text"] == "b lives"
        with anyio.fail_after(60):  # the supervisor restarts the child; its tools come back with list_changed
            while True:
                changes.event = anyio.Event()
                try:
                    result = await call(via, "a__echo", {"text": "a is back"})
                    break
                except MCPError:
                    await changes.event.wait()
        assert result["content"][0]["text"] == "a is back"
        assert changes.count >= 1


async def test_tools_of_a_down_upstream_are_hidden_and_their_calls_say_it_is_down(procs: list[Proc],
                                                                                 tmp_path: Path) -> None:
    """Every case of the class (shared and per-client, both eras, allowed and denied): `test_down_upstreams`."""
    port = closed_port()
    fixture = Proc([PYTHON, str(FIXTURE), "--transport", "http", "--port", str(port), "--name", marker("hid-a")])
    await fixture.until(r"READY")
    config = write_config(tmp_path, {"upstreams": {"a": {"url": f"http://127.0.0.1:{port}/mcp", "ping_interval": "1s"},
                                                   "b": stdio_upstream("hid-b")}})
    url = start_triad(procs, config, wait_ready=2)
    changes = ListChanges()
    async with http_session(url, message_handler=changes) as via:
        assert "a__echo" in [t["name"] for t in await changes.wait_for_tools(via, 2 * TOOL_COUNT)]
        changes.event = anyio.Event()
        fixture.terminate()  # the upstream goes away and stays away: its tools move to the hidden list
        with anyio.fail_after(30):
            while "a__echo" in [t.name for t in (await via.list_tools()).tools]:
                await changes.event.wait()
                changes.event = anyio.Event()
        with pytest.raises(MCPError) as raised:
            await call(via, "a__echo")
        assert raised.value.error.code == types.INTERNAL_ERROR
        assert raised.value.error.message.startswith("upstream 'a' is down (")
        assert (await call(via, "b__echo", {"text": "b"}))["content"][0]["text"] == "b"
        restarted = Proc([PYTHON, str(FIXTURE), "--transport", "http", "--port", str(port), "--name",
                          marker("hid-a2")])
        procs.append(restarted)
        await restarted.until(r"READY")
        await changes.wait_for_tools(via, 2 * TOOL_COUNT)  # it reconnects on its own, and the tools come back
        assert (await call(via, "a__echo", {"text": "back"}))["content"][0]["text"] == "back"


async def test_upstream_timeout_names_the_upstream_and_the_session_survives(procs: list[Proc],
                                                                            tmp_path: Path) -> None:
    config = write_config(tmp_path, {"upstreams": {"fx": stdio_upstream("slow", timeout="1s")}})
    url = start_triad(procs, config, wait_ready=1)
    async with http_session(url) as via:
        with pytest.raises(MCPError) as raised:
            await call(via, "slow", {"seconds": 30})
        assert raised.value.error.code == types.REQUEST_TIMEOUT
        assert raised.value.error.message == "upstream 'fx' did not answer tools/call within 1s"
        assert (await call(via, "echo", {"text": "ok"}))["content"][0]["text"] == "ok"


def test_sigterm_leaves_no_child_process(procs: list[Proc], tmp_path: Path) -> None:
    config = write_config(tmp_path, {"upstreams": {"a": stdio_upstream("sig-a"), "b": stdio_upstream("sig-b")}})
    start_triad(procs, config, wait_ready=2)
    triad = procs[-1]
    children = surviving_processes(f"{RUN_MARKER}-sig-")
    assert len(children) == 2, children
    assert triad.terminate() == 0, triad.stderr
    deadline = time.monotonic() + 5
    while surviving_processes(f"{RUN_MARKER}-sig-") and time.monotonic() < deadline:
        time.sleep(0.1)
    assert surviving_processes(f"{RUN_MARKER}-sig-") == []


async def test_after_an_http_upstream_restarts_safe_calls_and_calls_it_never_received_are_retried(
        procs: list[Proc], tmp_path: Path) -> None:
    port = closed_port()

    def start_upstream(name: str) -> Proc:
        proc = Proc([PYTHON, str(FIXTURE), "--transport", "http", "--port", str(port), "--name", marker(name)])
        procs.append(proc)
        proc.wait_for(r"READY")
        return proc

    first = start_upstream("restart-1")
    config = write_config(tmp_path, {"upstreams": {"fx": {"url": f"http://127.0.0.1:{port}/mcp",
                                                          "ping_interval": "1h", "timeout": "5s"}}})
    url = start_triad(procs, config, wait_ready=1)
    triad = procs[-1]
    async with http_session(url) as via:
        assert (await call(via, "echo", {"text": "1"}))["_meta"]["fixture/upstream"].endswith("restart-1")
        first.terminate()
        second = start_upstream("restart-2")
        # echo is annotated read-only: safe to repeat, so it is retried once on a new session
        result = await call(via, "echo", {"text": "2"})
        assert result["_meta"]["fixture/upstream"].endswith("restart-2")
        second.terminate()
        start_upstream("restart-3")
        # no annotations: not safe to repeat; but the new upstream answers 404 for the old session, which proves it
        # never received the call, so it is sent once more on the new session
        assert (await call(via, "image"))["content"][0]["type"] == "image"
    assert "retrying tools/call on a new session" in triad.stderr
    assert "retrying tools/call on a new session (the upstream never received it)" in triad.stderr


async def test_malformed_json_rpc_from_an_upstream(procs: list[Proc], tmp_path: Path) -> None:
    config = write_config(tmp_path, {"upstreams": {"bad": stdio_upstream("garbage", timeout="2s"),
                                                   "good": stdio_upstream("garbage-ok")}})
    url = start_triad(procs, config, wait_ready=2)
    async with http_session(url) as via:
        with pytest.raises(MCPError) as raised:
            await call(via, "bad__garbage")
        assert "upstream 'bad'" in raised.value.error.message
        assert (await call(via, "good__echo", {"text": "ok"}))["content"][0]["text"] == "ok"
        assert (await call(via, "bad__echo", {"text": "still"}))["content"][0]["text"] == "still"


async def test_an_upstream_flooding_notifications_does_not_stall_others(procs: list[Proc], tmp_path: Path) -> None:
    config = write_config(tmp_path, {"upstreams": {"noisy": stdio_upstream("flood"),
                                                   "quiet": stdio_upstream("flood-quiet")}})
    url = start_triad(procs, config, wait_ready=2)
    seen: list[float] = []

    async def on_progress(progress: float, total: float | None, message: str | None) -> None:
        seen.append(progress)

    async with http_session(url) as via, http_session(url) as other:
        results: dict[str, str] = {}

        async def flood() -> None:
            result = await via.call_tool("noisy__flood", {"count": 3000}, progress_callback=on_progress)
            results["flood"] = result.content[0].text  # type: ignore[union-attr]

        async with anyio.create_task_group() as tg:
            tg.start_soon(flood)
            for i in range(20):
                reply = await call(other, "quiet__echo", {"text": str(i)})
                assert reply["content"][0]["text"] == str(i)
        assert results["flood"] == "flooded 3000"
        assert seen[-1] == 3000 and len(seen) == 3000


@pytest.mark.parametrize("protocol", ["handshake", "auto"])
async def test_circuit_breaker_fails_fast_then_tries_again(procs: list[Proc], tmp_path: Path, protocol: str) -> None:
    """Connection-level failures (here a 503 from the upstream's HTTP server: nothing took the call) open it; in
    both eras (`auto`: a 2026-07-28 upstream, through the SDK's transport rather than Triad's direct path)."""
    if protocol == "handshake":
        upstream, tool, arguments = start_fixture(procs, "http", "breaker", "--unavailable-calls", "2"), "echo", {}
    else:
        proc = Proc([PYTHON, str(ROOT / "tests" / "servers" / "conformance_upstream.py"), "--transport", "http",
                     "--name", marker("breaker-modern"), "--unavailable-calls", "2"])
        procs.append(proc)
        port = proc.wait_for(r"READY (\d+)").group(1)
        upstream = f"http://127.0.0.1:{port}/mcp"
        tool, arguments = "test_simple_text", {}
    fixture = procs[-1]
    config = write_config(tmp_path, {"upstreams": {"fx": {"url": upstream, "ping_interval": "1h", "protocol": protocol,
                                                          "circuit_breaker": {"failures": 2, "cooldown": "1s"}}},
                                     "naming": {"prefix": "never"}})
    url = start_triad(procs, config, wait_ready=1)
    triad = procs[-1]

    async def answered(via: ClientSession) -> bool:
        result = await call(via, tool, {"text": "x"} if tool == "echo" else arguments)
        return result.get("isError") is not True

    async with http_session(url) as via:
        for _ in range(2):
            with pytest.raises(MCPError) as raised:
                await answered(via)
            assert raised.value.error.message == "upstream 'fx' answered HTTP 503 to tools/call"
        await triad.until(r"upstream fx: circuit open after 2 failed calls")
        with pytest.raises(MCPError) as raised:  # fails fast: the upstream does not see it
            await answered(via)
        assert raised.value.error.message.startswith("upstream 'fx' is failing: 2 calls in a row failed to reach it")
        assert "circuit breaker" in raised.value.error.message
        assert fixture.stderr.count("answered 503") == 2
        await anyio.sleep(1.1)  # the cool-down (a window of time is the behaviour under test); then one trial call
        assert await answered(via) and await answered(via)


@pytest.mark.parametrize("protocol", ["handshake", "auto"])
async def test_an_endless_unavailable_body_is_not_read_to_its_end(procs: list[Proc], tmp_path: Path,
                                                                   protocol: str) -> None:
    """A 503 whose body never ends (whatever answers on the upstream's URL may send one): Triad reads a few KiB,
    hangs up, and the call fails at once as an unavailable upstream, in both eras (`auto`: the SDK's transport)."""
    if protocol == "handshake":
        upstream = start_fixture(procs, "http", "endless", "--unavailable-calls", "1", "--endless-503")
    else:
        proc = Proc([PYTHON, str(ROOT / "tests" / "servers" / "conformance_upstream.py"), "--transport", "http",
                     "--name", marker("endless-modern"), "--unavailable-calls", "1", "--endless-503"])
        procs.append(proc)
        port = proc.wait_for(r"READY (\d+)").group(1)
        upstream = f"http://127.0.0.1:{port}/mcp"
    fixture = procs[-1]
    config = write_config(tmp_path, {"upstreams": {"fx": {"url": upstream, "ping_interval": "1h", "protocol": protocol,
                                                          "timeout": "60s"}},
                                     "naming": {"prefix": "never"}})
    url = start_triad(procs, config, wait_ready=1)
    async with http_session(url) as via:
        with pytest.raises(MCPError) as raised:
            await call(via, *(("echo", {"text": "x"}) if protocol == "handshake" else ("test_simple_text", {})))
        assert raised.value.error.message == "upstream 'fx' answered HTTP 503 to tools/call"
        await fixture.until(r"503 body cut after \d+ bytes")  # Triad hung up on it


def test_an_upstream_repeating_its_cursor_is_an_error_not_a_loop(tmp_path: Path) -> None:
    config = write_config(tmp_path, {"upstreams": {
        "loop": stdio_upstream("cursor-loop", "--page-size", "3", "--loop-cursor"),
        "fine": stdio_upstream("cursor-fine", "--page-size", "3")}})
    done = subprocess.run([*TRIAD, "plan", "-c", str(config), "--json"], capture_output=True, text=True, timeout=60)
    report = json.loads(done.stdout)
    assert report["upstreams"]["loop"]["state"] == "down"
    assert "repeated a pagination cursor" in report["upstreams"]["loop"]["reason"]
    assert report["upstreams"]["fine"]["state"] == "ready"
    assert len([t for t in report["visible"] if t["upstream"] == "fine"]) == TOOL_COUNT


async def test_progress_pushes_the_deadline_back_up_to_the_cap(procs: list[Proc], tmp_path: Path) -> None:
    config = write_config(tmp_path, {"upstreams": {"fx": stdio_upstream(
        "progress-deadline", timeout="2s", max_call_time="4s")}})
    url = start_triad(procs, config, wait_ready=1)
    async with http_session(url) as via:
        # 5 steps, 0.5 s apart: 2.5 s in all (more than the timeout), never 2 s without progress (room for a busy
        # machine)
        result = await call(via, "progress", {"steps": 5, "delay": 0.5})
        assert result["content"][0]["text"] == "5 steps"
        with pytest.raises(MCPError) as raised:  # 20 steps: progress keeps coming, but the 4 s cap ends it
            await call(via, "progress", {"steps": 20, "delay": 0.5})
        assert raised.value.error.code == types.REQUEST_TIMEOUT
        assert "within its maximum call time of 4s" in raised.value.error.message


async def test_a_ping_answered_late_once_does_not_drop_the_connection(procs: list[Proc], tmp_path: Path) -> None:
    """A busy upstream misses one ping: Triad asks once more instead of reconnecting (which would fail the calls
    in flight on the connection)."""
    upstream = stdio_upstream("slow-ping", "--slow-first-ping", "2", timeout="1s", ping_interval="0.3s")
    url = start_triad(procs, write_config(tmp_path, {"upstreams": {"fx": upstream}}), wait_ready=1)
    triad = procs[-1]
    await triad.until(r"upstream fx: no answer to a ping within 1s; trying once more")
    await anyio.sleep(1.5)  # a window, not a synchronisation: the pings in it are answered, none drops the link
    async with http_session(url) as via:
        assert (await call(via, "echo", {"text": "still"}))["content"][0]["text"] == "still"
    assert "upstream fx is down" not in triad.stderr
    assert triad.stderr.count("upstream fx ready") == 1, triad.stderr


async def test_hung_calls_of_one_tool_do_not_open_the_breaker_for_another(procs: list[Proc], tmp_path: Path) -> None:
    """Call timeouts say nothing about the connection: only connection-level failures count for the breaker."""
    config = write_config(tmp_path, {"upstreams": {"fx": stdio_upstream(
        "hung-calls", timeout="1s", circuit_breaker={"failures": 2, "cooldown": "10m"})}})
    url = start_triad(procs, config, wait_ready=1)
    triad = procs[-1]
    async with http_session(url) as via:
        timeouts: list[int] = []

        async def hang() -> None:
            with pytest.raises(MCPError) as raised:
                await call(via, "slow", {"seconds": 30})
            timeouts.append(raised.value.error.code)

        async with anyio.create_task_group() as tg:
            for _ in range(6):
                tg.start_soon(hang)
        assert timeouts == [types.REQUEST_TIMEOUT] * 6
        for i in range(20):
            assert (await call(via, "echo", {"text": str(i)}))["content"][0]["text"] == str(i)
    assert "circuit open" not in triad.stderr


def test_the_upstream_state_machine_refuses_transitions_it_does_not_have() -> None:
    from consumers.config import UpstreamConfig
    from consumers.lifecycle import TRANSITIONS, IllegalTransition, UpstreamState
    from consumers.upstream import Upstream

    upstream = Upstream("sm", UpstreamConfig(command="true"), None, lambda _up: None)
    with pytest.raises(IllegalTransition, match=r"'sm': starting -> degraded"):
        upstream._set_state(UpstreamState.DEGRADED, "circuit open")
    upstream._set_state(UpstreamState.DOWN, "exited")
    upstream._set_state(UpstreamState.DOWN, "exited again")  # the same state with a new reason
    with pytest.raises(IllegalTransition):
        upstream._set_state(UpstreamState.DEGRADED, "circuit open")
    assert all(UpstreamState.STARTING not in targets for targets in TRANSITIONS.values())
