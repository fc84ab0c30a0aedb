"""The console's sources outside the console: the call log, pinned definitions' status, the reload history."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import mcp_types as types
import pytest

from gateway.hooks._chain import Block, CallContext, HookChain, HookEntry, Session
from gateway.observe import ReloadStatus
from gateway.observe._call_log import CallLog
from gateway.state._pins import PinStore

pytestmark = pytest.mark.anyio


def _tool(name: str) -> types.CallToolRequest:
    return types.CallToolRequest(params=types.CallToolRequestParams(name=name, arguments={"password": "hunter2"}))


def test_a_call_is_in_flight_until_it_ends_then_recent_with_its_client_and_outcome() -> None:
    log, session = CallLog(), Session()
    log.attribute(session, "ide")
    record = log.start("fx", "tool", _tool("fail"), session)
    [running] = log.in_flight()
    assert (running.upstream, running.raw, running.client, running.outcome) == ("fx", "fail", "ide", None)
    log.end(record, "tool_error", 0.01)
    assert log.in_flight() == []
    [done] = log.recent()
    assert done.outcome == "tool_error" and done.duration == 0.01 and "hunter2" not in repr(done)


def test_a_read_keeps_no_uri_and_a_call_without_a_session_no_client() -> None:
    log = CallLog()
    read = types.ReadResourceRequest(params=types.ReadResourceRequestParams(uri="file:///home/me/secret.txt"))
    log.end(log.start("fx", "resource", read, None), "timeout", 1.0)
    [done] = log.recent()
    assert (done.outcome, done.raw, done.client) == ("timeout", None, None)
    assert "secret" not in repr(done)


def test_the_log_is_bounded() -> None:
    log = CallLog(size=3)
    for _ in range(5):
        log.end(log.start("fx", "tool", _tool("echo"), None), "ok", 0.0)
    assert [r.number for r in log.recent()] == [5, 4, 3]


async def test_the_chain_names_the_hook_that_blocked() -> None:
    class Refuse:
        priority = 0

        async def before_call(self, ctx: CallContext) -> Block:
            return Block("no")

    log = CallLog()
    chain = HookChain([HookEntry("refuse", Refuse(), 0, 0)], on_block=log.blocked)
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
