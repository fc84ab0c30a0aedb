"""A 2025-11-25 task through Triad, compared with a direct connection to the same server (server-everything over
stdio, whose `simulate-research-query` pushes a status at each stage and asks a question on the `tasks/result`
stream when the topic is ambiguous): the client sees every status push a direct client sees, and every message
naming the task (`notifications/tasks/status`, the question's `related-task` `_meta`) names it by the id the client
was given, Triad's, never the upstream's.

The same script runs against each face: the server itself, `triad stdio`, and a handshake-era HTTP session of
`triad serve` (its GET stream carries the pushes).
"""

from __future__ import annotations

import contextlib
import json
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import anyio
import httpx2
import pytest
from anyio.streams.buffered import BufferedByteReceiveStream

from tests.conftest import NODE_DIR, TRIAD, Proc, start_triad, write_config
from tests.raw_clients import HANDSHAKE, JSON_HEADERS, dumps, sse_messages

pytestmark = pytest.mark.anyio

EVERYTHING = NODE_DIR / "node_modules" / ".bin" / "mcp-server-everything"
RESEARCH = "simulate-research-query"
RELATED = "io.modelcontextprotocol/related-task"
CAPABILITIES = {"tasks": {}, "elicitation": {"form": {}}}
DEADLINE = 60.0


@dataclass
class Seen:
    """Every message a client got, in order, and a way to wait for one."""

    messages: list[dict[str, Any]] = field(default_factory=list)
    changed: anyio.Event = field(default_factory=anyio.Event)

    def add(self, message: dict[str, Any]) -> None:
        self.messages.append(message)
        self.changed.set()
        self.changed = anyio.Event()

    async def until(self, found: Callable[[dict[str, Any]], bool]) -> dict[str, Any]:
        with anyio.fail_after(DEADLINE):
            while not any(found(m) for m in self.messages):
                await self.changed.wait()
        return next(m for m in self.messages if found(m))


Send = Callable[[dict[str, Any]], Awaitable[None]]


@asynccontextmanager
async def over_stdio(command: list[str]) -> AsyncIterator[tuple[Send, Seen]]:
    """A line-delimited JSON-RPC peer (the server itself, or `triad stdio`), initialized with `CAPABILITIES`."""
    seen = Seen()
    async with await anyio.open_process(command) as process, anyio.create_task_group() as tg:
        assert process.stdin is not None and process.stdout is not None
        out = BufferedByteReceiveStream(process.stdout)

        async def read() -> None:
            with contextlib.suppress(anyio.EndOfStream, anyio.IncompleteRead):  # the peer ended
                while True:
                    seen.add(json.loads(await out.receive_until(b"\n", 64 * 2**20)))

        async def send(message: dict[str, Any]) -> None:
            assert process.stdin is not None
            await process.stdin.send(dumps(message) + b"\n")

        tg.start_soon(read)
        try:
            await send(initialize())
            await seen.until(lambda m: m.get("id") == "init")
            await send({"jsonrpc": "2.0", "method": "notifications/initialized"})
            yield send, seen
        finally:
            await process.stdin.aclose()
            with anyio.move_on_after(15):
                await process.wait()
            if process.returncode is None:
                process.kill()
            tg.cancel_scope.cancel()


@asynccontextmanager
async def over_http(url: str) -> AsyncIterator[tuple[Send, Seen]]:
    """A handshake-era HTTP session: answers on each POST's stream, pushes on the GET stream."""
    seen = Seen()
    async with httpx2.AsyncClient(timeout=DEADLINE) as http, anyio.create_task_group() as tg:
        response = await http.post(url, content=dumps(initialize()), headers=JSON_HEADERS)
        headers = {**JSON_HEADERS, "Mcp-Session-Id": response.headers["mcp-session-id"],
                   "MCP-Protocol-Version": HANDSHAKE}

        async def post(message: dict[str, Any]) -> None:
            async with http.stream("POST", url, content=dumps(message), headers=headers) as got:
                async for line in got.aiter_lines():
                    for parsed in sse_messages(line):
                        seen.add(parsed)

        async def send(message: dict[str, Any]) -> None:
            tg.start_soon(post, message)

        async def listen(*, task_status: Any = anyio.TASK_STATUS_IGNORED) -> None:
            async with http.stream("GET", url, headers={**headers, "Accept": "text/event-stream"}) as got:
                task_status.started()
                async for line in got.aiter_lines():
                    for parsed in sse_messages(line):
                        seen.add(parsed)

        await post({"jsonrpc": "2.0", "method": "notifications/initialized"})
        await tg.start(listen)
        yield send, seen
        tg.cancel_scope.cancel()


def initialize() -> dict[str, Any]:
    return {"jsonrpc": "2.0", "id": "init", "method": "initialize", "params": {
        "protocolVersion": HANDSHAKE, "capabilities": CAPABILITIES, "clientInfo": {"name": "fidelity", "version": "1"}}}


@dataclass(frozen=True)
class Run:
    task_id: str
    statuses: list[str]
    """The status of each push naming the task, in order of arrival."""
    named: list[str]
    """The task id each message about a task named (status pushes, the question's related-task)."""
    questions: int


async def research(send: Send, seen: Seen) -> Run:
    """Run an ambiguous research task to its end, answering its question; what the client saw of it."""
    await send({"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": {
        "name": RESEARCH, "arguments": {"topic": "python", "ambiguous": True}, "task": {"ttl": 60_000}}})
    task_id = (await seen.until(lambda m: m.get("id") == 1))["result"]["task"]["taskId"]
    await send({"jsonrpc": "2.0", "id": 2, "method": "tasks/result", "params": {"taskId": task_id}})
    question = await seen.until(lambda m: m.get("method") == "elicitation/create")
    await send({"jsonrpc": "2.0", "id": question["id"], "result": {"action": "accept",
                                                                   "content": {"interpretation": "snake"}}})
    await seen.until(lambda m: m.get("id") == 2 and "method" not in m)
    await seen.until(lambda m: m.get("method") == "notifications/tasks/status"
                     and m["params"].get("status") == "completed")
    pushes = [m["params"] for m in seen.messages if m.get("method") == "notifications/tasks/status"]
    asks = [m["params"] for m in seen.messages if m.get("method") == "elicitation/create"]
    return Run(task_id, [p["status"] for p in pushes],
               [p["taskId"] for p in pushes] + [a.get("_meta", {}).get(RELATED, {}).get("taskId") for a in asks],
               len(asks))


def config(tmp_path: Path, sessions: str) -> Path:
    if not EVERYTHING.exists():
        pytest.fail("server-everything is not installed: run `npm install` in tests/node (make test does it)")
    return write_config(tmp_path, {"upstreams": {"everything": {"command": str(EVERYTHING), "args": ["stdio"],
                                                                "timeout": "60s", "sessions": sessions}},
                                   "naming": {"prefix": "never"}})


@pytest.mark.parametrize(("face", "sessions"), [("stdio", "shared"), ("http", "shared"), ("http", "per_client")])
async def test_a_task_through_triad_is_seen_as_directly_and_named_by_triads_id(
        procs: list[Proc], tmp_path: Path, face: str, sessions: str) -> None:
    """`per_client`: the task lives on the client's own upstream session, whose pushes are routed by it."""
    async with over_stdio([str(EVERYTHING), "stdio"]) as direct:
        want = await research(*direct)
    assert want.questions == 1 and set(want.named) == {want.task_id}

    if face == "stdio":
        through = over_stdio([*TRIAD, "stdio", "-c", str(config(tmp_path, sessions))])
    else:
        through = over_http(start_triad(procs, config(tmp_path, sessions), wait_ready=1))
    async with through as client:
        got = await research(*client)
    assert got.questions == 1
    assert set(got.named) == {got.task_id}, f"messages name the upstream's task id: {got.named}"
    assert got.statuses == want.statuses, (want.statuses, got.statuses)
