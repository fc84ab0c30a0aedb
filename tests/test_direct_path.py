"""The direct path for calls and lists of handshake-era HTTP sessions (`exposers.direct._path`), seen on the wire.

A raw HTTP client shows what the SDK clients in the other tests do not: which reply is plain JSON and which a
stream, that a request the direct path does not take still gets the SDK's answer, and that the client's answers and
cancellations reach the calls served on the direct path.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import anyio
import httpx2
import pytest
from mcp.shared.exceptions import MCPError

from consumers._direct_http import MAX_MESSAGE, _Events, _Stream
from tests.conftest import PYTHON, ROOT, Proc, start_fixture, start_triad, stdio_upstream, write_config

pytestmark = pytest.mark.anyio

VERSION = "2025-11-25"


class Raw:
    """One handshake-era session over plain HTTP: the client's side, byte for byte."""

    def __init__(self, http: httpx2.AsyncClient, url: str) -> None:
        self.http, self.url = http, url
        self.headers = {"Accept": "application/json, text/event-stream", "Content-Type": "application/json"}

    async def open(self, capabilities: dict[str, Any] | None = None) -> Raw:
        params = {"protocolVersion": VERSION, "capabilities": capabilities or {},
                  "clientInfo": {"name": "raw", "version": "1"}}
        response = await self.post({"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": params})
        assert response.status_code == 200, response.text
        self.headers |= {"Mcp-Session-Id": response.headers["mcp-session-id"], "MCP-Protocol-Version": VERSION}
        assert (await self.post({"jsonrpc": "2.0", "method": "notifications/initialized"})).status_code == 202
        return self

    async def post(self, body: Any, **headers: str) -> httpx2.Response:
        return await self.http.post(self.url, content=json.dumps(body), headers={**self.headers, **headers})


def events(text: str) -> list[dict[str, Any]]:
    return [json.loads(line[5:]) for line in text.splitlines() if line.startswith("data:") and line[5:].strip()]


def call(ident: Any, tool: str, arguments: dict[str, Any], meta: dict[str, Any] | None = None) -> dict[str, Any]:
    params: dict[str, Any] = {"name": tool, "arguments": arguments, **({"_meta": meta} if meta else {})}
    return {"jsonrpc": "2.0", "id": ident, "method": "tools/call", "params": params}


async def test_a_plain_call_is_answered_as_json_and_one_with_progress_as_a_stream(procs: list[Proc],
                                                                                  tmp_path: Path) -> None:
    upstream = start_fixture(procs, "http", "fast-reply")
    url = start_triad(procs, write_config(tmp_path, {"upstreams": {"fx": {"url": upstream}}}), wait_ready=1)
    async with httpx2.AsyncClient(timeout=30) as http:
        session = await Raw(http, url).open()
        plain = await session.post(call("a", "echo", {"text": "hi"}))
        assert plain.headers["content-type"] == "application/json"
        assert plain.headers["mcp-session-id"] == session.headers["Mcp-Session-Id"]
        body = plain.json()
        assert body["id"] == "a" and body["result"]["content"][0]["text"] == "hi"
        assert "resultType" not in body["result"]  # a 2026-07-28 field, not for this version

        streamed = await session.post(call(7, "progress", {"steps": 2}, {"progressToken": "tok"}))
        assert streamed.headers["content-type"] == "text/event-stream"
        messages = events(streamed.text)
        assert [m.get("method") for m in messages] == ["notifications/progress"] * 2 + [None]
        assert [m["params"]["progress"] for m in messages[:2]] == [1, 2]
        assert all(m["params"]["progressToken"] == "tok" for m in messages[:2])
        assert messages[2]["id"] == 7 and messages[2]["result"]["content"][0]["text"] == "2 steps"

        unknown = (await session.post(call(8, "nope", {}))).json()
        assert unknown["id"] == 8 and unknown["error"]["code"] == -32602 and "nope" in unknown["error"]["message"]


async def test_a_result_of_megabytes_comes_through_whole(procs: list[Proc], tmp_path: Path) -> None:
    """An HTTP upstream's reply stream carries the result as one `data:` line: 3 MiB of it once broke the read
    (aiohttp's line reader stops at 512 KiB), and the client got an internal error."""
    upstream = start_fixture(procs, "http", "fast-big")
    url = start_triad(procs, write_config(tmp_path, {"upstreams": {"fx": {"url": upstream}}}), wait_ready=1)
    async with httpx2.AsyncClient(timeout=60) as http:
        session = await Raw(http, url).open()
        for size in (600_000, 3 * 2**20):
            body = (await session.post(call("big", "big", {"size": size}))).json()
            assert "result" in body, body
            assert body["result"]["content"][0]["text"] == "x" * size


def test_a_reply_stream_is_read_in_chunks_and_a_message_over_the_limit_is_refused() -> None:
    stream = _Stream()
    events = _Events(stream)
    message = json.dumps({"jsonrpc": "2.0", "id": 1, "result": {}}).encode()
    wire = b"id: e1\r\nretry: 250\r\nevent: message\r\ndata: " + message + b"\r\n\r\n"
    seen = [m for i in range(len(wire)) for m in events.feed(wire[i:i + 1])]  # a byte at a time: lines straddle
    assert seen == [json.loads(message)] and stream.last_id == "e1" and stream.retry_ms == 250
    with pytest.raises(MCPError, match="over 64 MiB"):
        for _ in range(MAX_MESSAGE // 2**20 + 1):
            events.feed(b"data: " + b"x" * 2**20)  # one endless line


async def test_an_upstream_stream_that_breaks_after_asking_gives_a_precise_error(procs: list[Proc],
                                                                               tmp_path: Path) -> None:
    """The upstream asks the client something mid-call, then its reply stream breaks off: the caller learns that the
    upstream's connection failed (the answer's task group once wrapped the error, which came out as an internal
    error), and the session goes on."""
    raw = Proc([PYTHON, str(ROOT / "tests" / "servers" / "raw_upstream.py"), "--transport", "http", "--breaking"])
    procs.append(raw)
    port = raw.wait_for(r"READY (\d+)").group(1)
    upstream = f"http://127.0.0.1:{port}/mcp"
    url = start_triad(procs, write_config(tmp_path, {"upstreams": {"raw": {"url": upstream}}}), wait_ready=1)
    async with httpx2.AsyncClient(timeout=30) as http:
        session = await Raw(http, url).open({"elicitation": {"form": {}}})
        with anyio.fail_after(20):
            messages = events((await session.post(call(1, "break_raw", {}))).text)
        assert messages[0]["method"] == "elicitation/create"
        error = messages[-1]["error"]
        assert messages[-1]["id"] == 1 and "raw" in error["message"] and "Internal error" not in error["message"], error
        again = (await session.post(call(2, "numbers_raw", {}))).json()
        assert again["result"]["content"], again


async def test_requests_the_direct_path_does_not_take_get_the_sdks_answers(procs: list[Proc], tmp_path: Path) -> None:
    upstream = start_fixture(procs, "http", "fast-fallback")
    url = start_triad(procs, write_config(tmp_path, {"upstreams": {"fx": {"url": upstream}}}), wait_ready=1)
    async with httpx2.AsyncClient(timeout=30) as http:
        session = await Raw(http, url).open()
        # another version in the header than the session's: the SDK serves it, as a stream
        other = await session.post(call(1, "echo", {"text": "sdk"}), **{"MCP-Protocol-Version": "2025-06-18"})
        assert other.headers["content-type"].startswith("text/event-stream")
        assert events(other.text)[-1]["result"]["content"][0]["text"] == "sdk"
        unknown_session = await session.post(call(2, "echo", {"text": "x"}), **{"Mcp-Session-Id": "not-a-session"})
        assert unknown_session.status_code == 404
        malformed = await http.post(url, content=b'{"jsonrpc": "2.0", "id": 3, "method": ', headers=session.headers)
        assert malformed.status_code == 400 and malformed.json()["error"]["code"] == -32700
        wrong_accept = await session.post(call(4, "echo", {"text": "x"}), Accept="application/json")
        assert wrong_accept.status_code == 406
        # the session still serves calls on the direct path after all that
        again = (await session.post(call(5, "echo", {"text": "still"}))).json()
        assert again["result"]["content"][0]["text"] == "still"


async def test_a_client_answers_and_cancels_calls_served_on_the_direct_path(procs: list[Proc], tmp_path: Path) -> None:
    upstream = start_fixture(procs, "http", "fast-answers")
    fixture = procs[-1]
    url = start_triad(procs, write_config(tmp_path, {"upstreams": {"fx": {"url": upstream}}}), wait_ready=1)
    async with httpx2.AsyncClient(timeout=30) as http:
        session = await Raw(http, url).open({"elicitation": {"form": {}}})
        seen: list[dict[str, Any]] = []
        with anyio.fail_after(20):
            async with http.stream("POST", url, content=json.dumps(call(1, "ask", {"question": "ready?"})),
                                   headers=session.headers) as reply:
                assert reply.headers["content-type"] == "text/event-stream"
                async for line in reply.aiter_lines():
                    if not line.startswith("data:"):
                        continue
                    message = json.loads(line[5:])
                    seen.append(message)
                    if message.get("method") == "elicitation/create":
                        assert message["params"]["message"] == "ready?"
                        stray = await session.post({"jsonrpc": "2.0", "id": "triad-ask-999", "result": {}})
                        assert stray.status_code == 202  # not ours: the SDK takes it (and drops it)
                        answer = {"jsonrpc": "2.0", "id": message["id"],
                                  "result": {"action": "accept", "content": {"answer": "raw yes"}}}
                        assert (await session.post(answer)).status_code == 202
        assert "raw yes" in seen[-1]["result"]["content"][0]["text"]

        async def slow_call() -> None:
            response = await session.post(call("slow-1", "slow", {"seconds": 30}))
            seen.append({"status": response.status_code, "events": events(response.text)})

        seen.clear()
        with anyio.fail_after(20):
            async with anyio.create_task_group() as tg:
                tg.start_soon(slow_call)
                await anyio.sleep(0.5)
                cancel = {"jsonrpc": "2.0", "method": "notifications/cancelled",
                          "params": {"requestId": "slow-1", "reason": "changed my mind"}}
                assert (await session.post(cancel)).status_code == 202
            await fixture.until(r"slow call \S+ cancelled")
        assert seen == [{"status": 200, "events": []}]  # the reply ends with no response for the cancelled call


@pytest.mark.parametrize("direct_path", [True, False], ids=["direct", "sdk"])
async def test_a_handshake_client_that_closes_its_connection_cancels_its_call(procs: list[Proc], tmp_path: Path,
                                                                              direct_path: bool) -> None:
    """Triad keeps no event store, so a reply whose connection is gone can never be resumed: the call is
    cancelled at its upstream (here a stdio child, whose stderr is in Triad's log) instead of running on, on the
    direct path and on the SDK's."""
    config = {"upstreams": {"fx": stdio_upstream("fast-disconnect")}, "listen": {"direct_path": direct_path}}
    url = start_triad(procs, write_config(tmp_path, config), wait_ready=1)
    triad = procs[-1]
    async with httpx2.AsyncClient(timeout=30) as http:
        session = await Raw(http, url).open()
        with anyio.fail_after(20):
            async with anyio.create_task_group() as tg:
                tg.start_soon(session.post, call("gone-1", "slow", {"seconds": 60}))
                await triad.until(r"slow call \S+ started")
                tg.cancel_scope.cancel()  # the client goes away: its connection closes
            await triad.until(r"slow call \S+ cancelled")
        after = await session.post(call(2, "echo", {"text": "after"}))
        reply = after.json() if after.headers["content-type"] == "application/json" else events(after.text)[-1]
        assert reply["result"]["content"][0]["text"] == "after"


async def test_requests_served_on_the_direct_path_keep_their_session_alive(procs: list[Proc], tmp_path: Path) -> None:
    """The SDK forgets a session after `session_idle_timeout` without requests; calls and lists that Triad serves
    itself count as requests of their session (`DirectPath._held`), an idle session still expires."""
    upstream = start_fixture(procs, "http", "fast-idle")
    config = {"listen": {"session_idle_timeout": "1.5s"}, "upstreams": {"fx": {"url": upstream}}}
    url = start_triad(procs, write_config(tmp_path, config), wait_ready=1)
    async with httpx2.AsyncClient(timeout=30) as http:
        busy, idle = await Raw(http, url).open(), await Raw(http, url).open()
        for i in range(8):  # 4 s, well past the idle timeout, one direct-path request every 0.5 s
            await anyio.sleep(0.5)
            request = call(i, "echo", {"text": "alive"}) if i % 2 else {"jsonrpc": "2.0", "id": i,
                                                                         "method": "tools/list"}
            response = await session_post(busy, request)
            assert response.headers["content-type"] == "application/json", response.text
        assert (await busy.post(call(99, "echo", {"text": "still"}))).json()["result"]["content"][0]["text"] == "still"
        assert (await idle.post(call(1, "echo", {"text": "gone?"}))).status_code == 404


async def session_post(session: Raw, body: dict[str, Any]) -> httpx2.Response:
    response = await session.post(body)
    assert response.status_code == 200, response.text
    return response


MODERN = "2026-07-28"


async def modern_post(http: httpx2.AsyncClient, url: str, ident: Any, tool: str, arguments: dict[str, Any],
                      capabilities: dict[str, Any] | None = None, **extra: Any) -> httpx2.Response:
    """A stateless 2026-07-28 `tools/call`: the envelope in `_meta`, the routing headers; `extra` joins the params
    (`_meta` entries under `meta`)."""
    meta = {"io.modelcontextprotocol/protocolVersion": MODERN,
            "io.modelcontextprotocol/clientCapabilities": capabilities or {},
            "io.modelcontextprotocol/clientInfo": {"name": "raw", "version": "1"}, **extra.pop("meta", {})}
    headers = {"Accept": "application/json, text/event-stream", "Content-Type": "application/json",
               "MCP-Protocol-Version": MODERN, "Mcp-Method": "tools/call", "Mcp-Name": extra.pop("name_header", tool)}
    params = {"name": tool, "arguments": arguments, "_meta": meta, **extra}
    return await http.post(url, content=json.dumps({"jsonrpc": "2.0", "id": ident, "method": "tools/call",
                                                    "params": params}), headers=headers)


async def test_a_2026_call_on_the_direct_path(procs: list[Proc], tmp_path: Path) -> None:
    """Stateless calls: JSON with Triad's serverInfo, a stream for progress and opted-in logs, the spec's status
    for errors, the SDK's own refusal of a request whose headers disagree with its body."""
    upstream = start_fixture(procs, "http", "fast-modern")
    url = start_triad(procs, write_config(tmp_path, {"upstreams": {"fx": {"url": upstream}}}), wait_ready=1)
    async with httpx2.AsyncClient(timeout=30) as http:
        plain = await modern_post(http, url, 1, "echo", {"text": "now"})
        assert plain.headers["content-type"] == "application/json" and "mcp-session-id" not in plain.headers
        result = plain.json()["result"]
        assert result["content"][0]["text"] == "now" and result["resultType"] == "complete"
        assert result["_meta"]["io.modelcontextprotocol/serverInfo"]["name"] == "triad"
        assert result["_meta"]["fixture/upstream"]  # the upstream's own _meta passes through

        streamed = await modern_post(http, url, 2, "progress", {"steps": 2}, meta={"progressToken": 5})
        assert streamed.headers["content-type"] == "text/event-stream"
        messages = events(streamed.text)
        assert [m.get("method") for m in messages] == ["notifications/progress"] * 2 + [None]
        assert messages[-1]["result"]["content"][0]["text"] == "2 steps"

        quiet = await modern_post(http, url, 3, "log", {})  # no log level in the envelope: no logs
        assert quiet.headers["content-type"] == "application/json"
        logged = await modern_post(http, url, 4, "log", {}, meta={"io.modelcontextprotocol/logLevel": "warning"})
        levels = [m["params"]["level"] for m in events(logged.text) if m.get("method") == "notifications/message"]
        assert levels == ["warning", "error"]

        unknown = await modern_post(http, url, 5, "nope", {})
        assert unknown.status_code == 400 and unknown.json()["error"]["code"] == -32602
        mismatch = await modern_post(http, url, 6, "echo", {"text": "x"}, name_header="other")
        assert mismatch.status_code == 400 and mismatch.json()["error"]["code"] == -32020


async def test_a_2026_client_answers_rounds_and_cancels_by_closing_on_the_direct_path(procs: list[Proc],
                                                                                 tmp_path: Path) -> None:
    upstream = start_fixture(procs, "http", "fast-modern-rounds")
    fixture = procs[-1]
    url = start_triad(procs, write_config(tmp_path, {"upstreams": {"fx": {"url": upstream}}}), wait_ready=1)
    async with httpx2.AsyncClient(timeout=30) as http:
        capabilities = {"elicitation": {"form": {}}}
        first = (await modern_post(http, url, 1, "ask", {"question": "go?"}, capabilities)).json()["result"]
        assert first["resultType"] == "input_required"
        (key, question), = first["inputRequests"].items()
        assert question["method"] == "elicitation/create" and question["params"]["message"] == "go?"
        answer = {"action": "accept", "content": {"answer": "go!"}}
        retried = await modern_post(http, url, 2, "ask", {"question": "go?"}, capabilities,
                                    inputResponses={key: answer}, requestState=first["requestState"])
        assert "go!" in retried.json()["result"]["content"][0]["text"]

        with anyio.move_on_after(0.5):  # the client gives up: its connection closes, which cancels the call
            await modern_post(http, url, 3, "slow", {"seconds": 30})
        with anyio.fail_after(10):
            await fixture.until(r"slow call \S+ cancelled")


async def test_2026_list_pages_on_the_direct_path_equal_the_sdks(procs: list[Proc], tmp_path: Path) -> None:
    """A 2026-07-28 list page is served from bytes with what the SDK adds (cache hint, resultType, serverInfo);
    a request with a `_meta` key the direct path does not know goes to the SDK, and gets the same page."""
    upstream = start_fixture(procs, "http", "fast-modern-lists", "--extra-tools", "40")
    config = {"upstreams": {"fx": {"url": upstream}}, "page_size": 30}
    url = start_triad(procs, write_config(tmp_path, config), wait_ready=1)
    headers = {"Accept": "application/json, text/event-stream", "Content-Type": "application/json",
               "MCP-Protocol-Version": MODERN, "Mcp-Method": "tools/list"}
    envelope = {"io.modelcontextprotocol/protocolVersion": MODERN, "io.modelcontextprotocol/clientCapabilities": {}}
    async with httpx2.AsyncClient(timeout=30) as http:
        pages = []
        for meta in (envelope, {**envelope, "x.example/unknown": 1}):
            cursor: str | None = None
            walked = []
            while True:
                params = {"_meta": meta, **({"cursor": cursor} if cursor else {})}
                response = await http.post(url, headers=headers, content=json.dumps(
                    {"jsonrpc": "2.0", "id": 1, "method": "tools/list", "params": params}))
                assert response.status_code == 200, response.text
                walked.append(response.json())
                if not (cursor := walked[-1]["result"].get("nextCursor")):
                    break
            pages.append(walked)
        assert len(pages[0]) > 1 and pages[0] == pages[1]
        first = pages[0][0]["result"]
        assert (first["ttlMs"], first["cacheScope"], first["resultType"]) == (0, "private", "complete")
        assert first["_meta"]["io.modelcontextprotocol/serverInfo"]["name"] == "triad"
