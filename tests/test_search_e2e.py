"""Tool search end to end: `tools_mode: search` clients of both eras over HTTP and over stdio, policy and run-level
lists through `search_tools` and `call_tool`, hooks and audit, `triad search`, and a reload."""

from __future__ import annotations

import json
import os
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import anyio
import mcp_types as types
import pytest
import yaml
from mcp import Client, ClientSession
from mcp.shared.exceptions import MCPError

from tests.conftest import TRIAD, Proc, start_triad, stdio_upstream, write_config
from tests.test_gateway_e2e import RAW, ListChanges, all_tools, call, http_session, triad_stdio_session
from tests.test_policy_e2e import session_as

pytestmark = pytest.mark.anyio

LISTER_TOKEN = "lister-secret-1234567890"


def search_config(tmp_path: Path) -> dict[str, Any]:
    return {
        "upstreams": {"fx": stdio_upstream("srch-fx"), "gx": stdio_upstream("srch-gx")},
        "clients": {
            "finder": {"tools_mode": "search", "always_list": ["fx__echo"], "tools": {"deny": ["*slow*"]}},
            "lister": {"token": LISTER_TOKEN},
        },
        "anonymous": "finder",
        "hooks": [{"audit": {"path": str(tmp_path / "audit.jsonl")}}],
    }


@pytest.fixture(scope="module")
def triad(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, Path, Path]]:
    """One Triad: (URL, config file, audit file). Unauthenticated requests act as `finder` (search mode)."""
    tmp = tmp_path_factory.mktemp("search")
    config = write_config(tmp, search_config(tmp))
    procs: list[Proc] = []
    url = start_triad(procs, config, wait_ready=2)
    yield url, config, tmp / "audit.jsonl"
    for proc in procs:
        proc.terminate()


async def search(session: ClientSession, query: str, meta: dict[str, Any] | None = None,
                 **arguments: Any) -> dict[str, Any]:
    params = {"name": "search_tools", "arguments": {"query": query, **arguments}, **({"_meta": meta} if meta else {})}
    request = types.CallToolRequest(params=types.CallToolRequestParams.model_validate(params, by_name=False))
    return await session.send_request(request, RAW)


async def call_through(session: ClientSession, name: str, arguments: dict[str, Any],
                       meta: dict[str, Any] | None = None) -> dict[str, Any]:
    params = {"name": "call_tool", "arguments": {"name": name, "arguments": arguments},
              **({"_meta": meta} if meta else {})}
    request = types.CallToolRequest(params=types.CallToolRequestParams.model_validate(params, by_name=False))
    return await session.send_request(request, RAW)


def found(result: dict[str, Any]) -> list[str]:
    return [tool["name"] for tool in result["structuredContent"]["tools"]]


async def test_a_search_client_lists_its_always_listed_tools_and_the_two_triad_tools(triad: Any) -> None:
    url, _, _ = triad
    async with http_session(url) as finder, session_as(url, LISTER_TOKEN) as lister:
        assert {t["name"] for t in await all_tools(finder)} == {"fx__echo", "search_tools", "call_tool"}
        listed = {t["name"] for t in await all_tools(lister)}
        assert {"fx__slow", "gx__echo"} <= listed and not {"search_tools", "call_tool"} & listed


async def test_search_finds_a_visible_tool_with_its_schema(triad: Any) -> None:
    url, _, _ = triad
    async with http_session(url) as finder:
        result = await search(finder, "ask the user a question", limit=2)
        assert set(found(result)) == {"fx__ask", "gx__ask"}
        first = result["structuredContent"]["tools"][0]
        assert first["description"] == "Asks the user (elicitation)."
        assert first["inputSchema"]["properties"]["question"] == {"type": "string"}
        assert json.loads(result["content"][0]["text"]) == result["structuredContent"]


async def test_every_hit_carries_its_title_from_either_place(triad: Any) -> None:
    url, _, _ = triad
    async with http_session(url) as finder, session_as(url, LISTER_TOKEN) as lister:
        listed = {t["name"]: t for t in await all_tools(lister)}
        hits = (await search(finder, "echo the text or ask the user a question", limit=10))["structuredContent"]
        titled = {"fx__echo": "Echo", "gx__echo": "Echo", "fx__ask": "Ask the user", "gx__ask": "Ask the user"}
        assert set(titled) <= {hit["name"] for hit in hits["tools"]}
        for hit in hits["tools"]:
            wire = listed[hit["name"]]
            assert hit.get("title") == wire.get("title", (wire.get("annotations") or {}).get("title")), hit
            assert hit.get("title") == titled.get(hit["name"]), hit


async def test_a_found_tool_is_callable_directly_and_through_call_tool(triad: Any) -> None:
    url, _, _ = triad
    async with http_session(url) as finder:
        assert (await call(finder, "gx__structured", {"n": 4}))["structuredContent"] == {"double": 8}
        result = await call_through(finder, "gx__echo", {"text": "via call_tool"})
        assert result["content"][0]["text"] == "via call_tool"


async def test_hidden_tools_are_never_found_named_or_callable(triad: Any) -> None:
    url, _, _ = triad
    async with http_session(url) as finder:
        assert found(await search(finder, "sleeps")) == []  # not found, not counted: nothing else says "sleeps"
        assert not any("slow" in name for name in found(await search(finder, "slow sleeps seconds", limit=50)))
        errors = []
        for attempt in (call_through(finder, "fx__slow", {"seconds": 0}), call(finder, "fx__slow", {"seconds": 0}),
                        call_through(finder, "fx__nothing", {})):
            with pytest.raises(MCPError) as raised:
                await attempt
            errors.append((raised.value.error.code, raised.value.error.message.replace("nothing", "slow")))
        assert errors[0] == errors[1] == errors[2] == (-32602, "Unknown tool: fx__slow")


async def test_run_level_lists_narrow_search_and_call_tool(triad: Any) -> None:
    url, _, _ = triad
    only_gx = {"triad/tools": ["gx__*"]}
    async with http_session(url) as finder:
        names = found(await search(finder, "echo the text", only_gx, limit=50))
        assert "gx__echo" in names and all(name.startswith("gx__") for name in names)
        with pytest.raises(MCPError) as raised:
            await call_through(finder, "fx__echo", {"text": "no"}, only_gx)
        assert raised.value.error.message == "Unknown tool: fx__echo"
        assert (await call_through(finder, "gx__echo", {"text": "yes"}, only_gx))["content"][0]["text"] == "yes"


async def test_call_tool_is_audited_as_the_tool_it_calls_and_search_as_search_tools(triad: Any) -> None:
    url, _, audit = triad
    async with http_session(url) as finder:
        await search(finder, "image")
        await call_through(finder, "fx__image", {})
        with pytest.raises(MCPError):
            await call_through(finder, "gx__slow", {"seconds": 0})
    records = [json.loads(line) for line in audit.read_text().splitlines()]
    mine = [r for r in records if r["name"] in ("search_tools", "fx__image", "gx__slow", "call_tool")]
    assert not any(r["name"] == "call_tool" for r in mine)
    assert any(r["name"] == "search_tools" and r["upstream"] == "" and r["outcome"] == "ok" for r in mine)
    assert any(r["name"] == "fx__image" and r["upstream"] == "fx" and r["raw"] == "image" for r in mine)
    assert any(r["name"] == "gx__slow" and r.get("decision") == "denied" for r in mine), mine


async def test_bad_search_arguments_are_tool_errors_the_model_can_correct(triad: Any) -> None:
    url, _, _ = triad
    async with http_session(url) as finder:
        for arguments in ({"limit": 0}, {"limit": 51}, {"limit": "5"}):
            result = await search(finder, "echo", **arguments)
            assert result["isError"] is True and "limit" in result["content"][0]["text"]
        result = await search(finder, " ")
        assert result["isError"] is True and "query" in result["content"][0]["text"]
        result = await call_through(finder, "fx__echo", "not an object")  # type: ignore[arg-type]
        assert result["isError"] is True


async def test_a_2026_client_searches_and_calls_through_call_tool(triad: Any) -> None:
    url, _, _ = triad
    async with Client(url, mode="2026-07-28", cache=None) as client:
        assert {t.name for t in (await client.list_tools()).tools} == {"fx__echo", "search_tools", "call_tool"}
        result = await client.call_tool("search_tools", {"query": "structured output", "limit": 1})
        assert result.structured_content is not None
        [tool] = result.structured_content["tools"]
        assert tool["name"] in ("fx__structured", "gx__structured")  # the same definition: a tie either way
        assert tool["inputSchema"] == {"type": "object", "properties": {"n": {"type": "integer"}}}
        called = await client.call_tool("call_tool", {"name": "fx__echo", "arguments": {"text": "2026"}})
        assert called.content[0].text == "2026"  # type: ignore[union-attr]


async def test_a_stdio_client_in_search_mode(triad: Any) -> None:
    _, config, _ = triad
    async with triad_stdio_session(config, "--client", "finder") as session:
        assert {t["name"] for t in await all_tools(session)} == {"fx__echo", "search_tools", "call_tool"}
        assert "fx__link" in found(await search(session, "resource link"))
        assert (await call_through(session, "fx__echo", {"text": "stdio"}))["content"][0]["text"] == "stdio"


def test_triad_search_prints_a_clients_matches_with_scores(triad: Any) -> None:
    _, config, _ = triad

    def run(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([*TRIAD, "search", "-c", str(config), *args], capture_output=True, text=True,
                              timeout=120)

    lister = run("--client", "lister", "--json", "sleeps")
    assert lister.returncode == 0, lister.stderr
    report = json.loads(lister.stdout)
    assert {r["name"] for r in report["results"]} == {"fx__slow", "gx__slow"}
    assert all(r["score"] > 0 for r in report["results"])
    finder = run("--client", "finder", "sleeps")
    assert finder.returncode == 1 and "0 of" in finder.stdout and "slow" not in finder.stdout
    text = run("--client", "finder", "--limit", "1", "echo")
    assert text.returncode == 0 and "echo" in text.stdout
    assert run("--client", "nobody", "echo").returncode == 2


async def test_a_reload_rebuilds_the_index_and_a_new_always_listed_tool_is_announced(procs: list[Proc],
                                                                                    tmp_path: Path) -> None:
    base = {"upstreams": {"fx": stdio_upstream("srch-rl-fx")}, "search": {"tools_mode": "search"}}
    path = write_config(tmp_path, base)
    url = start_triad(procs, path, wait_ready=1)
    changes = ListChanges()
    async with http_session(url, message_handler=changes) as session:
        assert {t["name"] for t in await all_tools(session)} == {"search_tools", "call_tool"}
        assert found(await search(session, "sleeps")) == ["slow"]  # one upstream: names are not prefixed
        changes.event = anyio.Event()
        _rewrite(path, {"upstreams": {"fx": stdio_upstream("srch-rl-fx"), "gx": stdio_upstream("srch-rl-gx")},
                        "search": {"tools_mode": "search", "always_list": ["gx__echo"]}})
        with anyio.fail_after(60):
            while "gx__echo" not in {t["name"] for t in await all_tools(session)}:
                await changes.event.wait()
                changes.event = anyio.Event()
        assert set(found(await search(session, "sleeps"))) == {"fx__slow", "gx__slow"}
        _rewrite(path, {"upstreams": {"gx": stdio_upstream("srch-rl-gx")},
                        "naming": {"prefix": "always"}, "search": {"tools_mode": "search"}})
        with anyio.fail_after(60):
            while "gx__echo" in {t["name"] for t in await all_tools(session)}:
                await changes.event.wait()
                changes.event = anyio.Event()
        assert found(await search(session, "sleeps")) == ["gx__slow"]


def _rewrite(path: Path, config: dict[str, Any]) -> None:
    temporary = path.with_name(path.name + ".tmp")
    temporary.write_text(yaml.safe_dump(config, sort_keys=False))
    os.replace(temporary, path)


async def test_an_upstream_tool_named_like_triads_own_gets_another_name(procs: list[Proc], tmp_path: Path) -> None:
    """One upstream, names unprefixed, a tool renamed `search_tools`: it is exposed as `search_tools-2` to every
    client (whatever its mode), so `search_tools` is always Triad's and the upstream's stays reachable."""
    upstream = {**stdio_upstream("srch-own-fx"), "tools": {"overrides": {"echo": {"name": "search_tools"}}}}
    path = write_config(tmp_path, {"upstreams": {"fx": upstream}, "anonymous": "finder",
                                   "clients": {"finder": {"tools_mode": "search"}, "lister": {"token": LISTER_TOKEN}}})
    url = start_triad(procs, path, wait_ready=1)
    async with http_session(url) as session:
        assert found(await search(session, "echo the text"))[0] == "search_tools-2"
        assert "structuredContent" in await search(session, "sleeps")  # Triad's own search, not the upstream's echo
        echoed = await session.send_request(types.CallToolRequest(params=types.CallToolRequestParams(
            name="search_tools-2", arguments={"text": "mine"})), RAW)
        assert echoed["content"][0]["text"] == "mine"
    async with session_as(url, LISTER_TOKEN) as lister:
        names = {t["name"] for t in await all_tools(lister)}
        assert "search_tools-2" in names and "search_tools" not in names
