"""Approval (`approval:`): a matching call waits for a person's yes before any upstream sees it.

Real parts: the fixture upstream over HTTP, printing `CALL <tool>` for each call that reaches it (so a refused or
timed-out call is proven never to have reached it), Triad, and the Python SDK's clients of both eras answering
the elicitation (or not).
"""

from __future__ import annotations

import json
import re
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import anyio
import httpx2
import mcp_types as types
import pytest
from mcp import Client, ClientSession
from mcp.client.streamable_http import streamable_http_client
from mcp.shared.exceptions import MCPError

from tests.conftest import Proc, start_fixture, start_triad, write_config
from tests.test_gateway_e2e import call

pytestmark = pytest.mark.anyio

RULES = [
    {"tools": ["structured", "rich"], "ask": "caller", "timeout": "30s", "remember": "session"},
    {"tools": ["image"], "ask": "caller", "timeout": "1s"},  # nobody answers: refused when the second is up
    {"tools": ["fail"], "ask": "caller"},  # policy hides it: never asked
]


class Person:
    """Answers Triad's approval questions: `action` (accept, decline), `remember` ("allow for this session"), or
    never (`silent`: the question is left open until Triad gives up)."""

    def __init__(self, action: str = "accept", remember: bool = False, silent: bool = False) -> None:
        self.action, self.remember, self.silent = action, remember, silent
        self.asked: list[types.ElicitRequestFormParams] = []

    async def __call__(self, _ctx: Any, params: Any) -> types.ElicitResult:
        self.asked.append(params)
        if self.silent:
            await anyio.sleep_forever()
        content = {"remember": True} if self.remember and self.action == "accept" else None
        return types.ElicitResult(action=self.action, content=content)  # type: ignore[arg-type]


@pytest.fixture(scope="module")
def gateway(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, Proc, Path]]:
    """One Triad for the module: an HTTP upstream that logs its calls, the rules above, an audit file."""
    tmp = tmp_path_factory.mktemp("approval")
    procs: list[Proc] = []
    try:
        upstream = start_fixture(procs, "http", "approval", "--log-calls")
        audit = tmp / "audit.jsonl"
        config = write_config(tmp, {"upstreams": {"fx": {"url": upstream}},
                                    "policy": {"profile": {"deny": ["fail"]}},
                                    "approval": {"rules": RULES},
                                    "hooks": [{"audit": {"path": str(audit)}}]})
        url = start_triad(procs, config, wait_ready=1)
        yield url, procs[0], audit
    finally:
        for proc in reversed(procs):
            proc.terminate()


@asynccontextmanager
async def session_of(url: str, person: Person | None) -> AsyncIterator[ClientSession]:
    async with streamable_http_client(url) as (read, write), \
            ClientSession(read, write, elicitation_callback=person) as session:
        await session.initialize()
        yield session


async def reached(url: str, upstream: Proc, tool: str) -> int:
    """How many calls of `tool` reached the upstream so far: a marker call (`echo`, asked about by no rule) is
    made and seen first, so every call made before it has shown up, if it was ever made."""
    marker = f"marker-{id(object())}"
    count = upstream.stderr.count("CALL echo")
    async with session_of(url, None) as session:
        assert (await call(session, "echo", {"text": marker}))["content"][0]["text"] == marker
    await upstream.until(r"CALL echo", count=count + 1)
    return len(re.findall(rf"^CALL {re.escape(tool)}$", upstream.stderr, re.M))


def text_of(result: dict[str, Any]) -> str:
    return str(result["content"][0]["text"])


async def test_an_accepted_call_goes_on_and_the_question_says_what_it_is(gateway: tuple[str, Proc, Path]) -> None:
    url, upstream, _ = gateway
    before = await reached(url, upstream, "structured")
    person = Person("accept")
    async with session_of(url, person) as session:
        result = await call(session, "structured", {"n": 21})
    assert result.get("structuredContent") == {"double": 42}, result
    [question] = person.asked
    assert "structured" in question.message and "upstream fx" in question.message
    assert '"n": 21' in question.message and "destructive" in question.message and "open-world" in question.message
    assert "remember" in question.requested_schema["properties"]  # remember: session offers "allow for this session"
    assert await reached(url, upstream, "structured") == before + 1


@pytest.mark.parametrize(("person", "said"), [
    (Person("decline"), "the caller answered decline"),
    (Person("cancel"), "the caller answered cancel"),
    (None, "did not declare form-mode elicitation"),
])
async def test_a_call_not_approved_never_reaches_the_upstream(gateway: tuple[str, Proc, Path], person: Person | None,
                                                              said: str) -> None:
    url, upstream, _ = gateway
    before = await reached(url, upstream, "structured")
    async with session_of(url, person) as session:
        result = await call(session, "structured", {"n": 1})
    assert result.get("isError") is True and said in text_of(result), result
    assert "needs a person's approval (approval.rules.0)" in text_of(result)
    assert await reached(url, upstream, "structured") == before


async def test_no_answer_until_the_timeout_is_a_denial(gateway: tuple[str, Proc, Path]) -> None:
    url, upstream, _ = gateway
    before = await reached(url, upstream, "image")
    person = Person(silent=True)
    async with session_of(url, person) as session:
        result = await call(session, "image")
    assert result.get("isError") is True and "no answer within 1s" in text_of(result), result
    assert len(person.asked) == 1
    assert await reached(url, upstream, "image") == before


async def test_allow_for_this_session_answers_later_calls_of_that_session_only(
        gateway: tuple[str, Proc, Path]) -> None:
    url, upstream, _ = gateway
    before = await reached(url, upstream, "structured")
    person = Person("accept", remember=True)
    async with session_of(url, person) as session:
        for n in range(3):
            assert (await call(session, "structured", {"n": n}))["structuredContent"] == {"double": 2 * n}
        assert (await call(session, "rich", {"a": 1})).get("isError") is not True  # another tool: asked again
    assert len(person.asked) == 2
    other = Person("accept")
    async with session_of(url, other) as session:  # a new session is asked again
        await call(session, "structured", {"n": 5})
    assert len(other.asked) == 1
    assert await reached(url, upstream, "structured") == before + 4


async def test_secrets_in_the_arguments_are_not_in_the_question(gateway: tuple[str, Proc, Path]) -> None:
    url, _, _ = gateway
    person = Person("decline")
    async with session_of(url, person) as session:
        await call(session, "rich", {"password": "hunter2-plain", "note": "Bearer abcdefghijklmnopqrstuv",
                                     "nested": {"api_key": "k-123456"}, "visible": "kept"})
    message = person.asked[0].message
    for secret in ("hunter2-plain", "abcdefghijklmnopqrstuv", "k-123456"):
        assert secret not in message
    assert "kept" in message and "[REDACTED]" in message


async def test_a_tool_policy_hides_is_never_asked_about(gateway: tuple[str, Proc, Path]) -> None:
    url, _, _ = gateway
    person = Person("accept")
    async with session_of(url, person) as session:
        with pytest.raises(MCPError, match="Unknown tool"):
            await call(session, "fail")
    assert person.asked == []


async def test_a_2026_client_is_asked_in_an_input_round(gateway: tuple[str, Proc, Path]) -> None:
    url, upstream, _ = gateway
    before = await reached(url, upstream, "structured")
    yes, no = Person("accept"), Person("decline")
    async with Client(url, mode="2026-07-28", cache=None, elicitation_callback=yes) as client:
        result = await client.call_tool("structured", {"n": 4})
    assert result.structured_content == {"double": 8}
    async with Client(url, mode="2026-07-28", cache=None, elicitation_callback=no) as client:
        refused = await client.call_tool("structured", {"n": 4})
    assert refused.is_error is True and "answered decline" in refused.content[0].text  # type: ignore[union-attr]
    assert len(yes.asked) == len(no.asked) == 1
    assert await reached(url, upstream, "structured") == before + 1


async def test_each_decision_is_audited_and_counted(gateway: tuple[str, Proc, Path]) -> None:
    url, _, audit = gateway
    async with session_of(url, Person("accept")) as session:
        await call(session, "structured", {"n": 3})
    async with session_of(url, Person("decline")) as session:
        await call(session, "structured", {"n": 3})
    records = [json.loads(line) for line in audit.read_text().splitlines()]
    decided = [r for r in records if r["decision"] == "approval"]
    assert {"outcome": "approved", "approved_by": "caller:local"}.items() <= decided[-2].items()
    assert {"outcome": "denied", "answered_by": "caller:local", "name": "structured", "upstream": "fx"}.items() \
        <= decided[-1].items()
    async with httpx2.AsyncClient() as http:
        metrics = (await http.get(url.replace("/mcp", "/metrics"))).text
    assert re.search(r'triad_approvals_total\{decision="approved",via="caller"\} [1-9]', metrics), metrics
    assert re.search(r'triad_approvals_total\{decision="denied",via="caller"\} [1-9]', metrics), metrics


async def test_search_modes_call_tool_is_asked_about_too(procs: list[Proc], tmp_path: Path) -> None:
    upstream = start_fixture(procs, "http", "approval-search", "--log-calls")
    config = write_config(tmp_path, {"upstreams": {"fx": {"url": upstream}}, "search": {"tools_mode": "search"},
                                     "approval": {"rules": RULES[:1]}})
    url = start_triad(procs, config, wait_ready=1)
    yes, no = Person("accept"), Person("decline")
    async with session_of(url, yes) as session:
        result = await call(session, "call_tool", {"name": "structured", "arguments": {"n": 2}})
    assert result.get("structuredContent") == {"double": 4}, result
    async with session_of(url, no) as session:
        refused = await call(session, "call_tool", {"name": "structured", "arguments": {"n": 2}})
    assert refused.get("isError") is True and "answered decline" in text_of(refused)
    assert len(yes.asked) == len(no.asked) == 1
    assert procs[0].stderr.count("CALL structured") == 1
