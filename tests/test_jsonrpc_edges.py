"""JSON-RPC at its edges (issue #30.7): batches, which MCP 2025-03-26 says a server MUST accept and every later
revision forbids, and requests whose `id` is no id (`null`, a fraction, a boolean), which must get -32600 with
id null instead of being taken for notifications, on every exposer.

One `triad serve` for the module, in front of the raw upstream over stdio (`echo_o` answers what it is given).
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx2
import pytest

from tests.conftest import PYTHON, ROOT, Proc, marker, start_triad, write_config
from tests.raw_clients import DEADLINE, JSON_HEADERS, sse_messages, sse_session, stdio_session

pytestmark = pytest.mark.anyio

RAW = ROOT / "tests" / "servers" / "raw_upstream.py"
NO_IDS = [None, 1.5, True, False, 1.0, [1], {"a": 1}]
"""Ids that are neither a string nor an integer."""
REVISIONS = ["2024-11-05", "2025-03-26", "2025-06-18", "2025-11-25"]


@pytest.fixture(scope="module")
def gateway(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Path, str]]:
    started: list[Proc] = []
    config = write_config(tmp_path_factory.mktemp("edges"), {"upstreams": {"o": {
        "command": PYTHON, "args": [str(RAW), "--name", marker("edges"), "--tag", "o"]}}})
    try:
        yield config, start_triad(started, config, wait_ready=1)
    finally:
        for proc in reversed(started):
            proc.terminate()


def echo(ident: Any, value: str = "1") -> dict[str, Any]:
    return {"jsonrpc": "2.0", "id": ident, "method": "tools/call",
            "params": {"name": "echo_o", "arguments": {"hex": value.encode().hex()}}}


async def session(http: httpx2.AsyncClient, url: str, revision: str) -> dict[str, str]:
    init = {"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": {
        "protocolVersion": revision, "capabilities": {}, "clientInfo": {"name": "edges", "version": "1"}}}
    response = await http.post(url, json=init, headers=JSON_HEADERS)
    assert response.status_code == 200, response.text
    headers = {**JSON_HEADERS, "Mcp-Session-Id": response.headers["mcp-session-id"],
               "MCP-Protocol-Version": revision}
    assert (await http.post(url, json={"jsonrpc": "2.0", "method": "notifications/initialized"},
                            headers=headers)).status_code == 202
    return headers


def refused(answer: dict[str, Any]) -> bool:
    return answer.get("id", "absent") is None and answer.get("error", {}).get("code") == -32600


async def test_a_request_whose_id_is_no_id_gets_invalid_request_over_http_and_sse(
        gateway: tuple[Path, str]) -> None:
    _, url = gateway
    wrong: list[str] = []
    async with httpx2.AsyncClient(timeout=DEADLINE) as http:
        for revision in REVISIONS:
            headers = await session(http, url, revision)
            for ident in NO_IDS:
                for message in (echo(ident), {"jsonrpc": "2.0", "id": ident, "method": "tools/list"}):
                    response = await http.post(url, content=json.dumps(message), headers=headers)
                    if response.status_code != 400 or not refused(response.json()):
                        wrong.append(f"http {revision} {message['method']} id={ident!r}: {response.status_code} "
                                     f"{response.text[:120]}")
        async with sse_session(http, url) as sse:
            for ident in NO_IDS:
                response = await sse.post(json.dumps(echo(ident)).encode())
                if response.status_code != 400 or not refused(response.json()):
                    wrong.append(f"sse id={ident!r}: {response.status_code} {response.text[:120]}")
            assert (await sse.request(echo(7)))["id"] == 7  # the session goes on
    assert not wrong, "\n".join(wrong)


async def test_a_request_whose_id_is_no_id_gets_invalid_request_over_stdio(gateway: tuple[Path, str]) -> None:
    config, _ = gateway
    async with stdio_session(config) as peer:
        wrong = []
        for ident in NO_IDS:
            answer = await peer.request(echo(ident))
            if not refused(answer):
                wrong.append(f"stdio id={ident!r}: {answer}")
        assert (await peer.request(echo(8)))["id"] == 8
    assert not wrong, "\n".join(wrong)


async def test_a_2025_03_26_session_may_send_a_batch_and_later_revisions_may_not(gateway: tuple[Path, str]) -> None:
    _, url = gateway
    batch = [echo(1, '{"x":[1,2]}'), {"jsonrpc": "2.0", "method": "notifications/roots/list_changed"},
             {"jsonrpc": "2.0", "id": "two", "method": "tools/list"}, echo(3, '"\\ud800"')]
    async with httpx2.AsyncClient(timeout=DEADLINE) as http:
        for revision in REVISIONS:
            headers = await session(http, url, revision)
            response = await http.post(url, content=json.dumps(batch), headers=headers)
            if revision != "2025-03-26":
                assert response.status_code == 400, (revision, response.text)
                continue
            assert response.status_code == 200, response.text
            answers = {m["id"]: m for m in sse_messages(response.text) if "id" in m and "method" not in m}
            assert sorted(answers, key=str) == [1, 3, "two"], response.text
            assert answers[1]["result"]["structuredContent"] == {"value": {"x": [1, 2]}}
            assert answers[3]["result"]["structuredContent"] == {"value": "\ud800"}
            assert "echo_o" in [tool["name"] for tool in answers["two"]["result"]["tools"]]
            only_notes = await http.post(url, headers=headers, content=json.dumps(
                [{"jsonrpc": "2.0", "method": "notifications/roots/list_changed"}]))
            assert only_notes.status_code == 202, only_notes.text
            too_long = await http.post(url, headers=headers, content=json.dumps([echo(i) for i in range(65)]))
            assert too_long.status_code == 400 and "MAX_BATCH" in too_long.text, too_long.text
            assert (await http.post(url, headers=headers, content=json.dumps(echo(9)))).status_code == 200
