"""Tasks through Triad, with real servers and raw clients of both eras: task ids belong to the client that created
the task (another client gets what an unknown id gets), `tasks/*` reach the upstream session that holds the task,
status pushes reach the owner only, and a tool that runs only as a task is seen only by clients that take tasks.

2025-11-25: server-everything (its `simulate-research-query` runs only as a task) over stdio, on Triad's shared
upstream session and on each client's own (`sessions: per_client`: a request routed to the wrong session, another
process there, would find no task). 2026-07-28: the conformance fixture (`tests/servers/conformance_tasks.py`).
"""

from __future__ import annotations

import dataclasses
import gc
import json
import socket
import weakref
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import anyio
import httpx2
import pytest
from anyio.streams.buffered import BufferedByteReceiveStream

from consumers.errors import UpstreamRefused
from gateway.errors import UnknownName
from gateway.hooks._chain import CallContext, Session
from gateway.hooks._factory import build_chain
from gateway.identity import Identity
from gateway.runtime._loading import parse_config
from gateway.tasks import _records as tasks
from gateway.tasks._records import TaskBook
from gateway.tasks._relay import TaskRelay
from gateway.tasks._relayed import MAX_KEPT_ARGUMENTS, kept_call, refused_as_triads
from tests.conftest import NODE_DIR, PYTHON, ROOT, TRIAD, Proc, marker, start_triad, write_config
from tests.raw_clients import (
    HANDSHAKE,
    JSON_HEADERS,
    MODERN,
    answer_of,
    dumps,
    modern_call,
    modern_headers,
    modern_post,
)

pytestmark = pytest.mark.anyio

ADA, BOB, CAL = "ada-secret-0123456789", "bob-secret-9876543210", "cal-secret-5555555555"
CLIENTS = {"ada": {"token": ADA}, "bob": {"token": BOB}, "cal": {"token": CAL}}
EVERYTHING = NODE_DIR / "node_modules" / ".bin" / "mcp-server-everything"
RESEARCH = "simulate-research-query"
EXTENSION = "io.modelcontextprotocol/tasks"


def request(ident: Any, method: str, params: dict[str, Any]) -> dict[str, Any]:
    return {"jsonrpc": "2.0", "id": ident, "method": method, "params": params}


class Client:
    """A handshake-era HTTP session of one client, with its GET stream read into `pushed`."""

    def __init__(self, http: httpx2.AsyncClient, url: str, token: str) -> None:
        self.http, self.url = http, url
        self.headers = {**JSON_HEADERS, "Authorization": f"Bearer {token}"}
        self.pushed: list[dict[str, Any]] = []
        self.capabilities: dict[str, Any] = {}
        self.changed = anyio.Event()
        self._ids = iter(range(1, 10_000))

    async def open(self, capabilities: dict[str, Any]) -> Client:
        init = request(0, "initialize", {"protocolVersion": HANDSHAKE, "capabilities": capabilities,
                                         "clientInfo": {"name": "tasks-test", "version": "1"}})
        response = await self.http.post(self.url, content=dumps(init), headers=self.headers)
        assert response.status_code == 200, response.text
        self.capabilities = answer_of(response)["result"]["capabilities"]
        self.headers |= {"Mcp-Session-Id": response.headers["mcp-session-id"], "MCP-Protocol-Version": HANDSHAKE}
        await self.http.post(self.url, content=dumps({"jsonrpc": "2.0", "method": "notifications/initialized"}),
                             headers=self.headers)
        return self

    async def ask(self, method: str, params: dict[str, Any]) -> dict[str, Any]:
        with anyio.fail_after(60):
            response = await self.http.post(self.url, content=dumps(request(next(self._ids), method, params)),
                                            headers=self.headers)
        return answer_of(response)

    async def listen(self, *, task_status: Any = anyio.TASK_STATUS_IGNORED) -> None:
        async with self.http.stream("GET", self.url, headers={**self.headers, "Accept": "text/event-stream"}) as got:
            task_status.started()
            async for line in got.aiter_lines():
                if line.startswith("data:") and line[5:].strip():
                    self.pushed.append(json.loads(line[5:]))
                    self.changed.set()
                    self.changed = anyio.Event()

    def statuses(self) -> list[dict[str, Any]]:
        return [m["params"] for m in self.pushed if m.get("method") == "notifications/tasks/status"]

    async def wait_status(self, task_id: str, status: str) -> None:
        with anyio.fail_after(60):
            while not any(p.get("taskId") == task_id and p.get("status") == status for p in self.statuses()):
                await self.changed.wait()


def names(listing: dict[str, Any]) -> set[str]:
    return {tool["name"] for tool in listing["result"]["tools"]}


def everything_config(tmp_path: Path, sessions: str, procs: list[Proc] | None = None) -> Path:
    """server-everything over stdio, or with `procs` over streamable HTTP (its tasks are per HTTP session, and
    its status pushes come on the session's GET stream)."""
    if not EVERYTHING.exists():
        pytest.fail("server-everything is not installed: run `npm install` in tests/node (make test does it)")
    upstream: dict[str, Any] = {"command": str(EVERYTHING), "args": ["stdio"]}
    if procs is not None:
        with socket.socket() as sock:
            sock.bind(("127.0.0.1", 0))
            port = sock.getsockname()[1]
        procs.append(Proc([str(EVERYTHING), "streamableHttp"], env={"PORT": str(port)}))
        procs[-1].wait_for(r"listening on port")
        upstream = {"url": f"http://127.0.0.1:{port}/mcp"}
    return write_config(tmp_path, {"upstreams": {"everything": {**upstream, "sessions": sessions, "timeout": "60s"}},
                                   "naming": {"prefix": "never"}, "clients": CLIENTS})


@pytest.mark.parametrize(("sessions", "transport"), [("shared", "stdio"), ("per_client", "stdio"),
                                                     ("shared", "http"), ("per_client", "http")])
async def test_a_legacy_task_belongs_to_its_client_and_its_status_reaches_only_it(
        procs: list[Proc], tmp_path: Path, sessions: str, transport: str) -> None:
    config = everything_config(tmp_path, sessions, procs if transport == "http" else None)
    url = start_triad(procs, config, wait_ready=1)
    async with httpx2.AsyncClient(timeout=60) as http, anyio.create_task_group() as tg:
        ada = await Client(http, url, ADA).open({"tasks": {}})
        bob = await Client(http, url, BOB).open({"tasks": {}})
        cal = await Client(http, url, CAL).open({})
        await tg.start(ada.listen)
        await tg.start(bob.listen)

        assert ada.capabilities["tasks"] == {"list": {}, "cancel": {}, "requests": {"tools": {"call": {}}}}
        # a tool that runs only as a task: seen and callable only by clients that take tasks
        assert RESEARCH in names(await ada.ask("tools/list", {}))
        assert RESEARCH not in names(await cal.ask("tools/list", {}))
        hidden = await cal.ask("tools/call", {"name": RESEARCH, "arguments": {"topic": "x"}, "task": {}})
        assert hidden["error"]["code"] == -32602 and "Unknown tool" in hidden["error"]["message"]

        created = (await ada.ask("tools/call", {"name": RESEARCH, "arguments": {"topic": "quantum"},
                                                "task": {"ttl": 60_000}}))["result"]
        task_id = created["task"]["taskId"]
        assert created["task"]["status"] == "working" and len(task_id) >= 32
        assert (await ada.ask("tasks/get", {"taskId": task_id}))["result"]["taskId"] == task_id
        assert [t["taskId"] for t in (await ada.ask("tasks/list", {}))["result"]["tasks"]] == [task_id]

        # another client, and another session of the same kind, get what an unknown id gets
        unknown = await bob.ask("tasks/get", {"taskId": "no-such-task"})
        for method in ("tasks/get", "tasks/result", "tasks/cancel"):
            refused = (await bob.ask(method, {"taskId": task_id}))["error"]
            assert refused["code"] == unknown["error"]["code"] == -32602, method
            assert refused["message"].replace(task_id, "ID") == unknown["error"]["message"].replace("no-such-task",
                                                                                                   "ID")
        assert (await bob.ask("tasks/list", {}))["result"]["tasks"] == []

        result = (await ada.ask("tasks/result", {"taskId": task_id}))["result"]
        assert result["content"] and result["_meta"]["io.modelcontextprotocol/related-task"] == {"taskId": task_id}
        await ada.wait_status(task_id, "completed")
        assert all(status["taskId"] == task_id for status in ada.statuses())
        assert bob.statuses() == []  # the owner's pushes went out; none of them to anyone else
        done = (await ada.ask("tasks/get", {"taskId": task_id}))["result"]
        assert done["status"] == "completed"
        tg.cancel_scope.cancel()


async def test_a_legacy_task_is_cancelled_by_its_owner_session_only(procs: list[Proc], tmp_path: Path) -> None:
    url = start_triad(procs, everything_config(tmp_path, "shared"), wait_ready=1)
    async with httpx2.AsyncClient(timeout=60) as http:
        ada = await Client(http, url, ADA).open({"tasks": {}})
        bob = await Client(http, url, BOB).open({"tasks": {}})
        task_id = (await ada.ask("tools/call", {"name": RESEARCH, "arguments": {"topic": "x"},
                                                "task": {}}))["result"]["task"]["taskId"]
        assert (await bob.ask("tasks/cancel", {"taskId": task_id}))["error"]["code"] == -32602
        # 2025-11-25 tasks live in an upstream session: another session of the same client has none of them
        ada_again = await Client(http, url, ADA).open({"tasks": {}})
        assert (await ada_again.ask("tasks/cancel", {"taskId": task_id}))["error"]["code"] == -32602
        assert (await ada_again.ask("tasks/list", {}))["result"]["tasks"] == []
        assert (await ada.ask("tasks/get", {"taskId": task_id}))["result"]["status"] == "working"
        cancelled = (await ada.ask("tasks/cancel", {"taskId": task_id}))["result"]
        assert (cancelled["taskId"], cancelled["status"]) == (task_id, "cancelled")


@asynccontextmanager
async def modern_triad(procs: list[Proc], tmp_path: Path, protocol: str = "auto", **extra: Any) -> AsyncIterator[str]:
    """Triad in front of the conformance fixture, which runs tasks in both eras (`protocol: handshake`: Triad
    speaks 2025-11-25 to it)."""
    fixture = Proc([PYTHON, str(ROOT / "tests" / "servers" / "conformance_upstream.py"), "--transport", "http",
                    "--name", marker("tasks-modern")])
    procs.append(fixture)
    port = fixture.wait_for(r"READY (\d+)").group(1)
    upstream = {"url": f"http://127.0.0.1:{port}/mcp", "protocol": protocol}
    config = write_config(tmp_path, {"upstreams": {"fx": upstream}, "naming": {"prefix": "never"}, "clients": CLIENTS,
                                     **extra})
    yield start_triad(procs, config, wait_ready=1)


def modern(ident: Any, method: str, params: dict[str, Any], extension: bool = True,
           asks: dict[str, Any] | None = None) -> dict[str, Any]:
    caps = {**({"extensions": {EXTENSION: {}}} if extension else {}), **(asks or {})}
    envelope = {"io.modelcontextprotocol/protocolVersion": MODERN, "io.modelcontextprotocol/clientCapabilities": caps,
                "io.modelcontextprotocol/clientInfo": {"name": "tasks-test", "version": "1"}}
    return request(ident, method, {**params, "_meta": envelope})


async def modern_ask(http: httpx2.AsyncClient, url: str, token: str, method: str, params: dict[str, Any],
                     extension: bool = True, asks: dict[str, Any] | None = None) -> dict[str, Any]:
    """`asks`: the capabilities the request declares beyond the tasks extension (sampling, elicitation)."""
    headers = modern_headers(method, params.get("taskId") or params.get("name")) | {"Authorization": f"Bearer {token}"}
    return answer_of(await modern_post(http, url, dumps(modern(1, method, params, extension, asks)), headers))


async def test_a_modern_task_belongs_to_the_principal_that_created_it(procs: list[Proc], tmp_path: Path) -> None:
    async with modern_triad(procs, tmp_path) as url, httpx2.AsyncClient(timeout=60) as http:
        created = (await modern_ask(http, url, ADA, "tools/call", {"name": "slow_compute",
                                                                   "arguments": {"seconds": 60, "label": "x"}}))
        task_id = created["result"]["taskId"]
        assert created["result"]["resultType"] == "task" and task_id != "task-1" and len(task_id) >= 32
        assert (await modern_ask(http, url, ADA, "tasks/get", {"taskId": task_id}))["result"]["status"] == "working"
        unknown = await modern_ask(http, url, BOB, "tasks/get", {"taskId": "no-such-task"})
        for method in ("tasks/get", "tasks/cancel", "tasks/update"):
            params = {"taskId": task_id, **({"inputResponses": {}} if method == "tasks/update" else {})}
            refused = await modern_ask(http, url, BOB, method, params)
            assert refused["error"]["code"] == unknown["error"]["code"] == -32602, method
        without = await modern_ask(http, url, ADA, "tasks/get", {"taskId": task_id}, extension=False)
        assert without["error"]["code"] == -32021
        assert (await modern_ask(http, url, ADA, "tasks/cancel", {"taskId": task_id}))["result"]["resultType"] \
            == "complete"
        # the fixture settles a cancelled task at once (a server may take its time: clients poll)
        assert (await modern_ask(http, url, ADA, "tasks/get", {"taskId": task_id}))["result"]["status"] \
            == "cancelled"


async def test_2026_callers_tasks_on_a_per_client_upstream_stay_each_callers_own(procs: list[Proc],
                                                                                 tmp_path: Path) -> None:
    """Two 2026-07-28 callers of a handshake-era `per_client` stdio upstream (whose session numbers its tasks from
    `task-1`, whoever asks): each one's task answers its own `tasks/get`, before and after the other's task exists,
    and never the other's. (With the callers' own upstream sessions, the first `tasks/get` once lost the task: it
    was created on the caller's session and looked for on the shared one.)"""
    fixture = [str(ROOT / "tests" / "servers" / "conformance_upstream.py"), "--transport", "stdio"]
    config = write_config(tmp_path, {"upstreams": {"fx": {"command": PYTHON, "args": fixture, "protocol": "handshake",
                                                          "sessions": "per_client", "timeout": "60s"}},
                                     "naming": {"prefix": "never"}, "clients": CLIENTS})
    url = start_triad(procs, config, wait_ready=1)
    call = {"name": "slow_compute", "arguments": {"seconds": 60, "label": "x"}}
    async with httpx2.AsyncClient(timeout=60) as http:
        ada = (await modern_ask(http, url, ADA, "tools/call", call))["result"]["taskId"]
        assert (await modern_ask(http, url, ADA, "tasks/get", {"taskId": ada}))["result"]["status"] == "working"
        bob = (await modern_ask(http, url, BOB, "tools/call", call))["result"]["taskId"]
        for token, mine, theirs in ((ADA, ada, bob), (BOB, bob, ada)):
            assert (await modern_ask(http, url, token, "tasks/get", {"taskId": mine}))["result"]["status"] == "working"
            assert (await modern_ask(http, url, token, "tasks/get", {"taskId": theirs}))["error"]["code"] == -32602
        assert (await modern_ask(http, url, ADA, "tasks/cancel", {"taskId": ada}))["result"]["resultType"] == "complete"
        assert (await modern_ask(http, url, ADA, "tasks/get", {"taskId": ada}))["result"]["status"] == "cancelled"
        assert (await modern_ask(http, url, BOB, "tasks/get", {"taskId": bob}))["result"]["status"] == "working"


async def settled(http: httpx2.AsyncClient, url: str, task_id: str, until: str = "") -> dict[str, Any]:
    """Poll a 2026-07-28 task as a client does (the fixture's pollIntervalMs is 200) until it is terminal, or
    `until`."""
    for _ in range(150):
        got = (await modern_ask(http, url, ADA, "tasks/get", {"taskId": task_id}))["result"]
        if got["status"] in ("completed", "failed", "cancelled", until):
            return got
        await anyio.sleep(0.2)
    raise AssertionError(f"task {task_id} is still {got['status']}")


async def test_a_modern_clients_task_on_a_handshake_era_upstream_is_translated(procs: list[Proc],
                                                                               tmp_path: Path) -> None:
    """A 2026-07-28 client, a 2025-11-25 upstream: the task is the client's, in the client's era, both ways."""
    async with modern_triad(procs, tmp_path, protocol="handshake") as url, httpx2.AsyncClient(timeout=60) as http:
        created = (await modern_ask(http, url, ADA, "tools/call", {"name": "slow_compute",
                                                                   "arguments": {"seconds": 60, "label": "x"}}))
        task = created["result"]
        assert task["resultType"] == "task" and task["status"] == "working" and "task" not in task
        assert task["ttlMs"] == 300_000 and task["pollIntervalMs"] == 200 and "ttl" not in task
        # another principal: what an unknown id gets
        unknown = await modern_ask(http, url, BOB, "tasks/get", {"taskId": "no-such-task"})
        for method in ("tasks/get", "tasks/cancel", "tasks/update"):
            params = {"taskId": task["taskId"], **({"inputResponses": {}} if method == "tasks/update" else {})}
            assert (await modern_ask(http, url, BOB, method, params))["error"]["code"] \
                == unknown["error"]["code"] == -32602, method
        # the legacy upstream's cancel of a terminal task is refused; 2026's is an ack either way
        for _ in range(2):
            ack = (await modern_ask(http, url, ADA, "tasks/cancel", {"taskId": task["taskId"]}))["result"]
            assert ack["resultType"] == "complete" and "taskId" not in ack
        assert (await settled(http, url, task["taskId"]))["status"] == "cancelled"

        # a tool that runs only as a task: -32021 for a request without the extension, as a 2026 server says
        refused = (await modern_ask(http, url, ADA, "tools/call", {"name": "failing_job", "arguments": {}},
                                    extension=False))["error"]
        assert refused["code"] == -32021 and EXTENSION in refused["data"]["requiredCapabilities"]["extensions"]
        # a tool error is `failed` in 2025-11-25 and `completed` with isError in 2026; a JSON-RPC error is `failed`
        failing = (await modern_ask(http, url, ADA, "tools/call", {"name": "failing_job", "arguments": {}}))["result"]
        done = await settled(http, url, failing["taskId"])
        assert done["status"] == "completed" and done["result"]["isError"] is True
        assert "io.modelcontextprotocol/related-task" not in done["result"].get("_meta", {})
        crashed = (await modern_ask(http, url, ADA, "tools/call", {"name": "protocol_error_job",
                                                                   "arguments": {}}))["result"]
        failed = await settled(http, url, crashed["taskId"])
        assert failed["status"] == "failed" and failed["error"]["code"] == -32603 and "result" not in failed

        # a client that did not declare elicitation when it created the task is never asked: the upstream is told
        # its client lacks the capability (issue #30 point 2: Triad had declared form elicitation for every client)
        for asks in ({}, {"sampling": {}}, {"elicitation": {"url": {}}}):
            unasked = (await modern_ask(http, url, ADA, "tools/call", {"name": "multi_input", "arguments": {}},
                                        asks=asks))["result"]
            ended = await settled(http, url, unasked["taskId"])
            assert "inputRequests" not in ended, (asks, ended)
            assert ended["status"] in ("failed", "completed"), (asks, ended)
            assert "elicitation capability" in json.dumps(ended), (asks, ended)

        # the upstream's questions, asked on a tasks/result stream, become inputRequests; tasks/update answers them
        asking = (await modern_ask(http, url, ADA, "tools/call", {"name": "multi_input", "arguments": {}},
                                   asks={"elicitation": {}}))["result"]
        waiting = await settled(http, url, asking["taskId"], until="input_required")
        for _ in range(50):  # both questions come at once, each on its own (a get shows what has come)
            if len(waiting.get("inputRequests", {})) == 2:
                break
            await anyio.sleep(0.2)  # a client polls (the fixture's pollIntervalMs)
            waiting = await settled(http, url, asking["taskId"], until="input_required")
        first, second = sorted(waiting["inputRequests"])
        assert waiting["inputRequests"][first]["method"] == "elicitation/create"
        answer = {"action": "accept", "content": {"name": "Ada"}}
        await modern_ask(http, url, ADA, "tasks/update", {"taskId": asking["taskId"],
                                                          "inputResponses": {first: answer}})
        partial = await settled(http, url, asking["taskId"], until="input_required")
        assert list(partial["inputRequests"]) == [second]
        await modern_ask(http, url, ADA, "tasks/update", {"taskId": asking["taskId"],
                                                          "inputResponses": {second: answer}})
        done = await settled(http, url, asking["taskId"])
        assert done["status"] == "completed" and done["result"]["content"][0]["text"].startswith("both answered")


@pytest.mark.parametrize("protocol", ["auto", "handshake"])
async def test_a_modern_clients_task_through_search_modes_call_tool_is_its_own(procs: list[Proc], tmp_path: Path,
                                                                               protocol: str) -> None:
    """`tools_mode: search`: `call_tool` runs a tool as a direct `tools/call` would, in the client's era: a
    2026-07-28 client gets a task named by Triad's id, which its `tasks/get` then finds (`handshake`: translated)."""
    async with modern_triad(procs, tmp_path, protocol=protocol, search={"tools_mode": "search"}) as url, \
            httpx2.AsyncClient(timeout=60) as http:
        created = await modern_ask(http, url, ADA, "tools/call", {"name": "call_tool", "arguments": {
            "name": "failing_job", "arguments": {}}})
        task = created["result"]
        assert task["resultType"] == "task" and len(task["taskId"]) >= 32, created
        done = await settled(http, url, task["taskId"])
        assert done["status"] == "completed" and done["result"]["isError"] is True


async def test_a_translated_tasks_get_never_waits_for_questions(procs: list[Proc], tmp_path: Path) -> None:
    """A handshake-era task `input_required` from its start that asks nothing (until `release_quiet`): a
    2026-07-28 client's `tasks/get` answers with what is pending when it comes, `working` while nothing is (2026's
    `input_required` carries a non-empty `inputRequests`), rather than waiting for a question that may never come.
    The first get opens Triad's stream for the questions and answers before any can be on it, even when the
    upstream asks at once (a get that waited would return that question)."""
    async with modern_triad(procs, tmp_path, protocol="handshake") as url, httpx2.AsyncClient(timeout=60) as http:
        created = (await modern_ask(http, url, ADA, "tools/call", {"name": "quiet_input", "arguments": {}},
                                    asks={"elicitation": {}}))["result"]
        assert created["status"] == "input_required"
        first: dict[str, Any] = {}

        async def get_first() -> None:
            first.update((await modern_ask(http, url, ADA, "tasks/get", {"taskId": created["taskId"]}))["result"])

        async with anyio.create_task_group() as tg:
            tg.start_soon(get_first)
            assert (await modern_ask(http, url, ADA, "tools/call", {"name": "release_quiet", "arguments": {}})
                    )["result"]["content"][0]["text"] == "released"
        assert first["status"] == "working" and "inputRequests" not in first, first
        # `input_required` once the question came on the stream the first get opened (a client polls till then)
        asking = await settled(http, url, created["taskId"], until="input_required")
        (key, _question), = asking["inputRequests"].items()
        await modern_ask(http, url, ADA, "tasks/update", {"taskId": created["taskId"], "inputResponses": {
            key: {"action": "accept", "content": {"confirm": True}}}})
        done = await settled(http, url, created["taskId"])
        assert done["status"] == "completed" and done["result"]["content"][0]["text"].startswith("released")


async def test_a_translated_tasks_status_is_pushed_on_its_owners_listen_stream(procs: list[Proc],
                                                                             tmp_path: Path) -> None:
    """A 2026-07-28 client's task on a handshake-era upstream (server-everything, which pushes its tasks' status):
    a `subscriptions/listen` stream naming it in `taskIds` is told each change as `notifications/tasks`, the task
    as its `tasks/get` shows it (its question as `inputRequests`, its result inlined), under Triad's id. The
    acknowledgement names only the ids Triad agreed to: not another's, not an unknown one."""
    url = start_triad(procs, everything_config(tmp_path, "shared"), wait_ready=1)
    async with httpx2.AsyncClient(timeout=60) as http, anyio.create_task_group() as tg:
        created = await modern_ask(http, url, ADA, "tools/call", {"name": RESEARCH,
                                                                  "arguments": {"topic": "x", "ambiguous": True}},
                                   asks={"elicitation": {}})
        task_id = created["result"]["taskId"]
        bobs = (await modern_ask(http, url, BOB, "tools/call", {"name": RESEARCH, "arguments": {"topic": "y"}}))
        frames: list[dict[str, Any]] = []
        arrived = anyio.Event()

        async def listen(token: str, task_ids: list[str], *, task_status: Any = anyio.TASK_STATUS_IGNORED) -> None:
            nonlocal arrived
            body = modern(7, "subscriptions/listen", {"notifications": {"taskIds": task_ids}})
            headers = modern_headers("subscriptions/listen") | {"Authorization": f"Bearer {token}"}
            async with http.stream("POST", url, content=dumps(body), headers=headers) as stream:
                task_status.started()
                async for line in stream.aiter_lines():
                    if line.startswith("data:") and line[5:].strip():
                        frames.append(json.loads(line[5:]))
                        arrived.set()
                        arrived = anyio.Event()

        async def frame(found: Any) -> dict[str, Any]:
            with anyio.fail_after(60):
                while not any(found(f) for f in frames):
                    await arrived.wait()
            return next(f for f in frames if found(f))

        def pushed(status: str) -> Any:
            return lambda f: f.get("method") == "notifications/tasks" and f["params"]["status"] == status

        await tg.start(listen, ADA, [task_id, bobs["result"]["taskId"], "no-such-task", {"not": "an id"}, task_id])
        ack = await frame(lambda f: f.get("method") == "notifications/subscriptions/acknowledged")
        assert ack["params"]["notifications"]["taskIds"] == [task_id]
        await modern_ask(http, url, ADA, "tasks/get", {"taskId": task_id})  # a client polls, pushed to or not
        asking = await frame(lambda f: pushed("input_required")(f) and f["params"]["inputRequests"])
        (key, question), = asking["params"]["inputRequests"].items()
        assert question["method"] == "elicitation/create"
        answer = {"action": "accept", "content": {"interpretation": "technical"}}
        await modern_ask(http, url, ADA, "tasks/update", {"taskId": task_id, "inputResponses": {key: answer}})
        done = await frame(pushed("completed"))
        assert done["params"]["result"]["content"] and "resultType" not in done["params"]
        assert frames[0] is ack and all(f["params"]["_meta"]["io.modelcontextprotocol/subscriptionId"] == 7
                                        for f in frames)
        assert {f["params"]["taskId"] for f in frames if f.get("method") == "notifications/tasks"} == {task_id}
        # a request that does not declare the tasks extension gets no task pushes: -32021, as for tasks/*
        body = modern(8, "subscriptions/listen", {"notifications": {"taskIds": [task_id]}}, extension=False)
        headers = modern_headers("subscriptions/listen") | {"Authorization": f"Bearer {ADA}"}
        refused = answer_of(await modern_post(http, url, dumps(body), headers))["error"]
        assert refused["code"] == -32021 and EXTENSION in refused["data"]["requiredCapabilities"]["extensions"]
        tg.cancel_scope.cancel()


async def test_a_legacy_clients_tasks_list_comes_in_pages_of_triads_own(procs: list[Proc], tmp_path: Path) -> None:
    """Many tasks: `tasks/list` pages by Triad's own cursor (the upstream's list covers every client's tasks)."""
    async with modern_triad(procs, tmp_path, protocol="handshake", page_size=2) as url, \
            httpx2.AsyncClient(timeout=60) as http:
        ada = await Client(http, url, ADA).open({"tasks": {}})
        bob = await Client(http, url, BOB).open({"tasks": {}})
        call = {"name": "slow_compute", "arguments": {"seconds": 60, "label": "x"}, "task": {}}
        bobs = (await bob.ask("tools/call", call))["result"]["task"]["taskId"]
        adas = [(await ada.ask("tools/call", call))["result"]["task"]["taskId"] for _ in range(5)]
        pages, cursor = [], None
        while True:
            page = (await ada.ask("tasks/list", {"cursor": cursor} if cursor else {}))["result"]
            pages.append([task["taskId"] for task in page["tasks"]])
            cursor = page.get("nextCursor")
            if cursor is None:
                break
        assert pages == [adas[:2], adas[2:4], adas[4:]]
        assert [t["taskId"] for t in (await bob.ask("tasks/list", {}))["result"]["tasks"]] == [bobs]
        assert (await ada.ask("tasks/list", {"cursor": "not-a-cursor"}))["error"]["code"] == -32602
        for task_id in [*adas, bobs]:
            await (ada if task_id in adas else bob).ask("tasks/cancel", {"taskId": task_id})


async def test_a_legacy_clients_task_on_a_modern_upstream_is_refused_precisely(procs: list[Proc],
                                                                                tmp_path: Path) -> None:
    """No faithful mapping: a 2026-07-28 upstream's tool is `forbidden` as a 2025-11-25 task (-32601)."""
    async with modern_triad(procs, tmp_path) as url, httpx2.AsyncClient(timeout=60) as http:
        ada = await Client(http, url, ADA).open({"tasks": {}})
        assert "tasks" not in ada.capabilities
        call = {"name": "slow_compute", "arguments": {"seconds": 0, "label": "x"}}
        refused = (await ada.ask("tools/call", {**call, "task": {}}))["error"]
        assert refused["code"] == -32601 and "slow_compute" in refused["message"]
        assert (await ada.ask("tools/call", call))["result"]["content"][0]["text"] == "computed x"


async def test_a_synchronous_call_of_a_modern_client_is_not_a_task(procs: list[Proc], tmp_path: Path) -> None:
    """A request that does not declare the extension never gets a task (here via Triad's direct HTTP path)."""
    async with modern_triad(procs, tmp_path) as url, httpx2.AsyncClient(timeout=60) as http:
        body = modern_call(1, "slow_compute", {"seconds": 1, "label": "sync"})
        headers = modern_headers("tools/call", "slow_compute") | {"Authorization": f"Bearer {ADA}"}
        result = answer_of(await modern_post(http, url, dumps(body), headers))["result"]
        assert result["resultType"] == "complete" and "taskId" not in result


@pytest.mark.parametrize("protocol", ["auto", "handshake"])
async def test_a_tasks_result_passes_the_after_hooks_as_the_calls_would(procs: list[Proc], tmp_path: Path,
                                                                        protocol: str) -> None:
    """Running a tool as a task must not get its result past a redaction hook: a 2026-07-28 client's (whose
    request's session ended with the call; `handshake`: translated) and a 2025-11-25 client's `tasks/result`."""
    async with modern_triad(procs, tmp_path, protocol, hooks=[{"redact": {"patterns": ["swordfish"]}}]) as url, \
            httpx2.AsyncClient(timeout=60) as http:
        created = await modern_ask(http, url, ADA, "tools/call", {"name": "slow_compute",
                                                                  "arguments": {"seconds": 1, "label": "swordfish"}})
        got = await settled(http, url, created["result"]["taskId"])
        assert got["result"]["content"][0]["text"] == "computed [REDACTED]"
        if protocol == "handshake":
            ada = await Client(http, url, ADA).open({"tasks": {}})
            task = (await ada.ask("tools/call", {"name": "slow_compute", "task": {},
                                                 "arguments": {"seconds": 1, "label": "swordfish"}}))["result"]
            result = (await ada.ask("tasks/result", {"taskId": task["task"]["taskId"]}))["result"]
            assert result["content"][0]["text"] == "computed [REDACTED]"


async def test_a_legacy_task_over_triad_stdio_pushes_its_status_to_its_client(procs: list[Proc],
                                                                             tmp_path: Path) -> None:
    config = everything_config(tmp_path, "shared")
    async with await anyio.open_process([*TRIAD, "stdio", "-c", str(config)]) as process:
        assert process.stdin is not None and process.stdout is not None
        lines = BufferedByteReceiveStream(process.stdout)
        seen: list[dict[str, Any]] = []

        async def send(message: dict[str, Any]) -> None:
            assert process.stdin is not None
            await process.stdin.send(dumps(message) + b"\n")

        async def until(found: Any) -> dict[str, Any]:
            with anyio.fail_after(60):
                while not any(found(m) for m in seen):
                    seen.append(json.loads(await lines.receive_until(b"\n", 64 * 2**20)))
            return next(m for m in seen if found(m))

        try:
            await send(request(0, "initialize", {"protocolVersion": HANDSHAKE, "capabilities": {"tasks": {}},
                                                 "clientInfo": {"name": "tasks-test", "version": "1"}}))
            await until(lambda m: m.get("id") == 0)
            await send({"jsonrpc": "2.0", "method": "notifications/initialized"})
            await send(request(1, "tools/call", {"name": RESEARCH, "arguments": {"topic": "x"}, "task": {}}))
            task_id = (await until(lambda m: m.get("id") == 1))["result"]["task"]["taskId"]
            pushed = await until(lambda m: m.get("method") == "notifications/tasks/status"
                                 and m["params"].get("status") == "completed")
            assert pushed["params"]["taskId"] == task_id
            await send(request(2, "tasks/get", {"taskId": task_id}))
            assert (await until(lambda m: m.get("id") == 2))["result"]["status"] == "completed"
        finally:
            await process.stdin.aclose()
            with anyio.move_on_after(15):
                await process.wait()
            if process.returncode is None:
                process.kill()


def test_a_task_entry_is_plain_data_keyed_by_its_session() -> None:
    """What Triad keeps of a task names its downstream session by key, so the table could be shared (Redis)."""
    book = TaskBook()
    owner = Identity(client_id="ada")
    task_id = book.adopt("fx", "up-1", owner, "k" * 40, "2025-11-25", 60_000)
    entry = book.find(task_id, owner, "k" * 40, "2025-11-25")
    assert json.loads(json.dumps(dataclasses.asdict(entry)))["session"] == "k" * 40
    for other in ("x" * 40, None):  # another session of the same client, or none: as if unknown
        with pytest.raises(UnknownName):
            book.find(task_id, owner, other, "2025-11-25")


async def test_per_client_tasks_with_the_same_upstream_id_stay_each_clients_own(procs: list[Proc],
                                                                                tmp_path: Path) -> None:
    """`sessions: per_client` over stdio: each client's own fixture process numbers its tasks from 1, so both
    clients' tasks have the upstream id `task-1`. Each stays its owner's (neither evicts the other), and an upstream
    refusal naming the task names it by Triad's id, never the upstream's."""
    fixture = [str(ROOT / "tests" / "servers" / "conformance_upstream.py"), "--transport", "stdio"]
    config = write_config(tmp_path, {"upstreams": {"fx": {"command": PYTHON, "args": fixture, "protocol": "handshake",
                                                          "sessions": "per_client", "timeout": "60s"}},
                                     "naming": {"prefix": "never"}, "clients": CLIENTS})
    url = start_triad(procs, config, wait_ready=1)
    call = {"name": "slow_compute", "arguments": {"seconds": 60, "label": "x"}, "task": {}}
    async with httpx2.AsyncClient(timeout=60) as http:
        ada = await Client(http, url, ADA).open({"tasks": {}})
        bob = await Client(http, url, BOB).open({"tasks": {}})
        ada_task = (await ada.ask("tools/call", call))["result"]["task"]["taskId"]
        bob_task = (await bob.ask("tools/call", call))["result"]["task"]["taskId"]
        assert ada_task != bob_task
        assert (await ada.ask("tasks/get", {"taskId": ada_task}))["result"]["status"] == "working"
        assert (await bob.ask("tasks/get", {"taskId": bob_task}))["result"]["status"] == "working"
        assert [t["taskId"] for t in (await ada.ask("tasks/list", {}))["result"]["tasks"]] == [ada_task]
        assert (await ada.ask("tasks/cancel", {"taskId": ada_task}))["result"]["status"] == "cancelled"
        assert (await bob.ask("tasks/get", {"taskId": bob_task}))["result"]["status"] == "working"
        again = (await ada.ask("tasks/cancel", {"taskId": ada_task}))["error"]  # "task task-1 is already ..."
        assert ada_task in again["message"] and "task-1" not in json.dumps(again), again


def test_a_status_push_is_routed_by_the_upstream_session_it_came_on() -> None:
    """Two per-client upstream sessions may give the same id to their tasks: the book tells them apart by the
    downstream session whose upstream session holds each (None: the shared session)."""
    book = TaskBook()
    ada, bob = Identity(client_id="ada"), Identity(client_id="bob")
    ada_task = book.adopt("fx", "task-1", ada, "a" * 40, "2025-11-25", 60_000, holder="a" * 40)
    bob_task = book.adopt("fx", "task-1", bob, "b" * 40, "2025-11-25", 60_000, holder="b" * 40)
    assert book.find(ada_task, ada, "a" * 40, "2025-11-25").upstream_id == "task-1"
    assert book.find(bob_task, bob, "b" * 40, "2025-11-25").upstream_id == "task-1"
    assert (found := book.gateway_id("fx", "task-1", "a" * 40)) is not None and found[0] == ada_task
    assert (found := book.gateway_id("fx", "task-1", "b" * 40)) is not None and found[0] == bob_task
    assert book.gateway_id("fx", "task-1", None) is None


def test_one_client_cannot_push_out_another_clients_tasks(monkeypatch: pytest.MonkeyPatch) -> None:
    """Past its own bound a client's own oldest task is forgotten, not anyone else's."""
    monkeypatch.setattr(tasks, "MAX_TASKS", 5)
    monkeypatch.setattr(tasks, "MAX_TASKS_PER_OWNER", 3)
    book = TaskBook()
    ada, cal = Identity(client_id="ada"), Identity(client_id="cal")
    cal_task = book.adopt("fx", "c-1", cal, None, "2026-07-28", 60_000)
    ada_tasks = [book.adopt("fx", f"a-{n}", ada, None, "2026-07-28", 60_000) for n in range(10)]
    assert book.find(cal_task, cal, None, "2026-07-28").upstream_id == "c-1"
    assert [task_id for task_id, _ in book.owned(ada, None, "2026-07-28")] == ada_tasks[-3:]
    assert len(book) == 4


def test_a_task_keeps_no_large_call_arguments() -> None:
    """The hooks' view of a task's call is kept as long as the task (up to a day): not with megabytes of arguments."""
    def call(arguments: dict[str, Any]) -> CallContext:
        return CallContext("tool", "ada", Session(), "t", "fx", "t", arguments)

    small = kept_call(call({"q": "x"}))
    assert small is not None and small.context().arguments == {"q": "x"}
    big = kept_call(call({"blob": "x" * (MAX_KEPT_ARGUMENTS + 1)}))
    assert big is not None and big.context().arguments == {} and big.context().name == "t"


async def test_a_task_keeps_its_session_only_weakly_and_its_hooks_still_apply(tmp_path: Path) -> None:
    """A task lasts up to a day; the session that created it may end long before. The task must not keep that
    session (its connection, per-client upstream sessions, hooks' state) alive, and its result still passes the
    after-hooks: redaction, and an audit line naming the session."""
    audit = tmp_path / "audit.jsonl"
    config = parse_config(f"upstreams: {{}}\nhooks: [{{redact: {{patterns: [swordfish]}}}}, "
                          f"{{audit: {{path: '{audit}'}}}}]")
    hooks = build_chain(config.hooks)
    book = TaskBook()

    async def unused(*args: Any, **kwargs: Any) -> Any:
        raise AssertionError("no upstream is asked: only the after-hooks run")

    upstreams = SimpleNamespace(forward=unused, upstream=unused)
    current = SimpleNamespace(hooks=hooks, page_size=100, uri_part=lambda _name: None)
    relay = TaskRelay(book, upstreams, current)  # type: ignore[arg-type]
    ada = Identity(client_id="ada")
    session = Session(id="session-hash")
    session.state["hook state"] = "x" * 1_000_000
    gone = weakref.ref(session)
    call = CallContext("tool", "ada", session, "slow_compute", "fx", "slow_compute", {"label": "swordfish"})
    task_id = book.adopt("fx", "task-1", ada, session.key, "2025-11-25", 60_000, kept_call(call))
    key = session.key
    del session, call
    gc.collect()
    assert gone() is None, "the task keeps its ended session alive"

    entry = book.find(task_id, ada, key, "2025-11-25")
    result = await relay._after_hooks(entry, {"content": [{"type": "text", "text": "computed swordfish"}]})
    assert result["content"][0]["text"] == "computed [REDACTED]"
    line = json.loads(audit.read_text().splitlines()[-1])
    assert (line["session"], line["name"], line["outcome"]) == ("session-hash", "slow_compute", "ok")


def test_an_upstream_refusal_names_the_task_by_triads_id() -> None:
    book = TaskBook()
    task_id = book.adopt("fx", "task-1", Identity(client_id="ada"), None, "2026-07-28", 60_000)
    entry = book.find(task_id, Identity(client_id="ada"), None, "2026-07-28")
    refused = refused_as_triads(UpstreamRefused("fx", "task task-1 is already completed (not task-12)", code=-32602,
                                                data={"taskId": "task-1", "seen": ["task-1"]}), entry, task_id)
    assert refused.message == f"task {task_id} is already completed (not task-12)" and refused.code == -32602
    assert refused.data == {"taskId": task_id, "seen": [task_id]}
