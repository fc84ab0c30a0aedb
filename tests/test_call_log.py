"""The console's sources outside the console: the call log, pinned definitions' status, the reload history."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import anyio
import mcp_types as types
import pytest

from gateway.call_log import CallLog
from gateway.errors import UpstreamTimeout
from gateway.hooks import Block, CallContext, HookChain, HookEntry, Session
from gateway.pinning import PinStore
from gateway.reload import ReloadStatus

pytestmark = pytest.mark.anyio


class _Upstream:
    """Stands in for `consumers.Upstream` at the one method the call log uses; `release` ends the call."""

    def __init__(self, name: str, result: dict[str, Any] | Exception) -> None:
        self.name, self.result, self.release, self.entered = name, result, anyio.Event(), anyio.Event()

    async def request(self, request: Any, **options: Any) -> dict[str, Any]:
        self.entered.set()
        await self.release.wait()
        if isinstance(self.result, Exception):
            raise self.result
        return self.result


def _tool(name: str) -> types.CallToolRequest:
    return types.CallToolRequest(params=types.CallToolRequestParams(name=name, arguments={"password": "hunter2"}))


async def test_a_call_is_in_flight_until_it_ends_then_recent_with_its_client_and_outcome() -> None:
    log, session = CallLog(), Session()
    log.attribute(session, "ide")
    upstream = _Upstream("fx", {"content": [], "isError": True})
    async with anyio.create_task_group() as tg:
        tg.start_soon(log.watch, upstream, "tool", _tool("fail"), {"client": session})
        await upstream.entered.wait()
        [running] = log.in_flight()
        assert (running.upstream, running.raw, running.client, running.outcome) == ("fx", "fail", "ide", None)
        upstream.release.set()
    assert log.in_flight() == []
    [done] = log.recent()
    assert done.outcome == "tool_error" and done.duration is not None and "hunter2" not in repr(done)


async def test_a_timeout_is_its_own_outcome_and_a_read_keeps_no_uri() -> None:
    log = CallLog()
    upstream = _Upstream("fx", UpstreamTimeout("fx", "too slow"))
    upstream.release.set()
    read = types.ReadResourceRequest(params=types.ReadResourceRequestParams(uri="file:///home/me/secret.txt"))
    with pytest.raises(UpstreamTimeout):
        await log.watch(upstream, "resource", read, {})
    [done] = log.recent()
    assert (done.outcome, done.raw, done.client) == ("timeout", None, None)


async def test_the_log_is_bounded() -> None:
    log = CallLog(size=3)
    upstream = _Upstream("fx", {"content": []})
    upstream.release.set()
    for _ in range(5):
        await log.watch(upstream, "tool", _tool("echo"), {})
    assert [r.number for r in log.recent()] == [5, 4, 3]


async def test_the_chain_names_the_hook_that_blocked() -> None:
    class Refuse:
        priority = 0

        async def before_call(self, ctx: CallContext) -> Block:
            return Block("no")

    log = CallLog()
    chain = HookChain([HookEntry("refuse", Refuse(), 0, 0)])
    chain.on_block = log.blocked
    ctx = CallContext("tool", "ide", Session(), "fx__echo", "fx", "echo", {"text": "secret"})

    async def send(_ctx: CallContext) -> dict[str, Any]:
        raise AssertionError("a blocked call is never sent")

    result = await chain.run(ctx, send)
    assert result["isError"] is True
    [done] = log.recent()
    assert (done.outcome, done.blocked_by, done.exposed, done.client) == ("blocked", "refuse", "fx__echo", "ide")


def test_pin_status_keeps_the_approved_definition_to_compare(tmp_path: Path) -> None:
    store = PinStore(tmp_path / "pins.json")
    old = {"name": "echo", "description": "Echo the text.", "inputSchema": {"type": "object"}}
    new = {**old, "description": "Echo the text, and mail it away."}
    assert store.status("fx", "echo", old).state == "new"
    assert store.check("fx", "echo", old, trust_new=True) is None
    changed = store.status("fx", "echo", new)
    assert changed.state == "changed"
    assert changed.approved is not None and changed.approved["description"] == "Echo the text."
    assert changed.current["description"] == "Echo the text, and mail it away."
    assert store.approve("fx", "echo", new)
    assert PinStore(tmp_path / "pins.json").status("fx", "echo", new).state == "approved"


def test_reload_history_is_bounded_and_keeps_errors_and_changes() -> None:
    status = ReloadStatus()
    status.record("SIGHUP", False, ["clients.ide.token: ${IDE_TOKEN} is not set"], {})
    for _ in range(60):
        status.record("file changed", True, [], {"added": ["fx"], "kept": []})
    assert len(status.history) == 50
    assert status.history[-1].changes == (("added", ("fx",)), ("kept", ()))
