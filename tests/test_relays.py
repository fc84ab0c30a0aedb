"""What crosses the gateway besides results: logs, cancellation, sampling, elicitation, roots; both eras."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import anyio
import mcp_types as types
import pytest
from mcp import Client, ClientSession
from mcp.client.streamable_http import streamable_http_client

from tests.conftest import Proc, start_fixture, start_triad, stdio_upstream, write_config
from tests.test_gateway_e2e import call

pytestmark = pytest.mark.anyio


class Meeting:
    """Where clients wait for each other, so that their calls are surely in flight at the same time."""

    def __init__(self, size: int) -> None:
        self.size = size
        self.arrived: dict[str, int] = {}
        self.events: dict[str, anyio.Event] = {}

    async def meet(self, place: str) -> None:
        self.arrived[place] = self.arrived.get(place, 0) + 1
        event = self.events.setdefault(place, anyio.Event())
        if self.arrived[place] == self.size:
            event.set()
        with anyio.fail_after(30):
            await event.wait()


class FakeUser:
    """A downstream client with its own identity: it answers sampling, elicitation and roots with its name."""

    def __init__(self, name: str, meeting: Meeting | None = None) -> None:
        self.name = name
        self.asked: list[str] = []
        self.logs: list[tuple[str, Any]] = []
        self.meeting = meeting
        """With a meeting, each question is answered only once every client has been asked it (overlap)."""

    async def sampling(self, _ctx: Any, params: types.CreateMessageRequestParams) -> types.CreateMessageResult:
        self.asked.append("sampling")
        if self.meeting is not None:
            await self.meeting.meet("sampling")
        return types.CreateMessageResult(role="assistant", content=types.TextContent(text=f"model of {self.name}"),
                                         model=f"model-{self.name}")

    async def elicitation(self, _ctx: Any, params: Any) -> types.ElicitResult:
        self.asked.append(f"elicitation:{params.message}")
        if self.meeting is not None:
            await self.meeting.meet("elicitation")
        return types.ElicitResult(action="accept", content={"answer": f"{self.name} says yes"})

    async def roots(self, _ctx: Any) -> types.ListRootsResult:
        self.asked.append("roots")
        return types.ListRootsResult(roots=[types.Root(uri=f"file:///home/{self.name}")])

    async def logging(self, params: types.LoggingMessageNotificationParams) -> None:
        self.logs.append((params.level, params.data))

    def session(self, read: Any, write: Any) -> ClientSession:
        return ClientSession(read, write, sampling_callback=self.sampling, elicitation_callback=self.elicitation,
                             list_roots_callback=self.roots, logging_callback=self.logging)


async def two_clients_ask(url: str, log_calls: int = 0, seconds: float = 30
                          ) -> tuple[tuple[FakeUser, FakeUser], dict[str, list[str]]]:
    """Two clients (ada and bob) at once, each having the upstream ask it for sampling, elicitation and roots, then
    `log_calls` calls that log; their answers' texts by name (questions are answered once both are asked)."""
    meeting = Meeting(2)
    ada, bob = FakeUser("ada", meeting), FakeUser("bob", meeting)
    results: dict[str, list[str]] = {"ada": [], "bob": []}

    async def run(user: FakeUser) -> None:
        async with streamable_http_client(url) as (read, write), user.session(read, write) as session:
            await session.initialize()
            for tool, arguments in (("sample", {"prompt": "hi"}), ("ask", {"question": f"q-{user.name}"}),
                                    ("roots", {})):
                result = await call(session, tool, arguments)
                results[user.name].append(result["content"][0]["text"])
            for _ in range(log_calls):  # logs of calls that overlap with the other client's
                await call(session, "log")

    with anyio.fail_after(seconds):
        async with anyio.create_task_group() as tg:  # both clients call the same upstream at the same time
            tg.start_soon(run, ada)
            tg.start_soon(run, bob)
    return (ada, bob), results


async def test_sampling_elicitation_and_roots_reach_only_the_client_that_asked(procs: list[Proc],
                                                                              tmp_path: Path) -> None:
    upstream = start_fixture(procs, "http", "relay-http")
    config = write_config(tmp_path, {"upstreams": {"fx": {"url": upstream}}})
    url = start_triad(procs, config, wait_ready=1)
    (ada, bob), results = await two_clients_ask(url)
    for user in (ada, bob):
        texts = results[user.name]
        assert f"model of {user.name}" in texts[0]
        assert f"{user.name} says yes" in texts[1]
        assert f"file:///home/{user.name}" in texts[2]
        assert user.asked == ["sampling", f"elicitation:q-{user.name}", "roots"]


async def test_with_a_stdio_upstream_a_single_call_is_relayed_and_ambiguity_is_refused(procs: list[Proc],
                                                                                       tmp_path: Path) -> None:
    config = write_config(tmp_path, {"upstreams": {"fx": stdio_upstream("relay-stdio")}})
    url = start_triad(procs, config, wait_ready=1)
    ada = FakeUser("ada")
    async with streamable_http_client(url) as (read, write), ada.session(read, write) as session:
        await session.initialize()
        result = await call(session, "ask", {"question": "alone?"})
        assert "ada says yes" in result["content"][0]["text"]
        async with anyio.create_task_group() as tg:  # a second call in flight: whose elicitation is it?
            tg.start_soon(call, session, "slow", {"seconds": 60})
            await procs[-1].until(r"slow call \S+ started")
            ambiguous = await call(session, "ask", {"question": "which?"})
            tg.cancel_scope.cancel()
        assert ambiguous["isError"] is True
        assert "several calls are in flight on it" in ambiguous["content"][0]["text"]


async def test_upstream_logs_are_relayed_honouring_the_clients_level(procs: list[Proc], tmp_path: Path) -> None:
    upstream = start_fixture(procs, "http", "relay-log")
    config = write_config(tmp_path, {"upstreams": {"fx": {"url": upstream}}})
    url = start_triad(procs, config, wait_ready=1)
    ada = FakeUser("ada")
    async with streamable_http_client(url) as (read, write), ada.session(read, write) as session:
        await session.initialize()
        await call(session, "log")
        assert [level for level, _ in ada.logs] == ["debug", "info", "warning", "error"]
        ada.logs.clear()
        await session.set_logging_level("warning")
        await call(session, "log")
        assert ada.logs == [("warning", "warning from " + ada.logs[0][1].split(" from ")[1]), ada.logs[1]]
        assert [level for level, _ in ada.logs] == ["warning", "error"]


@pytest.mark.parametrize("transport", ["stdio", "http"])
async def test_a_cancelled_client_call_cancels_the_upstream_call(transport: str, procs: list[Proc],
                                                                 tmp_path: Path) -> None:
    """Over stdio through the SDK's session; over HTTP through the direct path, which sends the cancellation."""
    if transport == "stdio":
        upstream: dict[str, Any] = stdio_upstream("cancel")
    else:
        upstream = {"url": start_fixture(procs, "http", "cancel-http")}
    upstream_log = procs[-1] if transport == "http" else None
    config = write_config(tmp_path, {"upstreams": {"fx": upstream}})
    url = start_triad(procs, config, wait_ready=1)
    async with streamable_http_client(url) as (read, write), ClientSession(read, write) as session:
        await session.initialize()
        async with anyio.create_task_group() as tg:
            tg.start_soon(session.call_tool, "slow", {"seconds": 60})
            await (upstream_log or procs[-1]).until(r"slow call \S+ started")
            tg.cancel_scope.cancel()
        # in a thread: the client's own cancel notification must be able to go out meanwhile
        await (upstream_log or procs[-1]).until(r"slow call \S+ cancelled")
        assert (await call(session, "echo", {"text": "after"}))["content"][0]["text"] == "after"


async def test_a_2026_client_through_triad(procs: list[Proc], tmp_path: Path) -> None:
    config = write_config(tmp_path, {"upstreams": {"fx": stdio_upstream("modern")}})
    url = start_triad(procs, config, wait_ready=1)
    async with Client(url, mode="2026-07-28", cache=None) as client:
        result = await client.call_tool("echo", {"text": "modern"})
        assert result.content[0].text == "modern"  # type: ignore[union-attr]
        assert "io.modelcontextprotocol/serverInfo" not in ((result.meta or {}).get("fixture/received-meta") or {})
        tools = await client.list_tools()
        assert "echo" in [t.name for t in tools.tools]
        # the upstream's question could go to it as an input round, but it declared no elicitation capability
        refused = await client.call_tool("ask", {"question": "?"})
        assert refused.is_error is True
        assert "did not declare the elicitation capability" in refused.content[0].text  # type: ignore[union-attr]


async def test_era_envelope_is_never_forwarded_upstream(procs: list[Proc], tmp_path: Path) -> None:
    config = write_config(tmp_path, {"upstreams": {"fx": stdio_upstream("envelope")}})
    url = start_triad(procs, config, wait_ready=1)
    async with Client(url, mode="2026-07-28", cache=None) as client:
        result = await client.call_tool("echo", {"text": "x"}, meta={"traceparent": "00-abc-def-01"})
    received = (result.meta or {})["fixture/received-meta"]
    assert received.get("traceparent") == "00-abc-def-01"
    assert not [k for k in received if k.startswith("io.modelcontextprotocol/")]
