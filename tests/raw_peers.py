"""Raw JSON-RPC peers of the handshake era for wire comparisons: one `exchange()` sends a request and returns every
message that came back for it (its notifications, then its response), parsed but otherwise untouched.

The same three faces serve a direct connection to an upstream and a connection to Triad: stdio (a child process,
one message per line), streamable HTTP (a session; a reply is JSON or an event stream) and legacy SSE (a GET
stream, requests POSTed to the endpoint it names). Each read has a deadline, so a lost answer fails the test.
"""

from __future__ import annotations

import json
import math
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any, Protocol

import anyio
import httpx2
from anyio.streams.buffered import BufferedByteReceiveStream

from tests.raw_clients import DEADLINE, HANDSHAKE, JSON_HEADERS, dumps, initialize, sse_messages

INITIALIZED = {"jsonrpc": "2.0", "method": "notifications/initialized"}


class Peer(Protocol):
    async def exchange(self, message: dict[str, Any]) -> list[dict[str, Any]]: ...


def typed(value: Any) -> Any:
    """A JSON value with its types made explicit, for comparisons where `1 == 1.0` and `0.0 == -0.0` must fail."""
    if isinstance(value, bool) or value is None or isinstance(value, str):
        return value
    if isinstance(value, int):
        return ("int", value)
    if isinstance(value, float):
        return ("float", repr(value) if not math.isnan(value) else "nan")
    if isinstance(value, dict):
        return {key: typed(item) for key, item in value.items()}
    if isinstance(value, list):
        return [typed(item) for item in value]
    raise TypeError(type(value))


def diff(want: Any, got: Any, path: str = "") -> list[str]:
    """Where `got` differs from `want`, path by path (types made explicit)."""
    if isinstance(want, dict) and isinstance(got, dict):
        return [line for key in {**want, **got}
                for line in diff(want.get(key, "<absent>"), got.get(key, "<absent>"), f"{path}.{key}")]
    if isinstance(want, list) and isinstance(got, list) and len(want) == len(got):
        return [line for i, (w, g) in enumerate(zip(want, got, strict=True)) for line in diff(w, g, f"{path}[{i}]")]
    return [] if typed(want) == typed(got) else [f"{path or '.'}: {got!r} (want {want!r})"]


class StdioPeer:
    def __init__(self, process: anyio.abc.Process) -> None:
        assert process.stdin is not None and process.stdout is not None
        self._process = process
        self._out = BufferedByteReceiveStream(process.stdout)

    async def send(self, message: dict[str, Any]) -> None:
        assert self._process.stdin is not None
        await self._process.stdin.send(dumps(message) + b"\n")

    async def exchange(self, message: dict[str, Any]) -> list[dict[str, Any]]:
        await self.send(message)
        return await self._until(message.get("id"))

    async def lines(self) -> bytes:
        """The next line, unparsed (for comparisons of the text itself)."""
        with anyio.fail_after(DEADLINE):
            return await self._out.receive_until(b"\n", 64 * 2**20)

    async def _until(self, ident: Any) -> list[dict[str, Any]]:
        found: list[dict[str, Any]] = []
        with anyio.fail_after(DEADLINE):
            while True:
                found.append(json.loads(await self._out.receive_until(b"\n", 64 * 2**20)))
                if ident is None or (found[-1].get("id") == ident and "method" not in found[-1]):
                    return found


@asynccontextmanager
async def stdio_peer(command: list[str]) -> AsyncIterator[StdioPeer]:
    async with await anyio.open_process(command) as process:
        peer = StdioPeer(process)
        try:
            [answer] = [m for m in await peer.exchange(initialize()) if "id" in m]
            assert answer["result"]["protocolVersion"] == HANDSHAKE, answer
            assert process.stdin is not None
            await process.stdin.send(dumps(INITIALIZED) + b"\n")
            yield peer
        finally:
            if process.stdin is not None:
                await process.stdin.aclose()
            with anyio.move_on_after(15):
                await process.wait()
            if process.returncode is None:
                process.kill()


class HttpPeer:
    def __init__(self, http: httpx2.AsyncClient, url: str) -> None:
        self._http, self._url = http, url
        self._headers = dict(JSON_HEADERS)

    async def post(self, message: dict[str, Any]) -> httpx2.Response:
        with anyio.fail_after(DEADLINE):
            return await self._http.post(self._url, content=dumps(message), headers=self._headers)

    async def exchange(self, message: dict[str, Any]) -> list[dict[str, Any]]:
        response = await self.post(message)
        assert response.status_code == 200, response.text
        if response.headers.get("content-type", "").startswith("text/event-stream"):
            return sse_messages(response.text)
        return [response.json()]


@asynccontextmanager
async def http_peer(url: str) -> AsyncIterator[HttpPeer]:
    async with httpx2.AsyncClient(timeout=DEADLINE) as http:
        peer = HttpPeer(http, url)
        response = await peer.post(initialize())
        assert response.status_code == 200, response.text
        peer._headers |= {"Mcp-Session-Id": response.headers["mcp-session-id"], "MCP-Protocol-Version": HANDSHAKE}
        assert (await peer.post(INITIALIZED)).status_code == 202
        yield peer


class SsePeer:
    def __init__(self, http: httpx2.AsyncClient, base: str, lines: AsyncIterator[str]) -> None:
        self._http, self._base, self._lines = http, base, lines
        self.endpoint = ""

    async def post(self, message: dict[str, Any]) -> None:
        with anyio.fail_after(DEADLINE):
            response = await self._http.post(self._base + self.endpoint, content=dumps(message),
                                             headers={"Content-Type": "application/json"})
        assert response.status_code == 202, response.text

    async def exchange(self, message: dict[str, Any]) -> list[dict[str, Any]]:
        await self.post(message)
        found: list[dict[str, Any]] = []
        with anyio.fail_after(DEADLINE):
            async for line in self._lines:
                if line.startswith("data:") and line[5:].strip().startswith("{"):
                    found.append(json.loads(line[5:]))
                    if found[-1].get("id") == message.get("id") and "method" not in found[-1]:
                        return found
        raise AssertionError("the SSE stream ended")


@asynccontextmanager
async def sse_peer(sse_url: str) -> AsyncIterator[SsePeer]:
    base = sse_url.removesuffix("/sse")
    async with httpx2.AsyncClient(timeout=DEADLINE) as http, \
            http.stream("GET", sse_url, headers={"Accept": "text/event-stream"}) as stream:
        peer = SsePeer(http, base, stream.aiter_lines())
        with anyio.fail_after(DEADLINE):
            async for line in peer._lines:
                if line.startswith("data:") and "/messages/" in line:
                    peer.endpoint = line[5:].strip()
                    break
        [answer] = [m for m in await peer.exchange(initialize()) if "id" in m]
        assert answer["result"]["protocolVersion"] == HANDSHAKE, answer
        await peer.post(INITIALIZED)
        yield peer
