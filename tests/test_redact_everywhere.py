"""`redact` covers every string a client can receive from an upstream, on both eras.

The upstream (`tests/servers/planted_upstream.py`) plants a secret in every string field of every result and
message shape the spec defines, generated from the SDK's models: tools/list, tools/call (every content type,
structured content, `_meta`), resources/list, templates/list, resources/read, prompts/list, prompts/get,
completion/complete, a log and a progress message, and sampling and (form and URL) elicitation requests relayed
from the upstream. A real client of each era takes everything through Triad; no planted secret may reach it.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import mcp_types as types
import pytest
from mcp import Client, ClientSession
from mcp.client.streamable_http import streamable_http_client
from pydantic import BaseModel

from tests.conftest import PYTHON, ROOT, Proc, marker, start_triad, write_config
from tests.servers.planted_upstream import ARGUMENT, PLANTED, PROMPT, TEMPLATE, TOOL_NAMES, URI

pytestmark = pytest.mark.anyio

PLANTED_FIXTURE = ROOT / "tests" / "servers" / "planted_upstream.py"
SAMPLING = types.SamplingCapability(context={}, tools={})  # type: ignore[arg-type]
"""Declared so that every field of a sampling request (its tools, its context) may be sent."""


class Received:
    """Everything a client was given, in wire form, and by whom."""

    def __init__(self) -> None:
        self.items: list[tuple[str, Any]] = []

    def add(self, what: str, value: Any) -> Any:
        dumped = value.model_dump(by_alias=True, mode="json", exclude_none=True) if isinstance(value, BaseModel) \
            else value
        self.items.append((what, dumped))
        return value

    def leaks(self) -> dict[str, list[str]]:
        """What each received thing carried of the planted secrets (each names the field it was planted in)."""
        found = {what: PLANTED.findall(json.dumps(value)) for what, value in self.items}
        return {what: sorted(set(hits)) for what, hits in found.items() if hits}

    def kinds(self) -> set[str]:
        return {what for what, _ in self.items}


def callbacks(received: Received) -> dict[str, Callable[..., Any]]:
    async def sampling(_ctx: Any, params: types.CreateMessageRequestParams) -> types.CreateMessageResult:
        received.add("sampling request", params)
        return types.CreateMessageResult(role="assistant", content=types.TextContent(text="ok"), model="m")

    async def elicitation(_ctx: Any, params: Any) -> types.ElicitResult:
        received.add(f"elicitation request ({params.mode})", params)
        return types.ElicitResult(action="decline")

    async def logging(params: types.LoggingMessageNotificationParams) -> None:
        received.add("log message", params)

    return {"sampling_callback": sampling, "elicitation_callback": elicitation, "logging_callback": logging}


@pytest.fixture
def triad(procs: list[Proc], tmp_path: Path) -> str:
    upstream = {"command": PYTHON, "args": [str(PLANTED_FIXTURE), "--name", marker("planted")]}
    config = write_config(tmp_path, {"upstreams": {"pl": upstream}, "naming": {"prefix": "always"},
                                     "hooks": [{"redact": {}}]})
    return start_triad(procs, config, wait_ready=1)


@asynccontextmanager
async def handshake_client(url: str, received: Received) -> AsyncIterator[ClientSession]:
    async with streamable_http_client(url) as (read, write), \
            ClientSession(read, write, sampling_capabilities=SAMPLING, log_level="debug",
                          **callbacks(received)) as session:
        await session.initialize()
        yield session


async def drive(client: Any, received: Received) -> None:
    """Every request of the spec that answers with the upstream's words, through `client` (either era's)."""
    async def progress(value: float, total: float | None, message: str | None) -> None:
        received.add("progress message", {"message": message})

    received.add("tools/list", await client.list_tools())
    received.add("resources/list", await client.list_resources())
    received.add("resources/templates/list", await client.list_resource_templates())
    received.add("prompts/list", await client.list_prompts())
    for name in TOOL_NAMES:
        received.add(f"tools/call {name}", await client.call_tool(f"pl__{name}", {}, progress_callback=progress))
    exposed_uri = received.items[1][1]["resources"][0]["uri"]
    received.add("resources/read", await client.read_resource(exposed_uri))
    received.add("prompts/get", await client.get_prompt(f"pl__{PROMPT}", {ARGUMENT: "x"}))
    received.add("completion/complete", await client.complete(types.PromptReference(name=f"pl__{PROMPT}"),
                                                              {"name": ARGUMENT, "value": "x"}))


EXPECTED = {"tools/list", "resources/list", "resources/templates/list", "prompts/list", "tools/call result",
            "tools/call relay", "resources/read", "prompts/get", "completion/complete", "log message",
            "progress message", "sampling request", "elicitation request (form)", "elicitation request (url)"}


def check(received: Received) -> None:
    leaks = received.leaks()
    assert not leaks, "planted secrets reached the client: " + "; ".join(f"{what}: {', '.join(hits[:5])}"
                                                                          for what, hits in sorted(leaks.items()))
    assert received.kinds() >= EXPECTED  # every shape reached the client: nothing was skipped
    listed = received.items[0][1]["tools"]
    assert {tool["name"] for tool in listed} == {f"pl__{name}" for name in TOOL_NAMES}  # identifiers kept
    assert "[REDACTED]" in listed[0]["description"]
    templates = received.items[2][1]["resourceTemplates"]
    assert [t["uriTemplate"].endswith(TEMPLATE.split("://")[1]) for t in templates] == [True]
    assert received.items[1][1]["resources"][0]["uri"].endswith(URI.split("://")[1])


async def test_no_planted_secret_reaches_a_handshake_client(triad: str) -> None:
    received = Received()
    async with handshake_client(triad, received) as session:
        await drive(session, received)
    check(received)


async def test_no_planted_secret_reaches_a_2026_client(triad: str) -> None:
    received = Received()
    async with Client(triad, mode="2026-07-28", cache=None, sampling_capabilities=SAMPLING, log_level="debug",
                      **callbacks(received)) as client:
        await drive(client, received)
    check(received)
