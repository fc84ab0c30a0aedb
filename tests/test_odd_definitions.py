"""An upstream's odd but usable tool definitions are taken as they are, or repaired with a diagnostic in `triad
plan`; an invalid one is dropped with a diagnostic; one bad tool never loses the others (issue 30, point 8: GitLab's
server lists schemas without `type`, which the SDK's result validation refused, so every tool was lost).

One raw upstream (`tests/servers/raw_upstream.py --tools-file`, no SDK) per upstream transport lists every kind of
oddity in `ODDITIES` at once; through Triad a raw peer gets each tool as the table says, and the SDK's own client
(which validates `tools/list` results) accepts the whole list.
"""

from __future__ import annotations

import json
from typing import Any

import anyio
import pytest
from mcp import ClientSession
from mcp.client.streamable_http import streamable_http_client

from tests.conftest import PYTHON, ROOT, TRIAD, Proc, marker, start_triad, write_config
from tests.raw_peers import http_peer

pytestmark = pytest.mark.anyio

RAW = ROOT / "tests" / "servers" / "raw_upstream.py"
OBJECT = {"type": "object", "properties": {"q": {"type": "string"}}}
LONG = "Describes at length. " * 5000

ODDITIES: dict[str, tuple[Any, str, dict[str, Any] | None]] = {
    # kind: (definition, outcome, the fields Triad serves where they differ from the definition)
    "plain": ({"inputSchema": OBJECT}, "as-is", None),
    "annotation_title": ({"inputSchema": OBJECT, "annotations": {"title": "Only here"}}, "as-is", None),
    "unknown_fields": ({"inputSchema": {**OBJECT, "x-extra": [1, {"y": None}]}, "x-future": {"a": 1},
                        "annotations": {"x-hint": True}, "_meta": {"example.com/k": 1}}, "as-is", None),
    "oversized_description": ({"inputSchema": OBJECT, "description": LONG}, "as-is", None),
    "typeless_schema": ({"inputSchema": {"properties": {"q": {"type": "string"}}, "required": ["q"]}}, "repaired",
                        {"inputSchema": {"type": "object", "properties": {"q": {"type": "string"}},
                                         "required": ["q"]}}),
    "no_schema": ({"description": "No schema at all."}, "repaired", {"inputSchema": {"type": "object"}}),
    "typeless_output_schema": ({"inputSchema": OBJECT, "outputSchema": {"properties": {"n": {"type": "number"}}}},
                               "repaired", {"outputSchema": {"type": "object",
                                                             "properties": {"n": {"type": "number"}}}}),
    "title_not_text": ({"inputSchema": OBJECT, "title": 5}, "repaired", {"title": None}),
    "description_not_text": ({"inputSchema": OBJECT, "description": ["a"]}, "repaired", {"description": None}),
    "annotations_not_object": ({"inputSchema": OBJECT, "annotations": "read-only"}, "repaired",
                               {"annotations": None}),
    "icons_not_list": ({"inputSchema": OBJECT, "icons": "i.png"}, "repaired", {"icons": None}),
    "output_schema_not_object": ({"inputSchema": OBJECT, "outputSchema": "n"}, "repaired", {"outputSchema": None}),
    "schema_not_object": ({"inputSchema": "string"}, "dropped", None),
    "schema_of_an_array": ({"inputSchema": {"type": "array"}}, "dropped", None),
    "name_not_text": ({"name": 7, "inputSchema": OBJECT}, "dropped", None),
    "no_name": ({"name": None, "inputSchema": OBJECT}, "dropped", None),
    "not_an_object": ("a tool", "dropped", None),
}
"""Every kind of oddity, with what Triad does with it."""
TRANSPORTS = ("stdio", "http", "sse")


def definitions() -> list[Any]:
    listed: list[Any] = []
    for kind, (definition, _outcome, _served) in ODDITIES.items():
        if isinstance(definition, dict):
            listed.append({"name": kind, **definition} if "name" not in definition else
                          {**({"name": definition["name"]} if definition["name"] is not None else {}),
                           **{k: v for k, v in definition.items() if k != "name"}, "x-kind": kind})
        else:
            listed.append(definition)
    return listed


def expected(upstream: str) -> dict[str, dict[str, Any]]:
    """What a client gets of each tool that is served, by exposed name."""
    served: dict[str, dict[str, Any]] = {}
    for kind, (definition, outcome, changes) in ODDITIES.items():
        if outcome == "dropped":
            continue
        wire = {"name": kind, **definition}
        for key, value in (changes or {}).items():
            if value is None:
                wire.pop(key, None)
            else:
                wire[key] = value
        served[f"{upstream}__{kind}"] = {**wire, "name": f"{upstream}__{kind}"}
    return served


@pytest.fixture(scope="module")
def gateway(tmp_path_factory: pytest.TempPathFactory) -> Any:
    tmp_path = tmp_path_factory.mktemp("odd")
    tools_file = tmp_path / "tools.json"
    tools_file.write_text(json.dumps(definitions()))
    started: list[Proc] = []
    upstreams: dict[str, Any] = {}
    for transport in TRANSPORTS:
        args = [str(RAW), "--transport", transport, "--name", marker(f"odd-{transport}"), "--tag", transport,
                "--tools-file", str(tools_file)]
        if transport == "stdio":
            upstreams[transport] = {"command": PYTHON, "args": args}
            continue
        proc = Proc([PYTHON, *args])
        started.append(proc)
        port = proc.wait_for(r"READY (\d+)").group(1)
        upstreams[transport] = {"url": f"http://127.0.0.1:{port}/{'mcp' if transport == 'http' else 'sse'}",
                                **({"transport": "sse"} if transport == "sse" else {})}
    config = write_config(tmp_path, {"upstreams": upstreams, "naming": {"prefix": "always"}})
    try:
        url = start_triad(started, config, wait_ready=len(TRANSPORTS))
        yield url, config
    finally:
        for proc in reversed(started):
            proc.terminate()


@pytest.mark.parametrize("transport", TRANSPORTS)
async def test_odd_definitions_are_served_as_they_are_or_repaired_and_bad_ones_alone_are_dropped(
        gateway: Any, transport: str) -> None:
    url, _config = gateway
    async with http_peer(url) as peer:
        [answer] = [m for m in await peer.exchange({"jsonrpc": "2.0", "id": 1, "method": "tools/list"})
                    if "id" in m]
    listed = {tool["name"]: tool for tool in answer["result"]["tools"] if tool["name"].startswith(f"{transport}__")}
    want = expected(transport)
    wrong = [f"{name}: served {listed.get(name)!r:.300}" for name, wire in want.items() if listed.get(name) != wire]
    extra = sorted(set(listed) - set(want))
    assert not wrong and not extra, "\n".join([*wrong, *(f"{name}: should be dropped" for name in extra)])


async def test_the_sdk_client_accepts_the_whole_list(gateway: Any) -> None:
    """The SDK validates a `tools/list` result: one invalid definition passed on would lose the client every
    tool, as it lost Triad every tool of that upstream."""
    url, _config = gateway
    async with streamable_http_client(url) as (read, write), ClientSession(read, write) as session:
        await session.initialize()
        names = {tool.name for tool in (await session.list_tools()).tools}
    assert names >= {name for transport in TRANSPORTS for name in expected(transport)}


async def test_plan_names_each_repaired_and_dropped_definition(gateway: Any) -> None:
    _url, config = gateway
    plan = await anyio.run_process([*TRIAD, "plan", "-c", str(config), "--json"], cwd=ROOT)
    notes = json.loads(plan.stdout)["registry_diagnostics"]
    text = json.dumps(notes)
    missing = [f"{transport}: {kind}" for transport in TRANSPORTS for kind, (_d, outcome, _c) in ODDITIES.items()
               if outcome != "as-is" and not any(f"upstream {transport}" in note and kind_named(kind, note)
                                                 for note in map(json.dumps, notes))]
    assert not missing, f"no diagnostic for {missing} in {text:.2000}"
    assert not any(kind in text for kind, (_d, outcome, _c) in ODDITIES.items() if outcome == "as-is"), text


def kind_named(kind: str, note: str) -> bool:
    """A diagnostic names its tool by its name, or where it has none usable, by its place in the list."""
    definition = ODDITIES[kind][0]
    if isinstance(definition, dict) and "name" not in definition:
        return repr(kind) in note or f'"{kind}"' in note or kind in note
    return f"tool #{list(ODDITIES).index(kind) + 1}" in note
