"""Sessions belong to the identity that opened them, on every HTTP transport (streamable HTTP POST, GET stream,
DELETE; legacy SSE and its messages endpoint), and a run-level list given when a session opens stays with it.

A raw HTTP client plays the attacker: it knows the victim's session id (as if it had leaked) and tries it with
another client's token and with no token at all (where `anonymous:` is configured).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import httpx2
import pytest

from tests.conftest import Proc, start_triad, stdio_upstream, write_config
from tests.test_direct_path import Raw, call, events

pytestmark = pytest.mark.anyio

ALICE, BOB = "alice-secret-0123456789", "bob-secret-9876543210"
REFUSED_BODY = "Session not found"


def config(tmp_path: Path, **extra: Any) -> Path:
    return write_config(tmp_path, {
        "upstreams": {"fx": stdio_upstream("iso-fx")},
        "clients": {"alice": {"token": ALICE}, "bob": {"token": BOB}, "guest": {}},
        "anonymous": "guest",
        "hooks": [{"audit": {"path": str(tmp_path / "audit.jsonl")}}],
        **extra,
    })


def reply(response: httpx2.Response) -> dict[str, Any]:
    """The JSON-RPC response, whether it came as JSON or as the last event of a stream."""
    if response.headers["content-type"].startswith("application/json"):
        return response.json()
    return events(response.text)[-1]


def bearer(token: str | None) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"} if token else {}


async def open_session(http: httpx2.AsyncClient, url: str, token: str, **headers: str) -> Raw:
    session = Raw(http, url)
    session.headers |= bearer(token) | headers
    return await session.open()


@pytest.mark.parametrize("direct_path", [True, False], ids=["direct", "sdk"])
async def test_another_identity_cannot_use_a_session(procs: list[Proc], tmp_path: Path, direct_path: bool) -> None:
    url = start_triad(procs, config(tmp_path, listen={"direct_path": direct_path}), wait_ready=1)
    async with httpx2.AsyncClient(timeout=30) as http:
        alice = await open_session(http, url, ALICE)
        session_id = alice.headers["Mcp-Session-Id"]
        assert reply(await alice.post(call(1, "echo", {"text": "mine"})))["result"]["content"][0]["text"] \
            == "mine"
        for intruder in (BOB, None):
            stolen = {**alice.headers, **bearer(intruder)}
            if intruder is None:
                del stolen["Authorization"]
            for body in (call(2, "echo", {"text": "theirs"}),
                         {"jsonrpc": "2.0", "id": 3, "method": "tools/list"}):
                refused = await http.post(url, content=json.dumps(body), headers=stolen)
                assert refused.status_code == 404, refused.text
                assert REFUSED_BODY in refused.text
            stream = await http.get(url, headers={**stolen, "Accept": "text/event-stream"})
            assert stream.status_code == 404
            deleted = await http.delete(url, headers=stolen)
            assert deleted.status_code == 404
        # An id that never existed gets the very same answer: the refusal reveals nothing.
        unknown = await http.post(url, content=json.dumps(call(4, "echo", {"text": "x"})),
                                  headers={**alice.headers, "Mcp-Session-Id": "0" * 32})
        assert (unknown.status_code, unknown.text) == (404, refused.text)
        # The owner's session survived every attempt.
        assert reply(await alice.post(call(5, "echo", {"text": "still"})))["result"]["content"][0]["text"] \
            == "still"
        assert (await http.delete(url, headers=alice.headers)).status_code == 200
    audit = (tmp_path / "audit.jsonl").read_text()
    assert session_id not in audit and '"session": "s-' in audit
    assert session_id not in procs[-1].stderr


async def read_endpoint(lines: Any) -> str:
    async for line in lines:
        if line.startswith("data:") and "session_id=" in line:
            return line[5:].strip()
    raise AssertionError("the SSE stream ended before its endpoint event")


async def next_message(lines: Any) -> dict[str, Any]:
    async for line in lines:
        if line.startswith("data:") and line[5:].strip().startswith("{"):
            return json.loads(line[5:])
    raise AssertionError("the SSE stream ended")


async def test_a_legacy_sse_session_answers_only_its_opener(procs: list[Proc], tmp_path: Path) -> None:
    url = start_triad(procs, config(tmp_path), wait_ready=1)
    base = url.removesuffix("/mcp")
    async with httpx2.AsyncClient(timeout=30) as http, \
            http.stream("GET", f"{base}/sse?tools=echo", headers=bearer(ALICE)) as stream:
        lines = stream.aiter_lines()
        endpoint = base + await read_endpoint(lines)
        init = {"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": {
            "protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name": "raw", "version": "1"}}}
        for intruder in (BOB, None):
            refused = await http.post(endpoint, json=init, headers=bearer(intruder))
            assert refused.status_code == 404
        assert (await http.post(endpoint, json=init, headers=bearer(ALICE))).status_code == 202
        assert (await next_message(lines))["id"] == 0
        await http.post(endpoint, json={"jsonrpc": "2.0", "method": "notifications/initialized"},
                        headers=bearer(ALICE))
        # The stream's run-level list (`?tools=`) holds for every message of the session.
        await http.post(endpoint, json={"jsonrpc": "2.0", "id": 1, "method": "tools/list"}, headers=bearer(ALICE))
        listed = await next_message(lines)
        assert [tool["name"] for tool in listed["result"]["tools"]] == ["echo"]
        await http.post(endpoint, json=call(2, "image", {}), headers=bearer(ALICE))
        assert (await next_message(lines))["error"]["code"] == -32602


@pytest.mark.parametrize("direct_path", [True, False], ids=["direct", "sdk"])
async def test_a_run_level_list_given_at_open_stays_with_the_session(procs: list[Proc], tmp_path: Path,
                                                                     direct_path: bool) -> None:
    url = start_triad(procs, config(tmp_path, listen={"direct_path": direct_path}), wait_ready=1)
    async with httpx2.AsyncClient(timeout=30) as http:
        session = await open_session(http, url, ALICE, **{"X-Triad-Tools": "echo, image"})
        del session.headers["X-Triad-Tools"]

        async def listed(**headers: str) -> list[str]:
            body = {"jsonrpc": "2.0", "id": 1, "method": "tools/list"}
            found = reply(await session.post(body, **headers))
            return sorted(tool["name"] for tool in found["result"]["tools"])

        assert await listed() == ["echo", "image"]
        assert await listed(**{"X-Triad-Tools": "*"}) == ["echo", "image"]  # never widened
        assert await listed(**{"X-Triad-Tools": "echo"}) == ["echo"]  # narrowed for that request
        widened = await session.post(call(2, "slow", {"seconds": 0}), **{"X-Triad-Tools": "*"})
        assert reply(widened)["error"]["code"] == -32602
        # `_meta["triad/tools"]` narrows lists as well as calls.
        meta_list = {"jsonrpc": "2.0", "id": 3, "method": "tools/list", "params": {"_meta": {"triad/tools": ["image"]}}}
        found = reply(await session.post(meta_list))
        assert [tool["name"] for tool in found["result"]["tools"]] == ["image"]


async def test_metrics_and_readiness_details_need_a_token_and_every_route_checks_the_host(
        procs: list[Proc], tmp_path: Path) -> None:
    url = start_triad(procs, config(tmp_path), wait_ready=1)
    base = url.removesuffix("/mcp")
    async with httpx2.AsyncClient(timeout=30) as http:
        assert (await http.get(f"{base}/metrics")).status_code == 401
        metrics = await http.get(f"{base}/metrics", headers=bearer(BOB))
        assert metrics.status_code == 200 and "triad_" in metrics.text
        assert set((await http.get(f"{base}/readyz")).json()) == {"ready"}
        assert "upstreams" in (await http.get(f"{base}/readyz", headers=bearer(BOB))).json()
        assert (await http.get(f"{base}/healthz")).json() == {"status": "alive"}
        evil = {"Host": "evil.example", **bearer(ALICE)}
        for method, path in (("GET", "/healthz"), ("GET", "/readyz"), ("GET", "/metrics"),
                             ("POST", "/admin/reload"), ("GET", "/sse")):
            refused = await http.request(method, f"{base}{path}", headers=evil)
            assert refused.status_code == 421, (path, refused.status_code)
        origin = {"Origin": "http://evil.example", **bearer(ALICE)}
        assert (await http.post(f"{base}/admin/reload", headers=origin)).status_code == 403


async def test_a_gateway_with_no_upstreams_is_not_ready(procs: list[Proc], tmp_path: Path) -> None:
    url = start_triad(procs, write_config(tmp_path, {"upstreams": {}}))
    async with httpx2.AsyncClient(timeout=30) as http:
        ready = await http.get(url.replace("/mcp", "/readyz"))
    assert (ready.status_code, ready.json()["ready"]) == (503, False)
