"""Every JSON value a raw upstream sends arrives through Triad as a direct connection gets it: same types (`1` stays
`1`, `-0.0` stays `-0.0`, integers beyond 64 bits stay exact), same fields (`_meta` and unknown keys at every
level), for each pair of upstream transport (stdio, streamable HTTP, SSE) and downstream transport (stdio,
streamable HTTP, SSE).

The upstream is `tests/servers/raw_upstream.py`, written without the SDK; the clients are raw JSON-RPC peers
(`tests/raw_peers.py`). Three instances (one per upstream transport, each with its own tag, so names need no
prefix) sit behind one Triad; each is also reached directly over its own transport, and the two answers are
compared after parsing, with types made explicit (`raw_peers.typed`).
"""

from __future__ import annotations

import itertools
from collections.abc import AsyncIterator
from contextlib import AsyncExitStack, asynccontextmanager
from pathlib import Path
from typing import Any

import anyio
import pytest

from tests.conftest import PYTHON, ROOT, TRIAD, Proc, marker, start_triad, write_config
from tests.raw_peers import Peer, diff, http_peer, sse_peer, stdio_peer

pytestmark = pytest.mark.anyio

RAW = ROOT / "tests" / "servers" / "raw_upstream.py"
TAGS = {"stdio": "o", "http": "h", "sse": "s"}
"""Each upstream transport's instance, by the tag its names carry."""
_ids = itertools.count(1)


def start_raw(procs: list[Proc], transport: str, *extra: str) -> str:
    proc = Proc([PYTHON, str(RAW), "--transport", transport, "--name", marker(f"raw-{transport}"),
                 "--tag", TAGS[transport], *extra])
    procs.append(proc)
    port = proc.wait_for(r"READY (\d+)").group(1)
    return f"http://127.0.0.1:{port}/{'mcp' if transport == 'http' else 'sse'}"


def stdio_command(*extra: str) -> list[str]:
    return [PYTHON, str(RAW), "--name", marker("raw-stdio"), "--tag", TAGS["stdio"], *extra]


def request(method: str, params: dict[str, Any] | None = None) -> dict[str, Any]:
    return {"jsonrpc": "2.0", "id": next(_ids), "method": method, **({"params": params} if params else {})}


def exchanges(tag: str) -> dict[str, dict[str, Any]]:
    """What each instance is asked (fresh ids each time)."""
    return {
        "tools/list": request("tools/list"),
        "tools/call": request("tools/call", {"name": f"numbers_{tag}", "arguments": {"n": 1},
                                             "_meta": {"progressToken": f"p-{tag}", "example.com/n": 1}}),
        "resources/list": request("resources/list"),
        "resources/templates/list": request("resources/templates/list"),
        "resources/read": request("resources/read", {"uri": f"raw://{tag}/item"}),
        "prompts/list": request("prompts/list"),
        "prompts/get": request("prompts/get", {"name": f"greet_{tag}", "arguments": {"who": "Ada"}}),
    }


LISTS = {"tools/list": ("tools", "name"), "resources/list": ("resources", "uri"),
         "resources/templates/list": ("resourceTemplates", "uriTemplate"), "prompts/list": ("prompts", "name")}


def differences(method: str, direct: list[dict[str, Any]], through: list[dict[str, Any]]) -> list[str]:
    """How Triad's messages for one request differ from the direct connection's (ids and progress tokens are each
    connection's own; a merged list holds every upstream's items, and its `_meta` every upstream's keys)."""
    found: list[str] = []
    *direct_notes, direct_answer = direct
    *through_notes, through_answer = through
    if "result" not in through_answer:
        return [f"{method}: Triad answered {through_answer}"]
    want, got = direct_answer["result"], through_answer["result"]
    if method in LISTS:
        key, ident = LISTS[method]
        by_id = {item[ident]: item for item in got.get(key, [])}
        for item in want[key]:
            found += [f"{method}: {line}" for line in diff(item, by_id.get(item[ident]), f"{key}[{item[ident]}]")]
        got_meta = got.get("_meta", {})
        found += [f"{method}: {line}" for line in
                  diff(want.get("_meta", {}), {k: got_meta.get(k) for k in want.get("_meta", {})}, "_meta")]
    else:
        found += [f"{method}: {line}" for line in diff(want, got)]
    direct_params = [{k: v for k, v in n["params"].items() if k != "progressToken"} for n in direct_notes]
    through_params = [{k: v for k, v in n["params"].items() if k != "progressToken"} for n in through_notes
                      if n.get("method") == "notifications/progress"]
    found += [f"{method}: {line}" for line in diff(direct_params, through_params, "progress")]
    return found


@asynccontextmanager
async def direct_peers(urls: dict[str, str]) -> AsyncIterator[dict[str, Peer]]:
    async with AsyncExitStack() as stack:
        yield {"stdio": await stack.enter_async_context(stdio_peer(stdio_command())),
               "http": await stack.enter_async_context(http_peer(urls["http"])),
               "sse": await stack.enter_async_context(sse_peer(urls["sse"]))}


async def compare(through: Peer, direct: dict[str, Peer]) -> list[str]:
    found: list[str] = []
    for transport, peer in direct.items():
        tag = TAGS[transport]
        for (method, theirs), mine in zip(exchanges(tag).items(), exchanges(tag).values(), strict=True):
            found += [f"{transport} upstream: {line}" for line in
                      differences(method, await peer.exchange(theirs), await through.exchange(mine))]
    return found


@pytest.mark.parametrize("downstream", ["stdio", "http", "sse"])
async def test_every_value_of_a_raw_upstream_arrives_unchanged(procs: list[Proc], tmp_path: Path,
                                                              downstream: str) -> None:
    urls = {transport: start_raw(procs, transport) for transport in ("http", "sse")}
    config = write_config(tmp_path, {
        "upstreams": {"o": {"command": PYTHON, "args": stdio_command()[1:]}, "h": {"url": urls["http"]},
                      "s": {"url": urls["sse"], "transport": "sse"}},
        "naming": {"prefix": "never"}})
    async with direct_peers(urls) as direct:
        if downstream == "stdio":
            async with stdio_peer([*TRIAD, "stdio", "-c", str(config)]) as through:
                found = await compare(through, direct)
        else:
            url = start_triad(procs, config, wait_ready=3)
            if downstream == "http":
                async with http_peer(url) as through_http:
                    found = await compare(through_http, direct)
            else:
                async with sse_peer(url.removesuffix("/mcp") + "/sse") as through_sse:
                    found = await compare(through_sse, direct)
    assert not found, "\n".join(found)


async def test_an_upstream_without_templates_is_an_upstream_with_zero_templates(procs: list[Proc],
                                                                               tmp_path: Path) -> None:
    """It offers resources, and answers `resources/templates/list` with -32601 (Method not found)."""
    config = write_config(tmp_path, {"upstreams": {"o": {"command": PYTHON,
                                                         "args": stdio_command("--no-templates")[1:]}}})
    async with http_peer(start_triad(procs, config, wait_ready=1)) as peer:
        [listed] = await peer.exchange(request("tools/list"))
        assert [tool["name"] for tool in listed["result"]["tools"]] == ["echo_o", "numbers_o", "wait_o"]
        [templates] = await peer.exchange(request("resources/templates/list"))
        assert templates["result"]["resourceTemplates"] == []
        [read] = await peer.exchange(request("resources/read", {"uri": "raw://o/item"}))
        assert read["result"]["contents"][0]["text"] == "item"


@pytest.mark.parametrize("upstream", ["stdio", "http"])
async def test_a_clients_cancellation_reason_reaches_the_upstream(procs: list[Proc], tmp_path: Path,
                                                                  upstream: str) -> None:
    """Over the SDK's session (stdio) and the direct path (http); the client on streamable HTTP."""
    tag = TAGS[upstream]
    settings = {"command": PYTHON, "args": stdio_command()[1:]} if upstream == "stdio" else \
        {"url": start_raw(procs, "http")}
    url = start_triad(procs, write_config(tmp_path, {"upstreams": {tag: settings}}), wait_ready=1)
    watched = procs[-1] if upstream == "stdio" else procs[-2]  # a stdio child's stderr goes to Triad's log
    async with http_peer(url) as peer, anyio.create_task_group() as tg:
        call = request("tools/call", {"name": f"wait_{tag}", "arguments": {}})
        tg.start_soon(peer.post, call)
        await watched.until("WAITING")
        response = await peer.post({"jsonrpc": "2.0", "method": "notifications/cancelled",
                                    "params": {"requestId": call["id"], "reason": "the user pressed stop"}})
        assert response.status_code == 202
        await watched.until("CANCELLED the user pressed stop")
        tg.cancel_scope.cancel()


@pytest.mark.parametrize(("downstream", "upstream"), [("stdio", "http"), ("sse", "http"), ("sdk-http", "http"),
                                                      ("sdk-http", "stdio")])
async def test_a_clients_cancellation_reason_reaches_the_upstream_from_every_downstream(
        procs: list[Proc], tmp_path: Path, downstream: str, upstream: str) -> None:
    """The SDK's server cancels a request itself and keeps no reason: Triad keeps it for the upstream's
    cancellation, from `triad stdio`, a legacy SSE session and streamable HTTP served by the SDK's handlers; sent
    by the direct path (http) and by the SDK's session (stdio)."""
    tag = TAGS[upstream]
    settings = {"command": PYTHON, "args": stdio_command()[1:]} if upstream == "stdio" else \
        {"url": start_raw(procs, "http")}
    config = write_config(tmp_path, {"upstreams": {tag: settings},
                                     "listen": {"direct_path": downstream != "sdk-http"}})
    call = request("tools/call", {"name": f"wait_{tag}", "arguments": {}})
    cancel = {"jsonrpc": "2.0", "method": "notifications/cancelled",
              "params": {"requestId": call["id"], "reason": f"stopped on {downstream}"}}
    with anyio.fail_after(60):
        if downstream == "stdio":
            watched = procs[-1]
            async with stdio_peer([*TRIAD, "stdio", "-c", str(config)]) as peer:
                await peer.send(call)
                await watched.until("WAITING")
                await peer.send(cancel)
                await watched.until(f"CANCELLED stopped on {downstream}")
            return
        url = start_triad(procs, config, wait_ready=1)
        watched = procs[-1] if upstream == "stdio" else procs[-2]  # a stdio child's stderr goes to Triad's log
        async with AsyncExitStack() as stack, anyio.create_task_group() as tg:
            peer: Any = await stack.enter_async_context(
                sse_peer(url.removesuffix("/mcp") + "/sse") if downstream == "sse" else http_peer(url))
            tg.start_soon(peer.post, call)
            await watched.until("WAITING")
            await peer.post(cancel)
            await watched.until(f"CANCELLED stopped on {downstream}")
            tg.cancel_scope.cancel()
