"""A fair share per identity (`limits:`): one identity at each of its quotas while another identity and the owner
still work, on both eras and on legacy SSE; per-client upstream slots reclaimed from the same identity first.

A real `triad serve` with small limits, real HTTP clients (raw, byte for byte: they send what an attacker sends).
Alice is the identity at its limit, Bob another client, Olivia an owner, and callers without a token the
anonymous client. Over a quota: 429 with `Retry-After` before JSON-RPC (opening a session or a stream), else a
JSON-RPC error (-32029) naming the quota.
"""

from __future__ import annotations

import json
import re
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import AsyncExitStack, asynccontextmanager
from pathlib import Path
from typing import Any

import anyio
import httpx2
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gateway.config import TriadConfig
from gateway.errors import QuotaExceeded
from gateway.identity import identity_for
from gateway.quotas import Quotas, Ticket
from tests.conftest import Proc, start_triad, stdio_upstream, write_config
from tests.raw_clients import (
    HandshakeSession,
    answer_of,
    call,
    dumps,
    modern_call,
    modern_headers,
    modern_post,
    sse_session,
)

pytestmark = pytest.mark.anyio

TOKENS = {"alice": "alice-secret-0123456789", "bob": "bob-secret-9876543210", "olivia": "olivia-secret-55555555"}
QUOTA_CODE = -32029
LIMIT = 2


def config(tmp_path: Path, limits: dict[str, int], **upstream: Any) -> Path:
    return write_config(tmp_path, {
        "upstreams": {"fx": stdio_upstream("quota-fx", **upstream)},
        "clients": {"alice": {"token": TOKENS["alice"], "limits": limits}, "bob": {"token": TOKENS["bob"]},
                    "olivia": {"token": TOKENS["olivia"], "owner": True}, "guest": {"limits": limits}},
        "anonymous": "guest",
    })


def client(who: str | None) -> httpx2.AsyncClient:
    headers = {"Authorization": f"Bearer {TOKENS[who]}"} if who is not None else {}
    return httpx2.AsyncClient(timeout=30, headers=headers)


async def use(url: str, quota: str, holder: str) -> float:
    """What `/metrics` says `holder`'s identities hold of `quota` now."""
    async with client("olivia") as http:
        text = (await http.get(url.removesuffix("/mcp") + "/metrics")).text
    found = re.search(rf'triad_quota_use{{holder="{holder}",quota="{quota}"}} (\S+)', text)
    return float(found.group(1)) if found else 0.0


async def until_held(url: str, quota: str, holder: str, count: int) -> None:
    """Wait for the gateway's own counter (no sleep for a guessed time: the metric is the state)."""
    with anyio.fail_after(30):
        while await use(url, quota, holder) < count:  # noqa: ASYNC110 (the state is in another process)
            await anyio.sleep(0.05)


def refused_with_429(response: httpx2.Response, quota: str) -> None:
    assert response.status_code == 429, response.text
    assert int(response.headers["retry-after"]) > 0
    error = response.json()["error"]
    assert error["code"] == QUOTA_CODE and f"limits.{quota}" in error["message"]


def refused_in_json_rpc(answer: dict[str, Any], quota: str) -> None:
    assert answer["error"]["code"] == QUOTA_CODE, answer
    assert f"limits.{quota}" in answer["error"]["message"]


async def echo_works(http: httpx2.AsyncClient, url: str) -> None:
    """A new session of this caller opens and answers a call (and is ended: it holds no place afterwards)."""
    session = await HandshakeSession(http, url).open()
    assert answer_of(await session.post(dumps(call(1, "echo", {"text": "ok"}))))["result"]["content"][0]["text"] \
        == "ok"
    assert (await http.delete(url, headers=session.headers)).status_code == 200


# -- opening: sessions and streams, streamable HTTP and legacy SSE ---------------------------------------------------

Opener = Callable[[AsyncExitStack, httpx2.AsyncClient, str], Awaitable[httpx2.Response | None]]
"""Opens one of a caller's sessions or streams, kept open on the stack; the refusal when it was refused."""


async def open_session(stack: AsyncExitStack, http: httpx2.AsyncClient, url: str) -> httpx2.Response | None:
    response = await HandshakeSession(http, url).post(dumps({"jsonrpc": "2.0", "id": 0, "method": "initialize",
                                                             "params": {"protocolVersion": "2025-11-25",
                                                                        "capabilities": {}, "clientInfo": {
                                                                            "name": "raw", "version": "1"}}}))
    if response.status_code != 200:
        return response
    ended = {"Mcp-Session-Id": response.headers["mcp-session-id"], "MCP-Protocol-Version": "2025-11-25"}
    stack.push_async_callback(http.delete, url, headers=ended)
    return None


async def open_get_stream(stack: AsyncExitStack, http: httpx2.AsyncClient, url: str) -> httpx2.Response | None:
    session = await HandshakeSession(http, url).open()
    headers = {key: value for key, value in session.headers.items() if key != "Content-Type"}
    response = await stack.enter_async_context(http.stream("GET", url, headers={
        **headers, "Accept": "text/event-stream"}))
    if response.status_code == 200:
        return None
    await response.aread()
    return response


async def open_sse(stack: AsyncExitStack, http: httpx2.AsyncClient, url: str) -> httpx2.Response | None:
    response = await stack.enter_async_context(http.stream("GET", url.removesuffix("/mcp") + "/sse",
                                                           headers={"Accept": "text/event-stream"}))
    if response.status_code == 200:
        return None
    await response.aread()
    return response


OPENERS: dict[str, tuple[str, Opener]] = {
    "sessions-streamable-http": ("sessions", open_session),
    "sessions-legacy-sse": ("sessions", open_sse),
    "streams-get": ("streams", open_get_stream),
    "streams-legacy-sse": ("streams", open_sse),
}


@pytest.mark.parametrize("case", sorted(OPENERS))
@pytest.mark.parametrize("who", ["alice", None], ids=["client", "anonymous"])
async def test_an_identity_at_its_open_quota_gets_429_while_others_and_the_owner_open(
        procs: list[Proc], tmp_path: Path, case: str, who: str | None) -> None:
    quota, opener = OPENERS[case]
    url = start_triad(procs, config(tmp_path, {quota: LIMIT}), wait_ready=1)
    async with AsyncExitStack() as stack:
        mine = await stack.enter_async_context(client(who))
        for _ in range(LIMIT):
            assert await opener(stack, mine, url) is None
        refused = await opener(stack, mine, url)
        assert refused is not None
        refused_with_429(refused, quota)
        for other in ("bob", "olivia"):
            async with client(other) as http, AsyncExitStack() as theirs:
                assert await opener(theirs, http, url) is None
                await echo_works(http, url)
    # everything of the identity's closed: its places are free again
    await until_free(url, quota, "anonymous" if who is None else "client")
    async with client(who) as again, AsyncExitStack() as stack:
        assert await opener(stack, again, url) is None


async def test_a_closed_session_gives_its_place_back(procs: list[Proc], tmp_path: Path) -> None:
    url = start_triad(procs, config(tmp_path, {"sessions": 1}), wait_ready=1)
    async with client("alice") as http:
        session = await HandshakeSession(http, url).open()
        refused_with_429(await HandshakeSession(http, url).post(dumps({"jsonrpc": "2.0", "id": 0,
                                                                       "method": "ping"})), "sessions")
        assert (await http.delete(url, headers=session.headers)).status_code == 200
        await until_free(url, "sessions", "client")
        await echo_works(http, url)


async def until_free(url: str, quota: str, holder: str) -> None:
    with anyio.fail_after(30):
        while await use(url, quota, holder):  # noqa: ASYNC110 (the state is in another process)
            await anyio.sleep(0.05)


# -- calls in flight: handshake era, 2026-07-28, legacy SSE ----------------------------------------------------------

Caller = Callable[[httpx2.AsyncClient, str, dict[str, Any]], Awaitable[dict[str, Any]]]


@asynccontextmanager
async def handshake_caller(http: httpx2.AsyncClient, url: str) -> AsyncIterator[Caller]:
    session = await HandshakeSession(http, url).open()

    async def send(_http: httpx2.AsyncClient, _url: str, message: dict[str, Any]) -> dict[str, Any]:
        return answer_of(await session.post(dumps(message)))
    yield send


@asynccontextmanager
async def modern_caller(http: httpx2.AsyncClient, url: str) -> AsyncIterator[Caller]:
    async def send(_http: httpx2.AsyncClient, _url: str, message: dict[str, Any]) -> dict[str, Any]:
        params = message["params"]
        body = modern_call(message["id"], params["name"], params["arguments"])
        return answer_of(await modern_post(http, url, dumps(body), modern_headers("tools/call", params["name"])))
    yield send


@asynccontextmanager
async def sse_caller(http: httpx2.AsyncClient, url: str) -> AsyncIterator[Caller]:
    async with sse_session(http, url) as session:
        answers: dict[Any, dict[str, Any]] = {}
        arrived = anyio.Condition()

        async def send(_http: httpx2.AsyncClient, _url: str, message: dict[str, Any]) -> dict[str, Any]:
            assert (await session.post(dumps(message))).status_code == 202
            async with arrived:
                while message["id"] not in answers:
                    await arrived.wait()
            return answers.pop(message["id"])

        async def pump() -> None:
            """Answers come on the one stream, in any order: each goes to the request it answers."""
            async for line in session._lines:  # the helper reads one answer at a time; here they interleave
                if line.startswith("data:") and line[5:].strip().startswith("{"):
                    found = json.loads(line[5:])
                    async with arrived:
                        answers[found.get("id")] = found
                        arrived.notify_all()

        async with anyio.create_task_group() as tg:
            tg.start_soon(pump)
            yield send
            tg.cancel_scope.cancel()


CALLERS = {"handshake": handshake_caller, "modern": modern_caller, "legacy-sse": sse_caller}


@pytest.mark.parametrize("era", sorted(CALLERS))
async def test_an_identity_at_its_calls_in_flight_is_refused_while_others_and_the_owner_call(
        procs: list[Proc], tmp_path: Path, era: str) -> None:
    url = start_triad(procs, config(tmp_path, {"calls_in_flight": LIMIT}), wait_ready=1)
    async with client("alice") as http, CALLERS[era](http, url) as send, anyio.create_task_group() as tg:
        for ident in range(LIMIT):
            tg.start_soon(send, http, url, call(f"slow-{ident}", "slow", {"seconds": 120}))
        await until_held(url, "calls_in_flight", "client", LIMIT)
        refused_in_json_rpc(await send(http, url, call("over", "echo", {"text": "no"})), "calls_in_flight")
        for other in ("bob", "olivia"):
            async with client(other) as theirs, CALLERS[era](theirs, url) as their_send:
                answer = await their_send(theirs, url, call("theirs", "echo", {"text": "yes"}))
                assert answer["result"]["content"][0]["text"] == "yes"
        tg.cancel_scope.cancel()


# -- per-client upstream slots ----------------------------------------------------------------------------------------


async def test_at_its_upstream_slots_an_identity_reclaims_its_own_idle_session_first(procs: list[Proc],
                                                                                    tmp_path: Path) -> None:
    """Alice holds one slot (`upstream_slots: 1`): her second session takes her first one's upstream session (idle,
    the least recently used of hers); with a call in flight on it she is refused instead, and Bob is untouched."""
    url = start_triad(procs, config(tmp_path, {"upstream_slots": 1}, sessions="per_client", max_sessions=4),
                      wait_ready=1)
    async with client("alice") as http, client("bob") as theirs:
        bob = await HandshakeSession(theirs, url).open()
        assert "result" in answer_of(await bob.post(dumps(call(1, "echo", {"text": "bob"}))))
        first = await HandshakeSession(http, url).open()
        second = await HandshakeSession(http, url).open()
        assert "result" in answer_of(await first.post(dumps(call(1, "echo", {"text": "1"}))))
        assert "result" in answer_of(await second.post(dumps(call(2, "echo", {"text": "2"}))))  # reclaims first's
        await until_held(url, "upstream_slots", "client", 2)
        assert await use(url, "upstream_slots", "client") == 2  # Alice's one and Bob's one
        async with anyio.create_task_group() as tg:
            tg.start_soon(second.post, dumps(call(3, "slow", {"seconds": 120})))
            await until_held(url, "calls_in_flight", "client", 1)
            refused_in_json_rpc(answer_of(await first.post(dumps(call(4, "echo", {"text": "x"})))), "upstream_slots")
            assert answer_of(await bob.post(dumps(call(5, "echo", {"text": "still"}))))["result"]["content"][0][
                "text"] == "still"
            tg.cancel_scope.cancel()


async def test_abandoned_sessions_of_one_identity_do_not_keep_another_out(procs: list[Proc], tmp_path: Path) -> None:
    """`max_sessions: 3`, filled by Alice's three idle sessions (within her default share): Bob still gets one, from
    the identity that holds the most; Alice's busy session is never the one taken."""
    url = start_triad(procs, config(tmp_path, {}, sessions="per_client", max_sessions=3), wait_ready=1)
    async with client("alice") as http, anyio.create_task_group() as tg:
        hers = [await HandshakeSession(http, url).open() for _ in range(3)]
        for ident, session in enumerate(hers):
            assert "result" in answer_of(await session.post(dumps(call(ident, "echo", {"text": "a"}))))
        tg.start_soon(hers[0].post, dumps(call("busy", "slow", {"seconds": 120})))
        await until_held(url, "calls_in_flight", "client", 1)
        for who in ("bob", "olivia"):
            async with client(who) as other:
                session = await HandshakeSession(other, url).open()
                assert answer_of(await session.post(dumps(call(9, "echo", {"text": "in"}))))["result"]["content"][0][
                    "text"] == "in"
        tg.cancel_scope.cancel()


# -- the counting itself, over every sequence of takes and give-backs -----------------------------------------------

IDENTITIES = ("alice", "bob", "olivia", "guest")


@settings(max_examples=300, deadline=None)
@given(steps=st.lists(st.tuples(st.sampled_from(IDENTITIES), st.booleans()), max_size=120),
       quota=st.sampled_from(("sessions", "streams", "calls_in_flight")))
def test_owners_always_find_room_and_no_identity_passes_its_quota(steps: list[tuple[str, bool]], quota: str) -> None:
    """Any interleaving of takes (True) and give-backs (False) by four identities, against a gateway total of 12
    with 4 kept for owners: each identity stays within its limit, non-owners together within 8, and an owner below
    its own limit is never refused while the total has room."""
    limits = {quota: 5}
    cfg = TriadConfig.model_validate({"clients": {
        "alice": {"limits": limits}, "bob": {"limits": limits}, "guest": {"limits": limits},
        "olivia": {"owner": True, "limits": limits}}, "anonymous": "guest"})
    quotas, held = Quotas({quota: (12, 4)}), {name: list[Ticket]() for name in IDENTITIES}
    for name, take in steps:
        identity = identity_for(cfg, name)
        if not take:
            if held[name]:
                held[name].pop()()
            continue
        total = sum(len(tickets) for tickets in held.values())
        others = total - len(held["olivia"])
        try:
            held[name].append(quotas.take(quota, identity, cfg))  # type: ignore[arg-type]
        except QuotaExceeded as exc:
            assert exc.quota == quota
            assert len(held[name]) >= 5 or total >= 12 or (name != "olivia" and others >= 8)
        assert len(held[name]) <= 5
        assert sum(len(held[n]) for n in IDENTITIES if n != "olivia") <= 8
    assert quotas.use() == {(quota, holder): count for holder, count in (
        ("owner", len(held["olivia"])), ("client", len(held["alice"]) + len(held["bob"])),
        ("anonymous", len(held["guest"]))) if count}
