"""Tool overrides (`upstreams.<name>.tools.overrides`): rename, title, description, annotations, hidden and fixed
arguments, applied in the registry (listing, policy, pins, plan, search) and on the forwarded call; the renamed
tool's name kept by the name ledger. End to end with the fixture upstream."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path
from typing import Any

import anyio
import pytest
import yaml
from mcp.shared.exceptions import MCPError

from tests.conftest import TRIAD, Proc, start_triad, stdio_upstream, write_config
from tests.test_gateway_e2e import ListChanges, all_tools, call, http_session
from tests.test_stable_names import rewrite

pytestmark = pytest.mark.anyio

OVERRIDES: dict[str, Any] = {
    "echo": {"name": "say", "title": "Say", "description": "Says it.", "annotations": {"destructiveHint": False}},
    "image": {"annotations": {"readOnlyHint": True}},
    "rich": {"hide_arguments": ["nickname"], "fixed_arguments": {"mode": "fast", "level": "high"}},
}


def overridden(tmp_path: Path, overrides: dict[str, Any] | None = None, **extra: Any) -> Path:
    upstream = stdio_upstream("overrides", tools={"overrides": OVERRIDES if overrides is None else overrides})
    return write_config(tmp_path, {"upstreams": {"fx": upstream}, **extra})


def run_triad(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([*TRIAD, *args], capture_output=True, text=True, timeout=90, check=False)


async def test_clients_see_and_call_the_overridden_tools(procs: list[Proc], tmp_path: Path) -> None:
    pins = tmp_path / "pins.json"
    config = overridden(tmp_path, policy={"profile": {"allow": ["group:readonly", "rich"]}},
                        hooks=[{"pin_definitions": {"state": str(pins)}}])
    url = start_triad(procs, config, wait_ready=1)
    async with http_session(url) as via:
        tools = {tool["name"]: tool for tool in await all_tools(via)}
        # Policy sees the overridden annotations: `image` is read-only only by its override.
        assert set(tools) == {"say", "image", "rich"}
        say = tools["say"]
        assert (say["title"], say["description"]) == ("Say", "Says it.")
        assert say["annotations"] == {"readOnlyHint": True, "destructiveHint": False}  # merged over the upstream's
        assert say["_meta"] == {"fixture/kind": "echo"} and say["icons"]  # the rest as the upstream sent it
        schema = tools["rich"]["inputSchema"]
        assert not {"nickname", "mode", "level"} & set(schema["properties"])
        assert schema["required"] == ["missing_property"] and schema["additionalProperties"] is False

        assert (await call(via, "say", {"text": "hi"}))["content"][0]["text"] == "hi"
        with pytest.raises(MCPError, match="Unknown tool"):
            await call(via, "echo", {"text": "hi"})  # the raw name is not a second way in
        # The upstream echoes what it received: the hidden argument dropped, the fixed ones set whatever was sent.
        sent = {"nickname": "eve", "mode": "slow", "tags": ["a"], "missing_property": 1}
        received = json.loads((await call(via, "rich", sent))["content"][0]["text"])
        assert received == {"level": "high", "mode": "fast", "tags": ["a"], "missing_property": 1}
        received = json.loads((await call(via, "rich", {}))["content"][0]["text"])
        assert received == {"level": "high", "mode": "fast"}
    # Pins hold the definition the clients see.
    approved = json.loads(pins.read_text())["definitions"]["fx:echo"]
    assert approved["description"] == "Says it." and approved["title"] == "Say"


def test_plan_and_search_show_the_overridden_tool(tmp_path: Path) -> None:
    config = overridden(tmp_path)
    done = run_triad("plan", "-c", str(config), "--json")
    assert done.returncode == 0, done.stderr
    visible = {row["name"]: row for row in json.loads(done.stdout)["visible"]}
    assert visible["say"] == {"name": "say", "upstream": "fx", "tool": "echo", "approval": None}
    assert "echo" not in visible
    done = run_triad("search", "-c", str(config), "--json", "says", "it")
    assert done.returncode == 0, done.stderr
    assert "say" in done.stdout


async def test_a_renamed_tools_name_is_kept_and_its_former_name_stays_reserved(procs: list[Proc],
                                                                               tmp_path: Path) -> None:
    config = overridden(tmp_path)
    url = start_triad(procs, config, wait_ready=1)
    async with http_session(url) as via:
        assert "say" in {tool["name"] for tool in await all_tools(via)}
    procs[-1].terminate()
    ledger = json.loads((tmp_path / "triad.names.json").read_text())["tools"]["fx"]
    assert ledger["echo => say"] == "say"

    # A rename to another name: the new name is given, and both former names stay in the ledger.
    config = overridden(tmp_path, {"echo": {"name": "speak"}})
    url = start_triad(procs, config, wait_ready=1)
    async with http_session(url) as via:
        names = {tool["name"] for tool in await all_tools(via)}
        assert "speak" in names and not {"say", "echo"} & names
    procs[-1].terminate()
    ledger = json.loads((tmp_path / "triad.names.json").read_text())["tools"]["fx"]
    assert ledger["echo => speak"] == "speak" and ledger["echo => say"] == "say"

    # Without the override the tool gets its first name back.
    config = overridden(tmp_path, {})
    url = start_triad(procs, config, wait_ready=1)
    async with http_session(url) as via:
        names = {tool["name"] for tool in await all_tools(via)}
        assert "echo" in names and not {"say", "speak"} & names


async def test_a_reload_applies_changed_overrides_without_restarting_the_upstream(procs: list[Proc],
                                                                                   tmp_path: Path) -> None:
    config = overridden(tmp_path)
    url = start_triad(procs, config, wait_ready=1)
    changes = ListChanges()
    async with http_session(url, message_handler=changes) as via:
        assert "say" in {tool["name"] for tool in await all_tools(via)}
        content = yaml.safe_load(config.read_text())
        content["upstreams"]["fx"]["tools"]["overrides"] = {"echo": {"name": "speak"},
                                                            "rich": {"fixed_arguments": {"mode": "slow"}}}
        changes.event = anyio.Event()
        rewrite(config, content)
        with anyio.fail_after(60):
            while "speak" not in (names := {tool["name"] for tool in await all_tools(via)}):
                await changes.event.wait()
                changes.event = anyio.Event()
        assert "say" not in names
        received = json.loads((await call(via, "rich", {"nickname": "eve"}))["content"][0]["text"])
        assert received == {"mode": "slow", "nickname": "eve"}  # no longer hidden; the new fixed value
    assert "upstream fx: new connection settings" not in procs[-1].stderr  # the same child serves on


def test_check_refuses_bad_overrides(tmp_path: Path) -> None:
    cases = [
        ({"echo": {"name": "say"}, "image": {"name": "Say"}}, "both rename to"),
        ({"echo": {"name": "not a name"}}, "upstreams.fx.tools.overrides.echo.name"),
        ({"echo": {"annotations": {"readOnly": True}}}, "upstreams.fx.tools.overrides.echo.annotations.readOnly"),
        ({"echo": {"hide": ["text"]}}, "upstreams.fx.tools.overrides.echo.hide"),
    ]
    for overrides, message in cases:
        done = run_triad("check", "-c", str(overridden(tmp_path, overrides)))
        assert done.returncode != 0 and message in done.stderr + done.stdout, (overrides, done.stderr)
    done = run_triad("check", "-c", str(overridden(tmp_path)))
    assert done.returncode == 0, done.stderr
