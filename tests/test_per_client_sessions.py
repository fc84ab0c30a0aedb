"""`sessions: per_client`, seen from inside Triad: each downstream session's own upstream session, opened anew
after the upstream lost it, and what the downstream session's end cleans up.

The upstream is the real fixture server over stdio (a child per client session); the downstream session is
Triad's own `gateway.hooks.Session`, with a way back to its client that records what it is sent.
"""

from __future__ import annotations

from typing import Any

import anyio
import mcp_types as types
import pytest

from consumers import Upstream
from consumers.config import UpstreamConfig
from consumers.errors import UpstreamError
from gateway.hooks import Session
from tests.conftest import stdio_upstream

pytestmark = pytest.mark.anyio


class Back:
    """A downstream client's way back (`consumers.relay.Downstream`), declaring nothing."""

    modern = False
    log_level = None
    capabilities: dict[str, Any] | None = None
    cancel_reason = None

    async def log(self, params: types.LoggingMessageNotificationParams) -> None:
        pass

    async def ask(self, request: Any, result_type: Any) -> Any:
        raise AssertionError("not asked")


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
