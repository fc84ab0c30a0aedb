"""What rides along a message reaches the other side as it was sent, for every pair of downstream face (`triad stdio`,
legacy SSE, streamable HTTP served by the direct path and by the SDK's handlers) and upstream transport (stdio,
streamable HTTP): an upstream's log notification keeps its `_meta`; a client's `notifications/cancelled` keeps its
`_meta` and a `tools/call`'s params their unknown fields on the way up.

The upstream is `tests/servers/raw_upstream.py` (no SDK): `numbers_<tag>` with `{"log": true}` logs `LOG`, and
`wait_<tag>` prints the params and the cancellation it gets.
"""

from __future__ import annotations

import itertools
import json
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import anyio
import pytest

from tests.conftest import PYTHON, TRIAD, Proc, start_triad, write_config
from tests.raw_peers import Peer, http_peer, sse_peer, stdio_peer
from tests.servers.raw_upstream import LOG
from tests.test_wire_fidelity import TAGS, start_raw, stdio_command

pytestmark = pytest.mark.anyio

DOWNSTREAMS = ["stdio", "sse", "http", "sdk-http"]
PAIRS = list(itertools.product(DOWNSTREAMS, ["stdio", "http"]))
_ids = itertools.count(1)


@asynccontextmanager
async def through(procs: list[Proc], tmp_path: Path, downstream: str, upstream: str) -> AsyncIterator[
        tuple[Peer, Proc]]:
    """A client of Triad on `downstream`, and the process whose stderr shows what the upstream got."""
    tag = TAGS[upstream]
    settings = {"command": PYTHON, "args": stdio_command()[1:]} if upstream == "stdio" else \
        {"url": start_raw(procs, "http")}
    config = write_config(tmp_path, {"upstreams": {tag: settings},
                                     "listen": {"direct_path": downstream != "sdk-http"}})
    if downstream == "stdio":
        async with stdio_peer([*TRIAD, "stdio", "-c", str(config)]) as peer:
            yield peer, procs[-1] if upstream == "http" else _StdioChild()
        return
    url = start_triad(procs, config, wait_ready=1)
    watched = procs[-1] if upstream == "stdio" else procs[-2]  # a stdio child's stderr goes to Triad's log
    if downstream == "sse":
        async with sse_peer(url.removesuffix("/mcp") + "/sse") as sse:
            yield sse, watched
    else:
        async with http_peer(url) as http:
            yield http, watched


class _StdioChild:
    """`triad stdio` with a stdio upstream: the child's stderr is not the test's to read."""


def request(method: str, params: dict[str, Any]) -> dict[str, Any]:
    return {"jsonrpc": "2.0", "id": next(_ids), "method": method, "params": params}


@pytest.mark.parametrize(("downstream", "upstream"), PAIRS)
async def test_an_upstreams_log_keeps_its_meta(procs: list[Proc], tmp_path: Path, downstream: str,
                                               upstream: str) -> None:
    tag = TAGS[upstream]
    async with through(procs, tmp_path, downstream, upstream) as (peer, _watched):
        got = await peer.exchange(request("tools/call", {"name": f"numbers_{tag}", "arguments": {"log": True}}))
    logs = [m["params"] for m in got if m.get("method") == "notifications/message"]
    assert logs == [LOG], logs
    assert "result" in got[-1]


@pytest.mark.parametrize(("downstream", "upstream"), [p for p in PAIRS if p != ("stdio", "stdio")])
async def test_a_cancellations_meta_and_a_calls_unknown_params_reach_the_upstream(
        procs: list[Proc], tmp_path: Path, downstream: str, upstream: str) -> None:
    tag = TAGS[upstream]
    extra = {"x-trace": {"n": 1, "f": 0.5}, "futureField": [True, None]}
    call = request("tools/call", {"name": f"wait_{tag}", "arguments": {"a": 1}, **extra})
    cancel_meta = {"example.com/why": {"n": 3}, "io.modelcontextprotocol/future": "x"}
    cancel = {"jsonrpc": "2.0", "method": "notifications/cancelled",
              "params": {"requestId": call["id"], "reason": "stop", "_meta": cancel_meta}}
    with anyio.fail_after(60):
        async with through(procs, tmp_path, downstream, upstream) as (peer, watched), \
                anyio.create_task_group() as tg:
            assert isinstance(watched, Proc)
            if downstream == "stdio":
                await peer.send(call)  # type: ignore[attr-defined]
            else:
                tg.start_soon(peer.post, call)  # type: ignore[attr-defined]
            params = json.loads((await watched.until(r"WAIT_PARAMS (.*)")).group(1))
            await (peer.send if downstream == "stdio" else peer.post)(cancel)  # type: ignore[attr-defined]
            got_meta = json.loads((await watched.until(r"CANCEL_META (.*)")).group(1))
            tg.cancel_scope.cancel()
    assert {key: params.get(key) for key in extra} == extra, params
    assert params["name"] == f"wait_{tag}" and params["arguments"] == {"a": 1}
    assert got_meta == cancel_meta
