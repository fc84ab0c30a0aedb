"""Hot reload with connected clients and calls in flight: add, remove, change; policy; broken files; editors."""

from __future__ import annotations

import os
import signal
from pathlib import Path
from typing import Any

import anyio
import httpx2
import mcp_types as types
import pytest
import yaml
from mcp.shared.exceptions import MCPError

from tests.conftest import PYTHON, ROOT, Proc, marker, start_triad, stdio_upstream, surviving_processes, write_config
from tests.servers.fixture_upstream import TOOL_COUNT
from tests.test_gateway_e2e import ListChanges, all_tools, call, http_session
from tests.test_policy_e2e import session_as

pytestmark = pytest.mark.anyio


def base_config() -> dict[str, Any]:
    return {"upstreams": {"a": stdio_upstream("rl-a"), "b": stdio_upstream("rl-b")}}


def rewrite(path: Path, config: dict[str, Any]) -> None:
    """Write the way editors do: a temporary file renamed over the original."""
    temporary = path.with_name(path.name + ".tmp")
    temporary.write_text(yaml.safe_dump(config, sort_keys=False))
    os.replace(temporary, path)


async def test_add_remove_and_change_upstreams_while_a_call_is_in_flight(procs: list[Proc], tmp_path: Path) -> None:
    path = write_config(tmp_path, base_config())
    url = start_triad(procs, path, wait_ready=2)
    triad = procs[-1]
    changes = ListChanges()
    async with http_session(url, message_handler=changes) as via:
        await changes.wait_for_tools(via, 2 * TOOL_COUNT)
        slow_result: dict[str, Any] = {}

        async def slow_call() -> None:
            slow_result.update(await call(via, "b__slow", {"seconds": 2}))

        async with anyio.create_task_group() as tg:
            tg.start_soon(slow_call)
            await anyio.sleep(0.3)  # the call is in flight on b
            new = {"upstreams": {
                "a": stdio_upstream("rl-a", "--prefix", "new_"),   # changed: a new child with new tool names
                "c": stdio_upstream("rl-c"),                        # added
            }}                                                      # b removed
            rewrite(path, new)
            await triad.until(r"reloaded config \(file changed\)")
        assert slow_result["content"][0]["text"] == "done"  # b finished its call within the grace period
        with anyio.fail_after(30):
            while True:
                changes.event = anyio.Event()
                names = {t["name"] for t in await all_tools(via)}
                if "a__new_echo" in names and "c__echo" in names:
                    break
                await changes.event.wait()
        assert not any(n.startswith("b__") for n in names)
        assert "a__echo" not in names
        assert (await call(via, "a__new_echo", {"text": "new a"}))["content"][0]["text"] == "new a"
        assert (await call(via, "c__echo", {"text": "c"}))["content"][0]["text"] == "c"
        with pytest.raises(MCPError) as raised:
            await call(via, "b__echo", {"text": "gone"})
        assert raised.value.error.message == "Unknown tool: b__echo"
    assert "still running after" not in triad.stderr
    with anyio.fail_after(10):  # the removed upstream's child and the replaced one's old child are gone
        while surviving_processes(marker("rl-b")) or len(surviving_processes(marker("rl-a"))) > 1:  # noqa: ASYNC110 (the process table has no event)
            await anyio.sleep(0.1)


async def test_unchanged_upstreams_keep_their_session_and_child(procs: list[Proc], tmp_path: Path) -> None:
    path = write_config(tmp_path, base_config())
    url = start_triad(procs, path, wait_ready=2)
    triad = procs[-1]
    async with http_session(url) as via:
        before = await call(via, "a__echo", {"text": "x"})
        config = base_config()
        config["upstreams"]["a"]["timeout"] = "45s"  # a call setting: applied without reconnecting
        config["page_size"] = 5
        rewrite(path, config)
        await triad.until(r"reloaded config \(file changed\): updated a, settings page_size;")
        assert len((await via.list_tools()).tools) == 5
        after = await call(via, "a__echo", {"text": "x"})
        assert after["_meta"]["fixture/upstream"] == before["_meta"]["fixture/upstream"]
        assert after["content"] == before["content"]
    assert triad.stderr.count("upstream a ready") == 1


async def test_policy_change_notifies_only_the_sessions_whose_view_changed(procs: list[Proc], tmp_path: Path,
                                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TRIAD_TEST_T1", "token-one-1111")
    monkeypatch.setenv("TRIAD_TEST_T2", "token-two-2222")
    config = {**base_config(), "clients": {"one": {"token": "${TRIAD_TEST_T1}", "agent": "one"},
                                          "two": {"token": "${TRIAD_TEST_T2}", "agent": "two"}}}
    path = write_config(tmp_path, config)
    url = start_triad(procs, path, wait_ready=2)
    triad = procs[-1]
    one_changes, two_changes = ListChanges(), ListChanges()
    async with (session_as(url, "token-one-1111", message_handler=one_changes) as one,
                session_as(url, "token-two-2222", message_handler=two_changes) as two):
        assert "a__image" in {t.name for t in (await one.list_tools()).tools}
        await two.list_tools()
        rewrite(path, {**config, "policy": {"agents": {"one": {"deny": ["a__image"]}}}})
        await triad.until(r"reloaded config")
        with anyio.fail_after(10):
            await one_changes.event.wait()
        assert "a__image" not in {t.name for t in (await one.list_tools()).tools}
        assert "a__image" in {t.name for t in (await two.list_tools()).tools}
        with pytest.raises(MCPError):
            await call(one, "a__image")  # type: ignore[arg-type]
        await anyio.sleep(0.5)  # give a wrong notification time to arrive
        assert two_changes.count == 0 and one_changes.count == 1


def _alias_bomb(fan_out: int, depth: int) -> str:
    lines = [f"a0: &a0 [{', '.join(['x'] * fan_out)}]"]
    lines += [f"a{i}: &a{i} [{', '.join([f'*a{i - 1}'] * fan_out)}]" for i in range(1, depth)]
    return "\n".join(lines) + "\n"


@pytest.mark.parametrize(("broken", "logged"), [
    ("upstreams: [oops\n", "not valid YAML"),
    ("upstreams:\n  a: {command: x, timeout: forever}\n", "upstreams.a.timeout: not a duration"),
    # files that once took the daemon down (a recursion out of the watcher) or held the reload for ever
    ("a: &a [*a]\n", "refers to a node that contains it"),
    ("x: " + "[" * 3000 + "]" * 3000 + "\n", "levels deep"),
    (_alias_bomb(9, 9), "values once aliases are expanded"),
])
async def test_invalid_config_on_reload_changes_nothing(procs: list[Proc], tmp_path: Path, broken: str,
                                                       logged: str) -> None:
    path = write_config(tmp_path, base_config())
    url = start_triad(procs, path, wait_ready=2)
    triad = procs[-1]
    async with http_session(url) as via:
        path.write_text(broken)
        await triad.until(r"reload \(file changed\) refused")
        assert logged in triad.stderr
        assert (await call(via, "b__echo", {"text": "still"}))["content"][0]["text"] == "still"
        async with httpx2.AsyncClient() as http:
            ready = (await http.get(url.replace("/mcp", "/readyz"))).json()
        assert ready["reload"]["failures"] == 1 and logged in " ".join(ready["reload"]["last_error"])
        assert ready["upstreams"]["a"]["state"] == "ready"


async def test_sighup_and_admin_endpoint_reload(procs: list[Proc], tmp_path: Path,
                                                monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TRIAD_TEST_OWNER", "owner-token-3333")
    monkeypatch.setenv("TRIAD_TEST_USER", "user-token-4444")
    config = {**base_config(), "clients": {"boss": {"token": "${TRIAD_TEST_OWNER}", "owner": True},
                                          "user": {"token": "${TRIAD_TEST_USER}"}}}
    path = write_config(tmp_path, config)
    url = start_triad(procs, path, wait_ready=2)
    triad = procs[-1]
    triad.popen.send_signal(signal.SIGHUP)
    await triad.until(r"reloaded config \(SIGHUP\)")
    admin = url.replace("/mcp", "/admin/reload")
    async with httpx2.AsyncClient() as http:
        refused = await http.post(admin, headers={"Authorization": "Bearer user-token-4444"})
        assert refused.status_code == 403
        assert (await http.post(admin)).status_code == 401
        done = await http.post(admin, headers={"Authorization": "Bearer owner-token-3333"})
        assert done.status_code == 200 and done.json()["ok"] is True
        assert done.json()["changes"]["kept"] == ["a", "b"]
    await triad.until(r"reloaded config \(POST /admin/reload by boss\)")


async def test_changing_listen_says_a_restart_is_needed(procs: list[Proc], tmp_path: Path) -> None:
    path = write_config(tmp_path, base_config())
    start_triad(procs, path, wait_ready=2)
    rewrite(path, {**base_config(), "listen": {"port": 9999}})
    await procs[-1].until(r"listen changed .* it takes effect on restart only")


@pytest.mark.parametrize("era", ["handshake", "auto"])
async def test_a_replaced_upstream_keeps_its_clients_resource_subscriptions(era: str, procs: list[Proc],
                                                                            tmp_path: Path) -> None:
    """New connection settings open a new connection; what clients subscribed to is asked of it again."""
    upstream = Proc([PYTHON, str(ROOT / "tests" / "servers" / "conformance_upstream.py"), "--transport", "http",
                     "--name", marker("rl-sub")])
    procs.append(upstream)
    port = upstream.wait_for(r"READY (\d+)").group(1)
    up_url = f"http://127.0.0.1:{port}/mcp"

    def config(generation: str) -> dict[str, Any]:
        return {"upstreams": {"fx": {"url": up_url, "protocol": era, "headers": {"X-Generation": generation}}},
                "naming": {"prefix": "never"}}

    path = write_config(tmp_path, config("1"))
    url = start_triad(procs, path, wait_ready=1)
    triad = procs[-1]
    updated = anyio.Event()

    async def on_message(message: Any) -> None:
        if isinstance(getattr(message, "root", message), types.ResourceUpdatedNotification):
            updated.set()

    async with http_session(url, message_handler=on_message) as via:
        await via.subscribe_resource("test://watched-resource")
        rewrite(path, config("2"))
        await triad.until(r"upstream fx: new connection settings are live")
        with anyio.fail_after(15):
            while not updated.is_set():  # the renewed subscription may still be on its way to the upstream
                await call(via, "test_trigger_resource_update")
                with anyio.move_on_after(0.5):
                    await updated.wait()


async def test_a_refused_reload_names_the_variable_never_its_value(procs: list[Proc], tmp_path: Path,
                                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TRIAD_TEST_RATE", "tok-77c1d0e94b")
    path = write_config(tmp_path, base_config())
    url = start_triad(procs, path, wait_ready=2)
    triad = procs[-1]
    rewrite(path, {**base_config(), "anonymous": "${TRIAD_TEST_RATE}",
                   "hooks": [{"rate_limit": {"per_client": "${TRIAD_TEST_RATE}"}}]})
    await triad.until(r"reload \(file changed\) refused")
    async with httpx2.AsyncClient() as http:
        ready = (await http.get(url.replace("/mcp", "/readyz"))).json()
    errors = " ".join(ready["reload"]["last_error"])
    assert "${TRIAD_TEST_RATE}" in errors
    assert "77c1d0e94b" not in errors and "77c1d0e94b" not in triad.stderr


INITIALIZE = {"jsonrpc": "2.0", "id": 1, "method": "initialize",
              "params": {"protocolVersion": "2025-11-25", "capabilities": {},
                         "clientInfo": {"name": "t", "version": "1"}}}
ACCEPT = {"Accept": "application/json, text/event-stream"}


def guarded_config() -> dict[str, Any]:
    return {**base_config(), "clients": {"boss": {"token": "${TRIAD_TEST_BOSS}", "owner": True}}}


async def status_without_token(url: str) -> int:
    async with httpx2.AsyncClient() as http:
        return (await http.post(url, json=INITIALIZE, headers=ACCEPT)).status_code


@pytest.mark.parametrize("content", ["", "# being rewritten\n"])
async def test_an_empty_file_is_refused_and_authentication_stays_on(procs: list[Proc], tmp_path: Path,
                                                                    monkeypatch: pytest.MonkeyPatch,
                                                                    content: str) -> None:
    monkeypatch.setenv("TRIAD_TEST_BOSS", "boss-token-5555")
    path = write_config(tmp_path, guarded_config())
    url = start_triad(procs, path, wait_ready=2)
    triad = procs[-1]
    path.write_text(content)
    await triad.until(r"reload \(file changed\) refused")
    assert "(top level): the file is empty" in triad.stderr
    assert await status_without_token(url) == 401
    async with session_as(url, "boss-token-5555") as boss:
        assert len((await boss.list_tools()).tools) == 2 * TOOL_COUNT


async def test_turning_authentication_off_needs_an_explicit_empty_clients_block(
        procs: list[Proc], tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TRIAD_TEST_BOSS", "boss-token-6666")
    path = write_config(tmp_path, guarded_config())
    url = start_triad(procs, path, wait_ready=2)
    triad = procs[-1]
    rewrite(path, base_config())  # what a file cut off before its clients block says
    await triad.until(r"reload \(file changed\) refused")
    assert "write `clients: {}` in the file" in triad.stderr
    assert await status_without_token(url) == 401
    rewrite(path, {**base_config(), "clients": {}})
    await triad.until(r"reloaded config \(file changed\)")
    assert await status_without_token(url) == 200


async def test_removing_every_upstream_needs_an_explicit_empty_upstreams_block(procs: list[Proc],
                                                                                tmp_path: Path) -> None:
    path = write_config(tmp_path, base_config())
    url = start_triad(procs, path, wait_ready=2)
    triad = procs[-1]
    async with http_session(url) as via:
        rewrite(path, {"page_size": 50})
        await triad.until(r"reload \(file changed\) refused")
        assert "write `upstreams: {}` in the file" in triad.stderr
        assert (await call(via, "a__echo", {"text": "kept"}))["content"][0]["text"] == "kept"
        rewrite(path, {"upstreams": {}, "page_size": 50})
        await triad.until(r"reloaded config \(file changed\): removed a, b")


async def test_a_file_written_in_place_slowly_is_applied_once_whole(procs: list[Proc], tmp_path: Path) -> None:
    """An in-place writer truncates the file, then writes it line by line; no state in between is applied."""
    path = write_config(tmp_path, base_config())
    start_triad(procs, path, wait_ready=2)
    triad = procs[-1]
    new = {"upstreams": {**base_config()["upstreams"], "c": stdio_upstream("rl-c")}}
    lines = [f"# line {i} of a long header comment\n" for i in range(15)]
    lines += yaml.safe_dump(new, sort_keys=False).splitlines(keepends=True)
    with path.open("w") as stream:  # truncates: the watcher sees an empty file first
        for line in lines:
            stream.write(line)
            stream.flush()
            await anyio.sleep(0.03)  # a slow writer, not synchronisation: pauses well within reload.settle
    await triad.until(r"upstream c ready")
    await triad.until(r"reloaded config \(file changed\): added c;")
    assert "refused" not in triad.stderr and "removed" not in triad.stderr
    assert triad.stderr.count("reloaded config") == 1
