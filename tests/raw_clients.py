"""Raw clients of Triad's four faces, byte for byte, for tests that send what no SDK client would: a handshake-era
HTTP session, stateless 2026-07-28 requests, a legacy SSE session and a `triad stdio` process.

Each reads with a deadline, so a test that waits for an answer that never comes fails instead of hanging.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import anyio
import httpx2
from anyio.abc import Process
from anyio.streams.buffered import BufferedByteReceiveStream

from tests.conftest import TRIAD

HANDSHAKE = "2025-11-25"
MODERN = "2026-07-28"
DEADLINE = 20.0
"""Seconds any one answer may take before the test fails (an answer that never comes is a hang)."""
JSON_HEADERS = {"Accept": "application/json, text/event-stream", "Content-Type": "application/json"}


def dumps(value: Any) -> bytes:
    return json.dumps(value).encode()


def initialize(ident: Any = 0) -> dict[str, Any]:
    return {"jsonrpc": "2.0", "id": ident, "method": "initialize",
            "params": {"protocolVersion": HANDSHAKE, "capabilities": {}, "clientInfo": {"name": "raw", "version": "1"}}}


def call(ident: Any, tool: str, arguments: Any, meta: dict[str, Any] | None = None) -> dict[str, Any]:
    params: dict[str, Any] = {"name": tool, "arguments": arguments, **({"_meta": meta} if meta else {})}
    return {"jsonrpc": "2.0", "id": ident, "method": "tools/call", "params": params}


def sse_messages(text: str) -> list[dict[str, Any]]:
    return [json.loads(line[5:]) for line in text.splitlines() if line.startswith("data:") and line[5:].strip()]


def answer_of(response: httpx2.Response) -> dict[str, Any]:
    """The JSON-RPC message answering a POST: the body, or the last message of its event stream."""
    if response.headers.get("content-type", "").startswith("text/event-stream"):
        return sse_messages(response.text)[-1]
    return response.json()


class HandshakeSession:
    """A handshake-era streamable HTTP session (initialize, then requests with Mcp-Session-Id)."""

    def __init__(self, http: httpx2.AsyncClient, url: str) -> None:
        self.http, self.url = http, url
        self.headers = dict(JSON_HEADERS)

    async def open(self) -> HandshakeSession:
        response = await self.post(dumps(initialize()))
        assert response.status_code == 200, response.text
        self.headers |= {"Mcp-Session-Id": response.headers["mcp-session-id"], "MCP-Protocol-Version": HANDSHAKE}
        assert (await self.post(dumps({"jsonrpc": "2.0", "method": "notifications/initialized"}))).status_code == 202
        return self

    async def post(self, body: bytes, headers: dict[str, str] | None = None) -> httpx2.Response:
        with anyio.fail_after(DEADLINE):
            return await self.http.post(self.url, content=body, headers={**self.headers, **(headers or {})})


def modern_headers(method: str, name: str | None = None) -> dict[str, str]:
    headers = {**JSON_HEADERS, "MCP-Protocol-Version": MODERN, "Mcp-Method": method}
    return headers | ({"Mcp-Name": name} if name is not None else {})


def modern_call(ident: Any, tool: str, arguments: Any, meta: dict[str, Any] | None = None) -> dict[str, Any]:
    """A stateless 2026-07-28 `tools/call` with its envelope in `_meta` (send with `modern_headers`)."""
    envelope = {"io.modelcontextprotocol/protocolVersion": MODERN, "io.modelcontextprotocol/clientCapabilities": {},
                "io.modelcontextprotocol/clientInfo": {"name": "raw", "version": "1"}, **(meta or {})}
    return call(ident, tool, arguments, envelope)


async def modern_post(http: httpx2.AsyncClient, url: str, body: bytes, headers: dict[str, str]) -> httpx2.Response:
    with anyio.fail_after(DEADLINE):
        return await http.post(url, content=body, headers=headers)


class SseSession:
    """A legacy SSE session: GET /sse, POSTs to the endpoint it names, answers on the event stream."""

    def __init__(self, http: httpx2.AsyncClient, base: str, lines: AsyncIterator[str]) -> None:
        self.http, self.base, self._lines = http, base, lines
        self.endpoint = ""

    async def receive(self) -> dict[str, Any]:
        """The next JSON-RPC message on the event stream."""
        with anyio.fail_after(DEADLINE):
            async for line in self._lines:
                if line.startswith("data:") and line[5:].strip().startswith("{"):
                    return json.loads(line[5:])
        raise AssertionError("the SSE stream ended")

    async def post(self, body: bytes) -> httpx2.Response:
        with anyio.fail_after(DEADLINE):
            return await self.http.post(self.base + self.endpoint, content=body,
                                        headers={"Content-Type": "application/json"})

    async def request(self, message: dict[str, Any]) -> dict[str, Any]:
        response = await self.post(dumps(message))
        assert response.status_code == 202, response.text
        return await self.receive()


@asynccontextmanager
async def sse_session(http: httpx2.AsyncClient, mcp_url: str) -> AsyncIterator[SseSession]:
    base = mcp_url.removesuffix("/mcp")
    async with http.stream("GET", base + "/sse", headers={"Accept": "text/event-stream"}) as stream:
        session = SseSession(http, base, stream.aiter_lines())
        with anyio.fail_after(DEADLINE):
            async for line in session._lines:
                if line.startswith("data:") and "/messages/" in line:
                    session.endpoint = line[5:].strip()
                    break
        assert (await session.request(initialize()))["result"]["protocolVersion"] == HANDSHAKE
        assert (await session.post(dumps({"jsonrpc": "2.0", "method": "notifications/initialized"}))).status_code == 202
        yield session


class StdioSession:
    """`triad stdio` as a child process: one JSON-RPC message per line each way."""

    def __init__(self, process: Process) -> None:
        self.process = process
        assert process.stdout is not None
        self._out = BufferedByteReceiveStream(process.stdout)

    async def send(self, line: bytes) -> None:
        assert self.process.stdin is not None
        await self.process.stdin.send(line if line.endswith(b"\n") else line + b"\n")

    async def receive(self) -> dict[str, Any]:
        """The next response (notifications such as `list_changed` are skipped)."""
        with anyio.fail_after(DEADLINE):
            while True:
                message = json.loads(await self._out.receive_until(b"\n", 64 * 2**20))
                if "id" in message or "method" not in message:
                    return message

    async def request(self, message: dict[str, Any]) -> dict[str, Any]:
        await self.send(dumps(message))
        return await self.receive()


@asynccontextmanager
async def stdio_session(config: Path) -> AsyncIterator[StdioSession]:
    async with await anyio.open_process([*TRIAD, "stdio", "-c", str(config)]) as process:
        session = StdioSession(process)
        try:
            assert (await session.request(initialize()))["result"]["protocolVersion"] == HANDSHAKE
            await session.send(dumps({"jsonrpc": "2.0", "method": "notifications/initialized"}))
            yield session
        finally:
            if process.stdin is not None:
                await process.stdin.aclose()
            with anyio.move_on_after(15):
                await process.wait()
            if process.returncode is None:
                process.kill()
