"""`sessions: per_client`: each client sees what its own upstream session lists.

`@modelcontextprotocol/server-everything` lists some tools only to clients that declared sampling, elicitation or
roots, and keeps resources a tool call creates per session. Two clients with different capabilities, through
Triad, must see exactly what direct connections with those capabilities see, and only their own session
resources; over stdio (a child per client) and streamable HTTP.
"""

from __future__ import annotations

import json
import socket
from contextlib import AsyncExitStack
from pathlib import Path
from typing import Any

import anyio
import mcp_types as types
import pytest
from mcp import ClientSession, StdioServerParameters
from mcp.client.stdio import stdio_client
from mcp.client.streamable_http import streamable_http_client
from mcp.shared.exceptions import MCPError

from consumers._sdk import declare_as_client
from tests.conftest import NODE_DIR, RUN_MARKER, Proc, node_bin, start_triad, write_config
from tests.test_gateway_e2e import RAW, all_tools

pytestmark = pytest.mark.anyio

EVERYTHING = NODE_DIR / "node_modules" / ".bin" / "mcp-server-everything"


async def unused(*_args: Any) -> types.ErrorData:
    return types.ErrorData(code=types.INVALID_REQUEST, message="not in this test")


async def no_roots(_ctx: Any) -> types.ListRootsResult:
    return types.ListRootsResult(roots=[])


CAPABILITIES: dict[str, dict[str, Any]] = {
    "full": {"sampling_callback": unused, "elicitation_callback": unused, "list_roots_callback": no_roots},
    "form-only": {"elicitation_callback": unused},
    "plain": {},
}
"""Three kinds of client: one that declares sampling, elicitation (form and URL modes) and roots, one that declares
elicitation in form mode only (as the TypeScript SDK's `elicitation: {}` does), one that declares nothing."""
DECLARED = {"form-only": {"elicitation": {"form": {}}}}
"""What a kind of client declares, where the SDK's own declaration differs (it declares both modes)."""


class ListChanges:
    def __init__(self) -> None:
        self.resources = anyio.Event()

    async def __call__(self, message: Any) -> None:
        if isinstance(getattr(message, "root", message), types.ResourceListChangedNotification):
            self.resources.set()


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def start_everything(procs: list[Proc], transport: str) -> dict[str, Any]:
    """server-everything as a `per_client` upstream: its config, and a way to connect to it directly."""
    node = node_bin()
    if transport == "stdio":
        return {"command": str(EVERYTHING), "args": ["stdio", RUN_MARKER], "sessions": "per_client"}
    port = free_port()
    proc = Proc([node, "--require", str(NODE_DIR / "loopback.cjs"), str(EVERYTHING), "streamableHttp", RUN_MARKER],
                env={"PORT": str(port)})
    procs.append(proc)
    proc.wait_for(r"listening on port")
    return {"url": f"http://127.0.0.1:{port}/mcp", "sessions": "per_client"}


def everything_behind_triad(procs: list[Proc], tmp_path: Path, transport: str) -> tuple[dict[str, Any], str]:
    """server-everything (its config, to connect to it directly too), and Triad's URL in front of it."""
    upstream = start_everything(procs, transport)
    config = write_config(tmp_path, {"upstreams": {"everything": upstream}, "naming": {"prefix": "never"}})
    return upstream, start_triad(procs, config, wait_ready=1)


async def connect(stack: AsyncExitStack, target: dict[str, Any], kind: str, message_handler: Any = None
                  ) -> ClientSession:
    """A client of `kind` connected to `target` (a URL, or a stdio command), closed with `stack`."""
    if "url" in target:
        read, write, *_ = await stack.enter_async_context(streamable_http_client(target["url"]))
    else:
        params = StdioServerParameters(command=target["command"], args=target["args"])
        read, write = await stack.enter_async_context(stdio_client(params))
    session = await stack.enter_async_context(ClientSession(read, write, message_handler=message_handler,
                                                            **CAPABILITIES[kind]))
    if kind in DECLARED:
        declare_as_client(session, DECLARED[kind])
    await session.initialize()
    return session


def as_tasks_only(tools: dict[str, dict[str, Any]]) -> set[str]:
    """Tools that run only as tasks: Triad hides them (it does not relay the tasks extension yet)."""
    return {name for name, t in tools.items() if (t.get("execution") or {}).get("taskSupport") == "required"}


async def tools_by_name(session: ClientSession) -> dict[str, dict[str, Any]]:
    return {t["name"]: t for t in await all_tools(session)}


async def error_of(session: ClientSession, name: str) -> str:
    try:
        result = await session.send_request(types.CallToolRequest(params=types.CallToolRequestParams(
            name=name, arguments={})), RAW)
    except Exception as exc:  # the JSON-RPC error the client raises
        return str(exc).replace(name, "<name>")
    return f"no error: {json.dumps(result)}"


@pytest.mark.parametrize("transport", ["stdio", "http"])
async def test_each_client_sees_the_tools_a_direct_connection_would(procs: list[Proc], tmp_path: Path,
                                                                    transport: str) -> None:
    upstream, url = everything_behind_triad(procs, tmp_path, transport)
    via_url = {"url": url}
    with anyio.fail_after(90):
        seen: dict[tuple[str, str], dict[str, dict[str, Any]]] = {}
        for kind in CAPABILITIES:
            for where, target in (("direct", upstream), ("triad", via_url)):
                async with AsyncExitStack() as stack:
                    session = await connect(stack, target, kind)
                    seen[where, kind] = await tools_by_name(session)
                    if where == "triad":
                        hidden = set(seen["direct", "full"]) - set(seen["direct", kind])
                        for name in hidden - as_tasks_only(seen["direct", "full"]):
                            # what a direct connection would not show is not callable either, and its error is
                            # that of a tool that does not exist
                            assert await error_of(session, name) == await error_of(session, "no-such-tool")
    for kind in CAPABILITIES:
        direct = seen["direct", kind]
        assert seen["triad", kind] == {n: t for n, t in direct.items() if n not in as_tasks_only(direct)}, kind
    assert set(seen["triad", "plain"]) < set(seen["triad", "form-only"]) < set(seen["triad", "full"])
    assert {"trigger-sampling-request", "get-roots-list", "trigger-url-elicitation"} <= \
        set(seen["triad", "full"]) - set(seen["triad", "form-only"])


@pytest.mark.parametrize("transport", ["stdio", "http"])
async def test_session_resources_are_listed_to_their_own_client_only(procs: list[Proc], tmp_path: Path,
                                                                     transport: str) -> None:
    _, url = everything_behind_triad(procs, tmp_path, transport)
    with anyio.fail_after(90):
        async with AsyncExitStack() as stack:
            changes = {"ada": ListChanges(), "bob": ListChanges()}
            ada = await connect(stack, {"url": url}, "full", changes["ada"])
            bob = await connect(stack, {"url": url}, "plain", changes["bob"])
            before = await resource_uris(bob)
            made = await ada.send_request(types.CallToolRequest(params=types.CallToolRequestParams(
                name="gzip-file-as-resource", arguments={"name": "ada.gz", "data": "data:text/plain,hello%20ada"})),
                RAW)
            link = made["content"][0]
            assert link["type"] == "resource_link", made
            await changes["ada"].resources.wait()  # the upstream told ada's session; Triad tells ada
            assert link["uri"] in await resource_uris(ada)
            assert link["uri"] not in await resource_uris(bob) and await resource_uris(bob) == before
            assert not changes["bob"].resources.is_set()
            read = await ada.send_request(types.ReadResourceRequest(params=types.ReadResourceRequestParams(
                uri=link["uri"])), RAW)
            assert read["contents"][0]["uri"] == link["uri"] and read["contents"][0].get("blob")
            with pytest.raises(Exception, match=r"not found|Unknown resource"):  # bob's session has no such resource
                await bob.send_request(types.ReadResourceRequest(params=types.ReadResourceRequestParams(
                    uri=link["uri"])), RAW)


async def resource_uris(session: ClientSession) -> set[str]:
    uris: set[str] = set()
    cursor = None
    while True:
        params = types.PaginatedRequestParams(cursor=cursor) if cursor else None
        page = await session.send_request(types.ListResourcesRequest(params=params), RAW)
        uris |= {r["uri"] for r in page["resources"]}
        if not (cursor := page.get("nextCursor")):
            return uris


async def test_tool_search_finds_only_what_the_clients_own_session_lists(procs: list[Proc], tmp_path: Path) -> None:
    """In search mode a client finds, and may call through `call_tool`, only the tools its own session lists."""
    upstream = start_everything(procs, "stdio")
    config = write_config(tmp_path, {"upstreams": {"everything": upstream}, "naming": {"prefix": "never"},
                                     "search": {"tools_mode": "search"}})
    url = start_triad(procs, config, wait_ready=1)

    async def found(session: ClientSession) -> set[str]:
        result = await session.send_request(types.CallToolRequest(params=types.CallToolRequestParams(
            name="search_tools", arguments={"query": "trigger a sampling request from the client", "limit": 50})), RAW)
        return {tool["name"] for tool in result["structuredContent"]["tools"]}

    with anyio.fail_after(90):
        async with AsyncExitStack() as stack:
            full = await connect(stack, {"url": url}, "full")
            plain = await connect(stack, {"url": url}, "plain")
            assert "trigger-sampling-request" in await found(full)
            assert "trigger-sampling-request" not in await found(plain)
            with pytest.raises(MCPError, match=r"^Unknown tool: trigger-sampling-request$"):  # as if it did not exist
                await plain.send_request(types.CallToolRequest(params=types.CallToolRequestParams(
                    name="call_tool", arguments={"name": "trigger-sampling-request", "arguments": {}})), RAW)
