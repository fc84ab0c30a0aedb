"""`sessions: per_client`: each downstream session's own upstream session, opened anew after the upstream lost it,
what the downstream session's end cleans up, and what of the upstream's lists a client sees.

The upstream is the real fixture server over stdio (a child per client session). Inside Triad, the downstream
session is Triad's own `gateway.hooks._chain.Session` with a way back to its client; end to end, real SDK clients.
"""

from __future__ import annotations

import logging
from typing import Any

import anyio
import mcp_types as types
import pytest
from mcp import ClientSession
from mcp.shared.exceptions import MCPError

from consumers import Upstream
from consumers.config import UpstreamConfig
from consumers.errors import QuotaExceeded, UpstreamError
from gateway.hooks._chain import Session
from tests.conftest import Proc, start_triad, stdio_upstream, write_config
from tests.test_gateway_e2e import RAW, http_session

pytestmark = pytest.mark.anyio


class Back:
    """A downstream client's way back (`consumers.relay.Downstream`), declaring nothing."""

    modern = False
    log_level = None
    capabilities: dict[str, Any] | None = None
    cancellation = None

    async def log(self, params: types.LoggingMessageNotificationParams) -> None:
        pass

    async def ask(self, request: Any, result_type: Any) -> Any:
        raise AssertionError("not asked")


class OnLog(logging.Handler):
    """Calls `then()` when a log line containing `text` is written."""

    def __init__(self, text: str, then: Any) -> None:
        super().__init__()
        self._text, self._then = text, then

    def emit(self, record: logging.LogRecord) -> None:
        if self._text in record.getMessage():
            self._then()


def call(name: str, **arguments: Any) -> types.CallToolRequest:
    return types.CallToolRequest(params=types.CallToolRequestParams(name=name, arguments=arguments))


async def test_a_reopened_client_session_is_cleaned_up_once(tmp_path: Any) -> None:
    """The upstream loses a client's session three times (its child exits) and Triad opens a new one each time:
    the downstream session's end still has one clean-up to run, not one per session ever opened."""
    config = UpstreamConfig.model_validate(stdio_upstream("reopen", sessions="per_client"))
    upstream = Upstream("fx", config, None, lambda _up: None)
    session = Session(back=Back())
    with anyio.fail_after(60):
        async with anyio.create_task_group() as tg:
            await tg.start(upstream.run)
            await upstream.settled.wait()
            for i in range(3):
                result = await upstream.request(call("echo", text=str(i)), client=session)
                assert result["content"][0]["text"] == str(i)
                with pytest.raises(UpstreamError):
                    await upstream.request(call("die"), client=session)  # its own child exits mid-call
            assert (await upstream.request(call("echo", text="last"), client=session))["content"][0]["text"] == "last"
            assert upstream.client_sessions == 1
            assert len(session._closers) == 1
            await session.close()
            assert upstream.client_sessions == 0
            upstream.stop()


async def decline(*_args: Any) -> types.ErrorData:
    return types.ErrorData(code=types.INVALID_REQUEST, message="not in this test")


async def listed(session: ClientSession, request: Any, key: str, field: str) -> set[str]:
    return {item[field] for item in (await session.send_request(request, RAW))[key]}


async def test_prompts_and_templates_are_those_the_clients_own_session_lists(procs: list[Proc], tmp_path: Any
                                                                             ) -> None:
    """The upstream lists a prompt and a resource template only to sessions whose client declared sampling: a
    client that did not declare it neither sees them nor gets the prompt (it is as if it did not exist)."""
    upstream = stdio_upstream("lists-by-caps", "--lists-by-capabilities", sessions="per_client")
    url = start_triad(procs, write_config(tmp_path, {"upstreams": {"fx": upstream}, "naming": {"prefix": "never"}}),
                      wait_ready=1)
    prompts = (types.ListPromptsRequest(), "prompts", "name")
    templates = (types.ListResourceTemplatesRequest(), "resourceTemplates", "uriTemplate")
    get = types.GetPromptRequest(params=types.GetPromptRequestParams(name="sampled_greet"))
    with anyio.fail_after(60):
        async with http_session(url, sampling_callback=decline) as sampling, http_session(url) as plain:
            assert await listed(sampling, *prompts) == {"greet", "sampled_greet"}
            assert await listed(sampling, *templates) == {"fixture://items/{id}", "fixture://sampled/{id}"}
            assert (await sampling.send_request(get, RAW))["messages"]
            assert await listed(plain, *prompts) == {"greet"}
            assert await listed(plain, *templates) == {"fixture://items/{id}"}
            with pytest.raises(MCPError, match=r"^Unknown prompt: sampled_greet$"):
                await plain.send_request(get, RAW)
            assert (await plain.send_request(types.GetPromptRequest(params=types.GetPromptRequestParams(
                name="greet", arguments={"who": "plain"})), RAW))["messages"][0]["content"]["text"] == "Hello, plain!"


async def test_a_2026_client_gets_an_upstream_session_bound_to_who_it_is_and_what_it_declared(
        procs: list[Proc], tmp_path: Any) -> None:
    """A 2026-07-28 request has no session with a way back; of a handshake-era `per_client` upstream it still sees
    what a session declaring its capabilities lists, and its calls go on that session (one per caller and
    declaration, reused by its next requests), never on the catalog's, which declares everything."""
    from mcp import Client

    upstream = stdio_upstream("stand-in", "--lists-by-capabilities", sessions="per_client")
    url = start_triad(procs, write_config(tmp_path, {"upstreams": {"fx": upstream}, "naming": {"prefix": "never"}}),
                      wait_ready=1)
    triad = procs[-1]
    with anyio.fail_after(60):
        async with Client(url, mode="2026-07-28", cache=None) as plain:
            assert {p.name for p in (await plain.list_prompts()).prompts} == {"greet"}
            assert {t.uri_template for t in (await plain.list_resource_templates()).resource_templates} == \
                {"fixture://items/{id}"}
            with pytest.raises(MCPError, match=r"^Unknown prompt: sampled_greet$"):
                await plain.get_prompt("sampled_greet")
            echoed = await plain.call_tool("echo", {"text": "mine"})
            assert echoed.content[0].text == "mine"  # type: ignore[union-attr]
            assert "sampled_echo" not in {t.name for t in (await plain.list_tools()).tools}
            with pytest.raises(MCPError, match=r"^Unknown tool: sampled_echo$"):  # not on its session's list
                await plain.call_tool("sampled_echo", {"text": "not mine"})
            assert triad.stderr.count("a client session opened") == 1
        async with Client(url, mode="2026-07-28", cache=None, sampling_callback=decline) as sampling:
            assert {p.name for p in (await sampling.list_prompts()).prompts} == {"greet", "sampled_greet"}
            sampled = await sampling.call_tool("sampled_echo", {"text": "sampled"})
            assert sampled.content[0].text == "sampled"  # type: ignore[union-attr]
            assert triad.stderr.count("a client session opened") == 2  # another declaration: a session of its own
        async with Client(url, mode="2026-07-28", cache=None) as plain_again:
            assert {p.name for p in (await plain_again.list_prompts()).prompts} == {"greet"}
            await plain_again.call_tool("echo", {"text": "again"})
    assert triad.stderr.count("a client session opened") == 2  # the same caller and declaration: the same one


async def test_stand_in_sessions_are_one_per_caller_and_declaration_bounded_and_idle_closed(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """Requests without a way back (2026-07-28) of a named caller share that caller's upstream session for one
    declaration; another caller gets its own; a caller Triad cannot name goes on the shared session; a caller has
    sessions for at most `MAX_PER_CALLER` declarations at once; an unused one closes and the next request reopens."""
    import consumers.per_client
    from consumers._stand_ins import MAX_PER_CALLER

    config = UpstreamConfig.model_validate(stdio_upstream("stand-ins", sessions="per_client", max_sessions=50))
    upstream = Upstream("fx", config, None, lambda _up: None)

    async def echo(user: str | None, declared: dict[str, Any] | None = None) -> None:
        request = Session(user=user, declared=declared)  # each 2026-07-28 request has a session of its own
        assert (await upstream.request(call("echo", text="x"), client=request))["content"][0]["text"] == "x"

    with anyio.fail_after(60):
        async with anyio.create_task_group() as tg:
            await tg.start(upstream.run)
            await upstream.settled.wait()
            await echo(None)
            assert upstream.client_sessions == 0
            await echo("alice")
            await echo("alice", {})
            assert upstream.client_sessions == 1
            await echo("bob")
            assert upstream.client_sessions == 2
            choices = ({}, {"sampling": {}}, {"elicitation": {"form": {}}}, {"roots": {}})
            declarations = [{**a, **b, **c} for a in choices[:2] for b in (choices[0], choices[2])
                            for c in (choices[0], choices[3])]
            assert len(declarations) == MAX_PER_CALLER
            for declared in declarations:
                await echo("alice", {**declared, "experimental": {"ignored": {}}})  # only what is declared upstream
            assert upstream.client_sessions == MAX_PER_CALLER + 1
            with pytest.raises(QuotaExceeded, match=r"8 capability declarations of this client, its quota "
                               r"limits\.stand_ins"):
                await echo("alice", {"sampling": {"tools": {}}})
            monkeypatch.setattr(consumers.per_client, "IDLE_CLOSE", 0.2)
            closed = anyio.Event()
            told, log = OnLog("a client session closed after", closed.set), logging.getLogger("triad.upstream")
            level = log.level
            log.addHandler(told)
            log.setLevel(logging.INFO)
            try:
                await echo("carol")  # opened with the short idle time: it closes on its own
                await closed.wait()
            finally:
                log.removeHandler(told)
                log.setLevel(level)
            await echo("carol")
            assert upstream.client_sessions == MAX_PER_CALLER + 2
            upstream.stop()


async def test_an_idle_stand_in_makes_room_when_max_sessions_is_reached() -> None:
    """Stand-ins idle out on their own (300 s): at `max_sessions`, the least recently used one with nothing in
    flight is closed to make room, so a few callers' stand-ins never keep another client out."""
    config = UpstreamConfig.model_validate(stdio_upstream("stand-in-room", sessions="per_client", max_sessions=2))
    upstream = Upstream("fx", config, None, lambda _up: None)

    async def echo(user: str) -> None:
        request = Session(user=user, declared={})
        assert (await upstream.request(call("echo", text="x"), client=request))["content"][0]["text"] == "x"

    with anyio.fail_after(60):
        async with anyio.create_task_group() as tg:
            await tg.start(upstream.run)
            await upstream.settled.wait()
            await echo("alice")
            await echo("bob")
            assert upstream.client_sessions == 2
            await echo("carol")  # alice's, the least recently used, made room
            assert upstream.client_sessions == 2
            await echo("bob")  # still open: no new session
            assert upstream.client_sessions == 2
            upstream.stop()
