"""Policy end to end: HTTP clients with different tokens against real upstreams, and `triad explain`."""

from __future__ import annotations

import subprocess
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import httpx2
import mcp_types as types
import pytest
from mcp import ClientSession
from mcp.client.streamable_http import streamable_http_client
from mcp.shared.exceptions import MCPError

from tests.conftest import TRIAD, Proc, start_triad, stdio_upstream, write_config
from tests.servers.fixture_upstream import TOOL_COUNT
from tests.test_gateway_e2e import call

pytestmark = pytest.mark.anyio

TOKENS = {"TRIAD_TEST_IDE_TOKEN": "ide-secret-0123456789", "TRIAD_TEST_BOT_TOKEN": "bot-secret-9876543210",
          "TRIAD_TEST_NARROW_TOKEN": "narrow-secret-5555"}


def policy_config(tmp_path: Path) -> Path:
    return write_config(tmp_path, {
        "upstreams": {"fx": stdio_upstream("pol-fx"), "gx": stdio_upstream("pol-gx")},
        "clients": {
            "ide": {"token": "${TRIAD_TEST_IDE_TOKEN}", "agent": "coder", "provider": "google", "groups": ["eng"]},
            "bot": {"token": "${TRIAD_TEST_BOT_TOKEN}", "agent": "bot"},
            "narrow": {"token": "${TRIAD_TEST_NARROW_TOKEN}", "tools": {"allow": ["gx__*"]}},
            "boss": {"owner": True},
        },
        "policy": {
            "profile": {"deny": ["*die*"]},
            "agents": {"coder": {"allow": ["group:fx", "gx__echo"]}, "bot": {"allow": ["group:readonly"]}},
            "providers": {"google": {"deny": ["fx__slow"]}},
            "groups": {"eng": {"allow": ["*"]}},
            "gateway_deny": ["*fail*"],
            "owner_only": ["fx__audio"],
        },
    })


@pytest.fixture
def env(monkeypatch: pytest.MonkeyPatch) -> None:
    for key, value in TOKENS.items():
        monkeypatch.setenv(key, value)


@asynccontextmanager
async def session_as(url: str, token: str | None, headers: dict[str, str] | None = None,
                     **kwargs: Any) -> AsyncIterator[ClientSession]:
    sent = {**({"Authorization": f"Bearer {token}"} if token else {}), **(headers or {})}
    async with (httpx2.AsyncClient(headers=sent) as http,
                streamable_http_client(url, http_client=http) as (read, write),
                ClientSession(read, write, **kwargs) as session):
        await session.initialize()
        yield session


async def names(session: ClientSession) -> set[str]:
    return {t.name for t in (await session.list_tools()).tools}


async def test_two_clients_see_different_tools_and_hidden_means_not_callable(env: None, procs: list[Proc],
                                                                             tmp_path: Path) -> None:
    url = start_triad(procs, policy_config(tmp_path), wait_ready=2)
    async with session_as(url, TOKENS["TRIAD_TEST_IDE_TOKEN"]) as ide, \
            session_as(url, TOKENS["TRIAD_TEST_BOT_TOKEN"]) as bot:
        ide_tools, bot_tools = await names(ide), await names(bot)
        assert {"fx__echo", "fx__image", "gx__echo"} <= ide_tools
        assert not {"fx__die", "fx__slow", "fx__fail", "fx__audio", "gx__image"} & ide_tools
        assert bot_tools == {"fx__echo", "gx__echo"}  # the read-only ones
        for session, hidden in ((ide, "fx__slow"), (ide, "fx__audio"), (ide, "gx__image"), (bot, "fx__image"),
                                (ide, "fx__die")):
            with pytest.raises(MCPError) as raised:
                await call(session, hidden, {"seconds": 0})
            assert raised.value.error.code == types.INVALID_PARAMS
            assert raised.value.error.message == f"Unknown tool: {hidden}"
        assert (await call(bot, "gx__echo", {"text": "ok"}))["content"][0]["text"] == "ok"
    stderr = procs[-1].stderr
    assert "denied call: client ide tool fx__slow by layer 3 (provider, provider google)" in stderr
    assert not any(token in stderr for token in TOKENS.values())


async def test_resources_and_prompts_of_an_upstream_the_caller_cannot_see(env: None, procs: list[Proc],
                                                                         tmp_path: Path) -> None:
    url = start_triad(procs, policy_config(tmp_path), wait_ready=2)
    async with session_as(url, TOKENS["TRIAD_TEST_NARROW_TOKEN"]) as narrow:
        assert all(n.startswith("gx__") for n in await names(narrow))
        assert [p.name for p in (await narrow.list_prompts()).prompts] == ["gx__greet"]
        assert all("//gx/" in str(r.uri) for r in (await narrow.list_resources()).resources)
        with pytest.raises(MCPError) as raised:
            await narrow.read_resource("fixture://fx/static")
        assert raised.value.error.message == "Unknown resource: fixture://fx/static"
        with pytest.raises(MCPError):
            await narrow.get_prompt("fx__greet", {"who": "x"})
        assert (await narrow.read_resource("fixture://gx/static")).contents[0].text.endswith("pol-gx")  # type: ignore


async def test_requests_without_a_valid_token_are_refused(env: None, procs: list[Proc], tmp_path: Path) -> None:
    url = start_triad(procs, policy_config(tmp_path), wait_ready=2)
    body = {"jsonrpc": "2.0", "id": 1, "method": "initialize",
            "params": {"protocolVersion": "2025-11-25", "capabilities": {},
                       "clientInfo": {"name": "t", "version": "1"}}}
    headers = {"Accept": "application/json, text/event-stream"}
    async with httpx2.AsyncClient() as http:
        # no token or a wrong one: 401; a header that is no bearer token at all: 400 (RFC 6750 §3.1)
        for auth, status in ((None, 401), ("Bearer wrong-token", 401), ("Basic dXNlcjpwYXNz", 400), ("Bearer", 400)):
            sent = {**headers, **({"Authorization": auth} if auth else {})}
            response = await http.post(url, json=body, headers=sent)
            assert response.status_code == status, auth
            assert response.headers["www-authenticate"].startswith('Bearer realm="triad"')
            assert "secret" not in response.text
        bot = {"Authorization": f"Bearer {TOKENS['TRIAD_TEST_BOT_TOKEN']}"}
        ok = await http.post(url, json=body, headers={**headers, **bot})
        assert ok.status_code == 200


async def test_run_level_lists_from_header_query_and_meta(env: None, procs: list[Proc], tmp_path: Path) -> None:
    url = start_triad(procs, policy_config(tmp_path), wait_ready=2)
    ide_token = TOKENS["TRIAD_TEST_IDE_TOKEN"]
    async with session_as(url, ide_token, {"X-Triad-Tools": "fx__echo, fx__im*"}) as session:
        assert await names(session) == {"fx__echo", "fx__image"}
        with pytest.raises(MCPError):
            await call(session, "gx__echo", {"text": "x"})
    async with session_as(url + "?tools=gx__echo", ide_token) as session:
        assert await names(session) == {"gx__echo"}
    async with session_as(url, ide_token, {"X-Triad-Tools": ""}) as session:
        assert await names(session) == set()  # an empty run-level list denies everything
    async with session_as(url, ide_token) as session:
        meta_call = types.CallToolRequest(params=types.CallToolRequestParams(
            name="fx__echo", arguments={"text": "x"}, _meta={"triad/tools": ["gx__*"]}))
        with pytest.raises(MCPError) as raised:
            await session.send_request(meta_call, dict)  # type: ignore[arg-type]
        assert raised.value.error.message == "Unknown tool: fx__echo"
        allowed = types.CallToolRequest(params=types.CallToolRequestParams(
            name="fx__echo", arguments={"text": "x"}, _meta={"triad/tools": ["fx__*"], "k": "v"}))
        result: Any = await session.send_request(allowed, types.CallToolResult)
        # Triad's own key never reaches the upstream; the client's other keys do
        received = result.meta["fixture/received-meta"]
        assert "triad/tools" not in received and received["k"] == "v"


EXPLAIN_CASES = [
    ("ide", "fx__echo", 0, ["pass  layer 2 agent [agent coder]: allowed by 'group:fx'", "decision: visible"]),
    ("ide", "fx__slow", 1, ["DENY  layer 3 provider [provider google]: denied by 'fx__slow'", "decision: hidden"]),
    ("ide", "fx__audio", 1, ["DENY  layer 6 owner_only [owner_only]: denied: owners only (pattern 'fx__audio')"]),
    ("boss", "fx__audio", 0, ["pass  layer 6 owner_only [owner_only]: allowed: caller is an owner"]),
    ("bot", "fx__die", 1, ["DENY  layer 1 profile [profile]: denied by '*die*'",
                           "DENY  layer 2 agent [agent bot]: denied: not in the allow list"]),
    ("ide", "fx__fail", 1, ["DENY  layer 5 gateway_deny [gateway_deny]: denied by '*fail*'"]),
    ("ide", "nosuch__tool", 1, ["not in the registry"]),
]


@pytest.mark.parametrize(("client", "tool", "code", "lines"), EXPLAIN_CASES,
                         ids=[f"{c[0]}-{c[1]}" for c in EXPLAIN_CASES])
def test_explain(env: None, tmp_path: Path, client: str, tool: str, code: int, lines: list[str]) -> None:
    done = subprocess.run([*TRIAD, "explain", "-c", str(policy_config(tmp_path)), "--client", client, tool],
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == code, done.stdout + done.stderr
    for line in lines:
        assert line in done.stdout, done.stdout
    # a name nobody offers has no layers to show (issue 21: not seven passing ones)
    assert len([x for x in done.stdout.splitlines() if " layer " in x]) == (0 if "not in the registry" in lines else 7)


def test_check_warns_about_patterns_that_match_nothing(env: None, tmp_path: Path) -> None:
    config = write_config(tmp_path, {"upstreams": {"fx": {"command": "x"}, "gx": {"command": "y"}},
                                     "policy": {"gateway_deny": ["zz__*", "group:fx"]}})
    done = subprocess.run([*TRIAD, "check", "-c", str(config)], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0
    assert done.stderr.strip() == (f"warning: {config}: policy.gateway_deny: pattern 'zz__*' matches nothing "
                                   "(no upstream's tools start with 'zz__'; they start with fx__, gx__) (line 8)")


async def test_anonymous_access_maps_to_a_named_client_when_the_config_allows_it(env: None, procs: list[Proc],
                                                                                tmp_path: Path) -> None:
    config = write_config(tmp_path, {
        "upstreams": {"fx": stdio_upstream("anon-fx"), "gx": stdio_upstream("anon-gx")},
        "clients": {"ide": {"token": "${TRIAD_TEST_IDE_TOKEN}"}, "guest": {"tools": {"allow": ["gx__echo"]}}},
        "anonymous": "guest",
    })
    url = start_triad(procs, config, wait_ready=2)
    async with session_as(url, None) as guest, session_as(url, TOKENS["TRIAD_TEST_IDE_TOKEN"]) as ide:
        assert await names(guest) == {"gx__echo"}
        assert len(await names(ide)) == 2 * TOOL_COUNT
    async with httpx2.AsyncClient() as http:  # a wrong token is still refused: anonymous is for no token at all
        response = await http.post(url, json={}, headers={"Authorization": "Bearer nope"})
        assert response.status_code == 401
