"""A server->client request reaches a client only if it declared that capability, and the mode (issue 30, point
2): sampling (with tools: `sampling.tools`), elicitation in form and URL mode (`elicitation: {}` is form only),
roots. Otherwise the upstream gets a JSON-RPC error (-32021, naming what is missing) and the client never sees
the request: the spec's MUST NOT, on a shared upstream as on a client's own (`sessions: per_client`).

The table: every request kind x every kind of declaration (none, another capability, this one, this one without
the mode) x both upstream session kinds, through one Triad, with the SDK's client declaring exactly what each row
says.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import mcp_types as types
import pytest
from mcp import ClientSession
from mcp.client.streamable_http import streamable_http_client

from tests.conftest import Proc, start_fixture, start_triad, write_config

pytestmark = pytest.mark.anyio

REQUESTS: dict[str, tuple[str, dict[str, Any], str]] = {
    # kind: (fixture tool, its arguments, the capability that takes it, as the client declares it)
    "sampling": ("sample", {"prompt": "hi"}, '{"sampling": {}}'),
    "sampling with tools": ("sample", {"prompt": "hi", "with_tools": True}, '{"sampling": {"tools": {}}}'),
    "elicitation form": ("ask", {"question": "form?"}, '{"elicitation": {"form": {}}}'),
    "elicitation url": ("ask", {"question": "url?", "mode": "url"}, '{"elicitation": {"url": {}}}'),
    "roots": ("roots", {}, '{"roots": {}}'),
}
DECLARATIONS: dict[str, dict[str, str]] = {
    # kind of request: {row: the client's declaration}
    "sampling": {"other": '{"roots": {}}', "without the mode": "none"},
    "sampling with tools": {"other": '{"elicitation": {}}', "without the mode": '{"sampling": {}}'},
    "elicitation form": {"other": '{"sampling": {}}', "without the mode": '{"elicitation": {"url": {}}}'},
    "elicitation url": {"other": '{"roots": {}}', "without the mode": '{"elicitation": {}}'},
    "roots": {"other": '{"sampling": {}, "elicitation": {}}', "without the mode": "none"},
}
"""Per request kind, the rows besides `none` and `this`; `none` where the capability has no mode to lack."""


def cases() -> list[tuple[str, str, str]]:
    rows = []
    for kind, (_tool, _arguments, this) in REQUESTS.items():
        for row, declared in {"none": "{}", "this": this, **DECLARATIONS[kind]}.items():
            if declared != "none":
                rows.append((kind, row, declared))
    return rows


class Recorder:
    def __init__(self) -> None:
        self.asked: list[str] = []

    async def sampling(self, context: Any, params: types.CreateMessageRequestParams) -> types.CreateMessageResult:
        self.asked.append("sampling/createMessage")
        return types.CreateMessageResult(role="assistant", content=types.TextContent(text="sampled"), model="m")

    async def elicitation(self, context: Any, params: Any) -> types.ElicitResult:
        self.asked.append(f"elicitation/create {getattr(params, 'mode', None) or 'form'}")
        return types.ElicitResult(action="decline")

    async def roots(self, context: Any) -> types.ListRootsResult:
        self.asked.append("roots/list")
        return types.ListRootsResult(roots=[])


@asynccontextmanager
async def declaring(url: str, declared: dict[str, Any], recorder: Recorder) -> AsyncIterator[ClientSession]:
    """An SDK client that declares exactly `declared` (its callbacks answer whatever it is asked)."""
    async with streamable_http_client(url) as (read, write):
        session = ClientSession(read, write, sampling_callback=recorder.sampling,
                                elicitation_callback=recorder.elicitation, list_roots_callback=recorder.roots)
        # the SDK declares a capability for each callback (elicitation always in both modes): a client's own
        # declaration is what this table is about, so it is set as the row says
        session._build_capabilities = (  # type: ignore[method-assign]
            lambda version: types.ClientCapabilities.model_validate(declared, by_name=False))
        async with session:
            await session.initialize()
            yield session


@pytest.fixture(scope="module")
def triad(tmp_path_factory: pytest.TempPathFactory) -> Any:
    tmp_path = tmp_path_factory.mktemp("declared")
    started: list[Proc] = []
    # over streamable HTTP a client's own upstream session is one `initialize`, not a child process per row
    config = write_config(tmp_path, {"upstreams": {
        "shared": {"url": start_fixture(started, "http", "declared-shared"), "sessions": "shared"},
        "own": {"url": start_fixture(started, "http", "declared-own"), "sessions": "per_client"}}})
    try:
        yield start_triad(started, config, wait_ready=2)
    finally:
        for proc in started:
            proc.terminate()


@pytest.mark.parametrize("upstream", ["shared", "own"])
async def test_a_client_is_asked_only_what_it_declared(triad: str, upstream: str) -> None:
    wrong: list[str] = []
    for kind, row, declared in cases():
        tool, arguments, _this = REQUESTS[kind]
        recorder = Recorder()
        async with declaring(triad, json.loads(declared), recorder) as session:
            result = await session.call_tool(f"{upstream}__{tool}", arguments)
        text = " ".join(c.text for c in result.content if isinstance(c, types.TextContent))
        if row == "this" and kind == "roots" and upstream == "shared":
            # a shared session's roots are Triad's own (`roots:` in its config), never a client's
            if recorder.asked or not result.is_error:
                wrong.append(f"{kind} / {row} ({declared}): a client was asked for a shared session's roots: "
                             f"{recorder.asked} {text[:200]}")
        elif row == "this":
            if not recorder.asked or result.is_error:
                wrong.append(f"{kind} / {row} ({declared}): not asked ({text[:200]})")
        elif recorder.asked:
            wrong.append(f"{kind} / {row} ({declared}): the client was asked {recorder.asked}")
        elif not (result.is_error and ("did not declare" in text or (kind == "roots" and upstream == "shared"))):
            wrong.append(f"{kind} / {row} ({declared}): the upstream got no clear error: {text[:200]}")
    assert not wrong, "\n".join(wrong)
