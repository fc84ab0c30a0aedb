"""The three roles end to end: real upstreams (stdio, streamable HTTP, SSE, server-everything) behind `triad`,
driven by the Python SDK client (HTTP and stdio) and the TypeScript SDK client."""

from __future__ import annotations

import json
import subprocess
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import anyio
import httpx2
import mcp_types as types
import pytest
from mcp import ClientSession, StdioServerParameters, stdio_client
from mcp.client.streamable_http import streamable_http_client
from mcp.shared.exceptions import MCPError
from pydantic import TypeAdapter

from tests.conftest import (
    NODE_DIR,
    PYTHON,
    ROOT,
    Proc,
    node_bin,
    start_fixture,
    start_triad,
    stdio_upstream,
    write_config,
)
from tests.servers.fixture_upstream import LONG_NAME, TOOL_COUNT

pytestmark = pytest.mark.anyio
RAW = TypeAdapter(dict[str, Any])


@asynccontextmanager
async def http_session(url: str, **kwargs: Any) -> AsyncIterator[ClientSession]:
    async with streamable_http_client(url) as (read, write), ClientSession(read, write, **kwargs) as session:
        await session.initialize()
        yield session


class ListChanges:
    """A message handler that remembers `tools/list_changed`; `wait_for_tools(n)` lists until n tools are there."""

    def __init__(self) -> None:
        self.event = anyio.Event()
        self.count = 0

    async def __call__(self, message: Any) -> None:
        if isinstance(message, types.ToolListChangedNotification):
            self.count += 1
            self.event.set()

    async def wait_for_tools(self, session: ClientSession, n: int) -> list[dict[str, Any]]:
        with anyio.fail_after(60):
            while True:
                self.event = anyio.Event()  # reset before listing, so a change after the list still wakes us
                if len(tools := await all_tools(session)) >= n:
                    return tools
                await self.event.wait()


@asynccontextmanager
async def triad_stdio_session(config: Path, *extra: str, **kwargs: Any) -> AsyncIterator[ClientSession]:
    params = StdioServerParameters(command=PYTHON, args=["-m", "gateway.cli", "stdio", "-c", str(config), *extra],
                                   cwd=str(ROOT))
    async with stdio_client(params) as (read, write), ClientSession(read, write, **kwargs) as session:
        await session.initialize()
        yield session


async def call(session: ClientSession, name: str, arguments: dict[str, Any] | None = None) -> dict[str, Any]:
    request = types.CallToolRequest(params=types.CallToolRequestParams(name=name, arguments=arguments or {}))
    return await session.send_request(request, RAW)


async def all_tools(session: ClientSession) -> list[dict[str, Any]]:
    tools: list[dict[str, Any]] = []
    cursor = None
    while True:
        params = types.PaginatedRequestParams(cursor=cursor) if cursor else None
        page = await session.send_request(types.ListToolsRequest(params=params), RAW)
        tools += page["tools"]
        if not (cursor := page.get("nextCursor")):
            return tools


WIRE_CASES: list[tuple[str, dict[str, Any]]] = [
    ("echo", {"text": "hi"}), ("image", {}), ("audio", {}), ("embedded", {}), ("link", {}),
    ("structured", {"n": 21}), ("fail", {}),
]


async def test_results_through_triad_equal_the_upstreams_own(procs: list[Proc], tmp_path: Path) -> None:
    upstream = start_fixture(procs, "http", "wire")
    config = write_config(tmp_path, {"upstreams": {"fx": {"url": upstream}}, "naming": {"prefix": "never"}})
    url = start_triad(procs, config, wait_ready=1)
    async with http_session(upstream) as direct, http_session(url) as via:
        for name, arguments in WIRE_CASES:
            through = await call(via, name, arguments)
            if name == "echo":
                # Triad asks every upstream for progress (its own token on its own hop) so that progress can push
                # a call's deadline back; the echo fixture reports the _meta it received, so drop that token.
                assert isinstance(through["_meta"]["fixture/received-meta"].pop("progressToken"), int | str)
            assert through == await call(direct, name, arguments), name
        for uri in ("fixture://static", "fixture://blob", "fixture://items/42"):
            request = types.ReadResourceRequest(params=types.ReadResourceRequestParams(uri=uri))
            assert await via.send_request(request, RAW) == await direct.send_request(request, RAW), uri
        prompt = types.GetPromptRequest(params=types.GetPromptRequestParams(name="greet", arguments={"who": "Ada"}))
        assert await via.send_request(prompt, RAW) == await direct.send_request(prompt, RAW)
        by_name = {t["name"]: t for t in await all_tools(direct)}
        shortened = {**by_name.pop(LONG_NAME), "name": LONG_NAME[:64]}  # cut to the 64-character limit
        assert {t["name"]: t for t in await all_tools(via)} == {**by_name, LONG_NAME[:64]: shortened}
        echo = by_name["echo"]  # title, annotations, icons, _meta, outputSchema all survive the hop
        assert echo["icons"] and echo["_meta"] == {"fixture/kind": "echo"} and echo["title"] == "Echo"
        assert "outputSchema" in by_name["structured"]


async def test_structured_result_is_not_revalidated(procs: list[Proc], tmp_path: Path) -> None:
    # The upstream's outputSchema is forwarded as is and results are never checked against it on the way.
    upstream = start_fixture(procs, "http", "structured")
    config = write_config(tmp_path, {"upstreams": {"fx": {"url": upstream}}})
    url = start_triad(procs, config, wait_ready=1)
    async with http_session(url) as via:
        result = await call(via, "structured", {"n": 4})
        assert result["structuredContent"] == {"double": 8}


async def test_pagination_upstream_pages_of_3_and_downstream_pages_of_2(procs: list[Proc], tmp_path: Path) -> None:
    upstream = start_fixture(procs, "http", "paged", "--page-size", "3", "--extra-tools", "6")
    config = write_config(tmp_path, {"upstreams": {"fx": {"url": upstream}}, "page_size": 2})
    url = start_triad(procs, config, wait_ready=1)
    async with http_session(upstream) as direct, http_session(url) as via:
        first = await via.send_request(types.ListToolsRequest(), RAW)
        assert len(first["tools"]) == 2 and "nextCursor" in first
        via_names = [t["name"] for t in await all_tools(via)]
        direct_names = [t["name"] for t in await all_tools(direct)]
        assert len(direct_names) == TOOL_COUNT + 6
        expected = sorted(n[:64] for n in direct_names)  # the one 70-character name is cut to 64
        assert sorted(via_names) == expected and len(set(via_names)) == len(via_names)
        templates = await via.send_request(types.ListResourceTemplatesRequest(), RAW)
        assert [t["uriTemplate"] for t in templates["resourceTemplates"]] == ["fixture://items/{id}"]
        with pytest.raises(MCPError) as raised:
            await via.send_request(types.ListToolsRequest(params=types.PaginatedRequestParams(cursor="bogus")), RAW)
        assert raised.value.error.code == types.INVALID_PARAMS and "cursor" in raised.value.error.message


async def test_every_transport_behind_one_stdio_exposer(procs: list[Proc], tmp_path: Path) -> None:
    http_url = start_fixture(procs, "http", "t-http")
    sse_url = start_fixture(procs, "sse", "t-sse")
    config = write_config(tmp_path, {"upstreams": {
        "viastdio": stdio_upstream("t-stdio"),
        "viahttp": {"url": http_url},
        "viasse": {"url": sse_url},
    }})
    changes = ListChanges()
    async with triad_stdio_session(config, message_handler=changes) as session:
        await changes.wait_for_tools(session, 3 * TOOL_COUNT)  # list_changed says when they are up
        for upstream in ("viastdio", "viahttp", "viasse"):
            result = await call(session, f"{upstream}__echo", {"text": upstream})
            assert result["content"][0]["text"] == upstream
            assert result["_meta"]["fixture/upstream"].endswith(f"t-{upstream.removeprefix('via')}")
        read = await session.read_resource("fixture://viasse/static")
        assert read.contents[0].text.endswith("t-sse")
        assert str(read.contents[0].uri) == "fixture://viasse/static"
        item = await session.read_resource("fixture://viahttp/items/7")
        assert item.contents[0].text == "item 7"
        prompt = await session.get_prompt("viastdio__greet", {"who": "Ada"})
        assert prompt.messages[0].content.text == "Hello, Ada!"  # type: ignore[union-attr]


async def test_unknown_tool_is_an_invalid_params_error_and_never_forwarded(procs: list[Proc], tmp_path: Path) -> None:
    config = write_config(tmp_path, {"upstreams": {"fx": stdio_upstream("unknown"), "gx": stdio_upstream("unk-2")}})
    url = start_triad(procs, config, wait_ready=2)
    async with http_session(url) as via:
        for name in ("nope", "fx__nope", "echo"):  # "echo" is the raw name: only the exposed name is callable
            with pytest.raises(MCPError) as raised:
                await call(via, name)
            assert raised.value.error.code == types.INVALID_PARAMS
            assert raised.value.error.message == f"Unknown tool: {name}"
        with pytest.raises(MCPError) as raised:
            await via.get_prompt("nope")
        assert raised.value.error.code == types.INVALID_PARAMS
        with pytest.raises(MCPError) as raised:
            await via.read_resource("fixture://other/static")
        assert raised.value.error.message == "Unknown resource: fixture://other/static"
        assert (await via.read_resource("fixture://gx/static")).contents[0].text.endswith("unk-2")  # type: ignore


async def test_name_collisions_and_long_names(procs: list[Proc], tmp_path: Path) -> None:
    config = write_config(tmp_path, {"upstreams": {"one": stdio_upstream("col-1"), "two": stdio_upstream("col-2")},
                                     "naming": {"prefix": "never"}})
    url = start_triad(procs, config, wait_ready=2)
    async with http_session(url) as via:
        names = {t["name"] for t in await all_tools(via)}
        assert {"echo", "echo-2"} <= names
        long_names = [n for n in names if n.startswith("a_tool_with")]
        assert sorted(long_names) == [LONG_NAME[:62] + "-2", LONG_NAME[:64]]
        assert all(len(n) <= 64 for n in names)
        first = await call(via, "echo", {"text": "x"})
        second = await call(via, "echo-2", {"text": "x"})
        assert {first["_meta"]["fixture/upstream"][-5:], second["_meta"]["fixture/upstream"][-5:]} == {"col-1", "col-2"}
        assert (await call(via, LONG_NAME[:64]))["content"][0]["text"] == f"called {LONG_NAME}"


async def test_progress_is_relayed_to_the_caller(procs: list[Proc], tmp_path: Path) -> None:
    config = write_config(tmp_path, {"upstreams": {"fx": stdio_upstream("progress")}})
    url = start_triad(procs, config, wait_ready=1)
    seen: list[tuple[float, float | None, str | None]] = []

    async def on_progress(progress: float, total: float | None, message: str | None) -> None:
        seen.append((progress, total, message))

    async with http_session(url) as via:
        result = await via.call_tool("progress", {"steps": 3}, progress_callback=on_progress)
    assert result.content[0].text == "3 steps"  # type: ignore[union-attr]
    assert seen == [(1, 3, "step 1"), (2, 3, "step 2"), (3, 3, "step 3")]


async def test_server_everything_through_triad_equals_direct(procs: list[Proc], tmp_path: Path) -> None:
    node_bin()
    everything = str(NODE_DIR / "node_modules" / ".bin" / "mcp-server-everything")
    config = write_config(tmp_path, {"upstreams": {"everything": {"command": everything, "args": ["stdio"]}},
                                     "naming": {"prefix": "never"}})
    url = start_triad(procs, config, wait_ready=1)
    direct_params = StdioServerParameters(command=everything, args=["stdio"])

    async def unused(*_args: Any) -> types.ErrorData:
        return types.ErrorData(code=types.INVALID_REQUEST, message="not in this test")

    # Triad's shared session offers sampling and elicitation to its upstreams (it relays them to the caller), but
    # no roots (it never hands one client's roots to another; `roots:` would set its own), and server-everything
    # lists tools by what its client offers: the direct session offers the same.
    async with (stdio_client(direct_params) as (read, write),
                ClientSession(read, write, sampling_callback=unused, elicitation_callback=unused) as direct,
                http_session(url) as via):
        await direct.initialize()
        direct_tools = {t["name"]: t for t in await all_tools(direct)}
        # A tool that runs only as a task is hidden from a client that takes no tasks (the SDK's client declares none).
        as_tasks = {name for name, t in direct_tools.items() if (t.get("execution") or {}).get("taskSupport")
                    == "required"}
        assert {t["name"]: t for t in await all_tools(via)} == {n: t for n, t in direct_tools.items()
                                                                 if n not in as_tasks}
        for name, arguments in [("echo", {"message": "hi"}), ("get-sum", {"a": 1, "b": 2}), ("get-tiny-image", {}),
                                ("get-structured-content", {"location": "New York"}),
                                ("get-annotated-message", {"messageType": "error", "includeImage": True}),
                                ("get-resource-links", {"count": 2}), ("get-resource-reference", {})]:
            if name in direct_tools:
                assert await call(via, name, arguments) == await call(direct, name, arguments), name
        prompt = types.GetPromptRequest(params=types.GetPromptRequestParams(name="simple-prompt"))
        assert await via.send_request(prompt, RAW) == await direct.send_request(prompt, RAW)
        resources = await direct.send_request(types.ListResourcesRequest(), RAW)
        first_uri = resources["resources"][0]["uri"]
        read = types.ReadResourceRequest(params=types.ReadResourceRequestParams(uri=first_uri))
        assert await via.send_request(read, RAW) == await direct.send_request(read, RAW)


def test_typescript_sdk_client_through_triad(procs: list[Proc], tmp_path: Path) -> None:
    node = node_bin()
    config = write_config(tmp_path, {"upstreams": {"a": stdio_upstream("ts-a"), "b": stdio_upstream("ts-b")}})
    url = start_triad(procs, config, wait_ready=2)
    done = subprocess.run([node, str(NODE_DIR / "client.mjs"), url, "b__echo", '{"text": "from node"}'],
                          capture_output=True, text=True, timeout=60, cwd=NODE_DIR)
    assert done.returncode == 0, done.stderr
    out = json.loads(done.stdout)
    assert out["serverInfo"]["name"] == "triad"
    assert "a__echo" in out["tools"] and "b__echo" in out["tools"]
    assert out["result"]["content"] == [{"type": "text", "text": "from node",
                                         "annotations": {"audience": ["user"], "priority": 0.5}}]


async def test_legacy_sse_clients_and_completion_through_triad(procs: list[Proc], tmp_path: Path) -> None:
    from mcp.client.sse import sse_client

    config = write_config(tmp_path, {"upstreams": {"fx": stdio_upstream("sse-exposer")}})
    url = start_triad(procs, config, wait_ready=1)
    async with sse_client(url.replace("/mcp", "/sse")) as (read, write), ClientSession(read, write) as session:
        await session.initialize()
        assert (await call(session, "echo", {"text": "over sse"}))["content"][0]["text"] == "over sse"
        completion = await session.complete(types.PromptReference(name="greet"), {"name": "who", "value": "a"})
        assert completion.completion.values == ["alpha", "beta"]


async def test_the_claude_desktop_entry_from_the_readme(tmp_path: Path) -> None:
    """`{"command": ".../.venv/bin/triad", "args": ["stdio", "-c", CONFIG]}`, exactly as Claude Desktop runs it."""
    triad = Path(PYTHON).parent / "triad"
    assert triad.exists(), f"the console script is missing next to {PYTHON}: pip install -e . (make does it)"
    config = write_config(tmp_path, {"upstreams": {"fx": stdio_upstream("claude-desktop")}})
    params = StdioServerParameters(command=str(triad), args=["stdio", "-c", str(config)])
    changes = ListChanges()
    async with stdio_client(params) as (read, write), ClientSession(read, write, message_handler=changes) as session:
        init = await session.initialize()
        assert init.server_info.name == "triad"
        await changes.wait_for_tools(session, TOOL_COUNT)
        assert (await call(session, "echo", {"text": "from Claude"}))["content"][0]["text"] == "from Claude"


async def test_unprefixed_reads_route_by_listed_uri_and_by_template(procs: list[Proc], tmp_path: Path) -> None:
    """With prefixing off and several upstreams, a URI routes to the upstream that lists it or whose template
    matches it."""
    config = write_config(tmp_path, {"upstreams": {"one": stdio_upstream("route-1"),
                                                   "two": stdio_upstream("route-2", "--prefix", "b_")},
                                     "naming": {"prefix": "never"}})
    url = start_triad(procs, config, wait_ready=2)
    async with http_session(url) as via:
        item = await via.read_resource("fixture://items/9")
        assert item.contents[0].text == "item 9"  # type: ignore[union-attr]
        static = await via.read_resource("fixture://static")
        assert static.contents[0].text.endswith("route-1")  # type: ignore[union-attr]


async def test_list_pages_served_from_bytes_equal_the_sdks(procs: list[Proc], tmp_path: Path) -> None:
    """A plain 2025-11-25 list on a session is answered from pages serialised once (plain JSON); the same list
    with a run-level list in `_meta` goes through the SDK (SSE). The tools are the same either way."""
    upstream = start_fixture(procs, "http", "fast-lists")
    config = write_config(tmp_path, {"upstreams": {"fx": {"url": upstream}}, "naming": {"prefix": "never"},
                                     "listen": {"direct_path": True}})  # a property of the direct path itself
    url = start_triad(procs, config, wait_ready=1)
    headers = {"content-type": "application/json", "accept": "application/json, text/event-stream"}
    async with httpx2.AsyncClient(timeout=30) as http:
        hello = {"protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name": "raw", "version": "1"}}
        opened = await http.post(url, headers=headers,
                                 json={"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": hello})
        headers |= {"mcp-session-id": opened.headers["mcp-session-id"], "mcp-protocol-version": "2025-11-25"}
        await http.post(url, headers=headers, json={"jsonrpc": "2.0", "method": "notifications/initialized"})
        fast = await http.post(url, headers=headers, json={"jsonrpc": "2.0", "id": 2, "method": "tools/list"})
        slow = await http.post(url, headers=headers, json={"jsonrpc": "2.0", "id": 3, "method": "tools/list",
                                                           "params": {"_meta": {"triad/tools": ["*"]}}})
    assert fast.headers["content-type"] == "application/json"
    assert slow.headers["content-type"].startswith("text/event-stream")
    through_sdk = json.loads(next(line[5:] for line in slow.text.splitlines() if line.startswith("data:")))
    assert fast.json()["id"] == 2 and fast.json()["result"] == through_sdk["result"]
    assert "echo" in [tool["name"] for tool in fast.json()["result"]["tools"]]


async def test_a_call_right_after_initialize_waits_for_an_upstream_still_starting(tmp_path: Path) -> None:
    """`triad stdio` answers `initialize` at once; a first call, read or prompt get waits for the upstreams' first
    connection attempt instead of answering `Unknown tool` (here the upstream starts only when the file exists)."""
    gate = tmp_path / "start"
    config = write_config(tmp_path, {"upstreams": {"fx": stdio_upstream("slow-start", "--start-when", str(gate))}})
    async with triad_stdio_session(config) as session, anyio.create_task_group() as tg:
        results: list[dict[str, Any]] = []

        async def first_call() -> None:
            results.append(await call(session, "echo", {"text": "first"}))

        tg.start_soon(first_call)
        await anyio.sleep(0.5)  # proves that nothing is answered while the upstream is still starting
        assert results == []
        gate.touch()
    assert results[0]["content"][0]["text"] == "first"
