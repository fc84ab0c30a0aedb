"""Both protocol eras on both sides: an upstream of each era behind a client of each era, and what crosses.

The upstream is `tests/servers/conformance_upstream.py` over HTTP: it asks its client in the way of the era it
is spoken to (a server->client request in the handshake era, an `input_required` result in 2026-07-28). Triad
speaks the handshake era to it (`protocol: handshake`) or 2026-07-28 (`protocol: auto`), and serves a client of
the handshake era (`initialize`) or of 2026-07-28 (`mcp.Client` in 2026 mode, which answers input rounds).
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import anyio
import mcp_types as types
import pytest
from mcp import Client, ClientSession
from mcp.client.streamable_http import streamable_http_client
from mcp.shared.exceptions import MCPError

from tests.conftest import PYTHON, ROOT, Proc, marker, start_triad, write_config
from tests.test_gateway_e2e import call

pytestmark = pytest.mark.anyio

FIXTURE = ROOT / "tests" / "servers" / "conformance_upstream.py"
ERAS = ("handshake", "auto")


async def answer(_ctx: Any, params: Any) -> types.ElicitResult:
    """Accept, with every string the form asks for."""
    fields = (params.requested_schema or {}).get("properties") or {}
    return types.ElicitResult(action="accept", content={name: f"yes to {params.message}" for name in fields})


@pytest.fixture(scope="module")
def triads(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, tuple[str, Proc]]]:
    """One upstream, and a Triad in front of it per upstream era: era -> (URL, Triad process)."""
    procs: list[Proc] = []
    upstream = Proc([PYTHON, str(FIXTURE), "--transport", "http", "--name", marker("eras")])
    procs.append(upstream)
    port = upstream.wait_for(r"READY (\d+)").group(1)
    url = f"http://127.0.0.1:{port}/mcp"
    found = {}
    for era in ERAS:
        config = write_config(tmp_path_factory.mktemp(era), {
            "upstreams": {"fx": {"url": url, "protocol": era, "ping_interval": "1h"}}, "naming": {"prefix": "never"}})
        found[era] = (start_triad(procs, config, wait_ready=1), procs[-1])
    yield found
    for proc in procs:
        proc.terminate()


@pytest.mark.parametrize("upstream_era", ERAS)
def test_the_upstream_is_spoken_to_in_its_era(upstream_era: str, triads: dict[str, tuple[str, Proc]]) -> None:
    _, triad = triads[upstream_era]
    version = "2026-07-28" if upstream_era == "auto" else "2025-11-25"
    triad.wait_for(rf"upstream fx ready: \d+ tools, .*\({version}\)")


@pytest.mark.parametrize("upstream_era", ERAS)
async def test_a_handshake_client_gets_the_upstreams_question(upstream_era: str,
                                                              triads: dict[str, tuple[str, Proc]]) -> None:
    """Upstream handshake: the server->client request is relayed. Upstream 2026: its input_required result is
    put to the client as a server->client request, and the answer sent back in the retry."""
    url, _ = triads[upstream_era]
    progress: list[float] = []
    async with streamable_http_client(url) as (read, write), \
            ClientSession(read, write, elicitation_callback=answer) as session:
        await session.initialize()
        result = await call(session, "test_elicitation", {"message": "ship it?"})
        assert result["content"][0]["text"] == 'User response: action=accept, content={"response": "yes to ship it?"}'
        multi = await call(session, "test_input_required_result_multi_round")
        assert multi["content"][0]["text"] == "Multi-round complete"

        async def on_progress(value: float, total: float | None, message: str | None) -> None:
            progress.append(value)
        done = await session.call_tool("test_tool_with_progress", {}, progress_callback=on_progress)
        assert done.is_error is not True
    assert progress == [0, 50, 100]


@pytest.mark.parametrize("upstream_era", ERAS)
async def test_a_2026_client_answers_input_rounds(upstream_era: str, triads: dict[str, tuple[str, Proc]]) -> None:
    """Upstream 2026: its input_required result passes through, the client's retry goes back. Upstream handshake:
    Triad parks the call, turns each server->client request into an input_required round, and the retry into
    the answer; the upstream's call stays open meanwhile."""
    url, _ = triads[upstream_era]
    async with Client(url, mode="2026-07-28", cache=None, elicitation_callback=answer) as client:
        result = await client.call_tool("test_elicitation", {"message": "ship it?"})
        assert result.content[0].text == 'User response: action=accept, content={"response": "yes to ship it?"}'  # type: ignore[union-attr]
        multi = await client.call_tool("test_input_required_result_multi_round", {})
        assert multi.content[0].text == "Multi-round complete"  # type: ignore[union-attr]
        prompt = await client.get_prompt("test_input_required_result_prompt")
        assert "Prompt with context" in prompt.messages[0].content.text  # type: ignore[union-attr]


async def test_a_foreign_or_stale_request_state_is_refused(triads: dict[str, tuple[str, Proc]]) -> None:
    url, _ = triads["handshake"]
    async with Client(url, mode="2026-07-28", cache=None) as client:
        request = types.CallToolRequest(params=types.CallToolRequestParams(
            name="test_elicitation", arguments={"message": "?"}, request_state="triad-round:made-up",
            input_responses={"input": types.ElicitResult(action="accept", content={"response": "x"})}))
        with pytest.raises(MCPError) as raised:
            await client.session.send_request(request, types.CallToolResult)
    assert raised.value.error.code == types.INVALID_PARAMS
    assert "Invalid or expired requestState" in raised.value.error.message


async def test_a_2026_client_is_not_asked_what_it_did_not_declare(triads: dict[str, tuple[str, Proc]]) -> None:
    """No elicitation capability: the handshake-era upstream's question is refused for it (-32021), not put."""
    url, _ = triads["handshake"]
    async with Client(url, mode="2026-07-28", cache=None) as client:
        result = await client.call_tool("test_elicitation", {"message": "?"})
    text = result.content[0].text  # type: ignore[union-attr]
    assert "did not declare the elicitation capability" in text, text


@pytest.mark.parametrize("upstream_era", ERAS)
async def test_list_changes_and_resource_updates_reach_the_clients(upstream_era: str,
                                                                   triads: dict[str, tuple[str, Proc]]) -> None:
    """An upstream's list change (pushed in the handshake era, on its listen stream in 2026) re-lists it and
    reaches a handshake client as a push and a 2026 client on its own listen stream; a subscribed resource's
    update reaches both subscribers (`resources/subscribe`, and a listen stream's resource subscription)."""
    url, _ = triads[upstream_era]
    seen: list[Any] = []
    updated, changed = anyio.Event(), anyio.Event()

    async def on_message(message: Any) -> None:
        message = getattr(message, "root", message)
        seen.append(message)
        if isinstance(message, types.ResourceUpdatedNotification):
            updated.set()
        if isinstance(message, types.ToolListChangedNotification):
            changed.set()

    async with streamable_http_client(url) as (read, write), \
            ClientSession(read, write, message_handler=on_message) as session, \
            Client(url, mode="2026-07-28", cache=None) as modern:
        await session.initialize()
        assert (await session.subscribe_resource("test://watched-resource")) is not None
        before = {tool.name for tool in (await session.list_tools()).tools}
        async with modern.listen(tools_list_changed=True) as subscription:
            await call(session, "test_trigger_tool_change")
            with anyio.fail_after(15):
                async for _event in subscription:
                    break
        with anyio.fail_after(15):
            await changed.wait()
        after = {tool.name for tool in (await session.list_tools()).tools}
        assert after - before and all(name.startswith("test_added_tool") for name in after - before)
        async with modern.listen(resource_subscriptions=["test://watched-resource"]) as watching:
            await call(session, "test_trigger_resource_update")
            with anyio.fail_after(15):
                await updated.wait()
                async for event in watching:  # the 2026 client's listen stream subscribed at the upstream too
                    assert event.uri == "test://watched-resource"  # type: ignore[union-attr]
                    break
        update = next(m for m in seen if isinstance(m, types.ResourceUpdatedNotification))
        assert str(update.params.uri) == "test://watched-resource"



async def test_a_session_holds_a_bounded_number_of_resource_subscriptions(triads: dict[str, tuple[str, Proc]]
                                                                          ) -> None:
    """Past `MAX_SUBSCRIPTIONS` a new subscription is refused with a clear error (one it holds is still fine), and
    another session is not affected."""
    from exposers.notify import MAX_SUBSCRIPTIONS

    url, _ = triads["handshake"]
    async with streamable_http_client(url) as (read, write), ClientSession(read, write) as session, \
            streamable_http_client(url) as (other_read, other_write), ClientSession(other_read, other_write) as other:
        await session.initialize()
        await other.initialize()
        for n in range(MAX_SUBSCRIPTIONS):
            await session.subscribe_resource(f"test://watched-resource/{n}")  # type: ignore[arg-type]
        with pytest.raises(MCPError, match="resource subscriptions, the most one session may hold"):
            await session.subscribe_resource("test://watched-resource/one-more")  # type: ignore[arg-type]
        await session.subscribe_resource("test://watched-resource/0")  # type: ignore[arg-type]
        await other.subscribe_resource("test://watched-resource/one-more")  # type: ignore[arg-type]
        await session.unsubscribe_resource("test://watched-resource/0")  # type: ignore[arg-type]
        await session.subscribe_resource("test://watched-resource/one-more")  # type: ignore[arg-type]


async def test_subscriptions_sent_at_once_stay_within_the_bound(triads: dict[str, tuple[str, Proc]]) -> None:
    """Subscriptions sent at once each take their place before the upstream is asked: exactly
    `MAX_SUBSCRIPTIONS` of them are held, the rest refused; a refused one holds no place (one unsubscribed makes
    room for exactly one more)."""
    from exposers.notify import MAX_SUBSCRIPTIONS

    url, _ = triads["handshake"]
    held: list[str] = []
    refused: list[str] = []
    async with streamable_http_client(url) as (read, write), ClientSession(read, write) as session:
        await session.initialize()

        async def subscribe(uri: str) -> None:
            try:
                await session.subscribe_resource(uri)  # type: ignore[arg-type]
            except MCPError as exc:
                assert "the most one session may hold" in str(exc)
                refused.append(uri)
            else:
                held.append(uri)

        with anyio.fail_after(60):
            async with anyio.create_task_group() as tg:
                for n in range(MAX_SUBSCRIPTIONS + 40):
                    tg.start_soon(subscribe, f"test://watched-resource/at-once-{n}")
        assert (len(held), len(refused)) == (MAX_SUBSCRIPTIONS, 40)
        await session.unsubscribe_resource(held[0])  # type: ignore[arg-type]
        await session.subscribe_resource(refused[0])  # type: ignore[arg-type]
        with pytest.raises(MCPError, match="the most one session may hold"):
            await session.subscribe_resource(refused[1])  # type: ignore[arg-type]


async def test_a_listen_stream_holds_a_bounded_number_of_resource_subscriptions(triads: dict[str, tuple[str, Proc]]
                                                                                ) -> None:
    """A 2026-07-28 listen stream's resource subscriptions are each made at the upstream: past `MAX_SUBSCRIPTIONS`
    the stream is refused before any is made, as a session's subscription is."""
    from exposers.notify import MAX_SUBSCRIPTIONS

    url, _ = triads["handshake"]
    uris = [f"test://watched-resource/{n}" for n in range(MAX_SUBSCRIPTIONS + 1)]
    async with Client(url, mode="2026-07-28", cache=None) as modern:
        with pytest.raises(MCPError, match="resource subscriptions"):
            async with modern.listen(resource_subscriptions=uris) as watching:
                with anyio.fail_after(15):
                    async for _event in watching:
                        break
        async with modern.listen(resource_subscriptions=uris[:MAX_SUBSCRIPTIONS]):
            pass  # at the bound, the stream is served
