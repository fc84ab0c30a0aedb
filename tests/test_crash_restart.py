"""A stdio child that crashes and comes back: the crash is one event, not one breaker failure per call in flight,
and a successful restart closes the question (issue 29, point 14)."""

from __future__ import annotations

from pathlib import Path

import anyio
import pytest
from mcp.shared.exceptions import MCPError

from tests.conftest import Proc, start_triad, stdio_upstream, write_config
from tests.test_gateway_e2e import call, http_session

pytestmark = pytest.mark.anyio


@pytest.mark.parametrize("in_flight", [1, 2, 5])
async def test_a_crash_with_calls_in_flight_then_a_restart_does_not_open_the_breaker(
        procs: list[Proc], tmp_path: Path, in_flight: int) -> None:
    """`failures: 2`: had each call in flight counted, two of them would open the circuit for ten minutes."""
    config = write_config(tmp_path, {"upstreams": {"fx": stdio_upstream(
        f"crash-{in_flight}", circuit_breaker={"failures": 2, "cooldown": "10m"})}})
    url = start_triad(procs, config, wait_ready=1)
    triad = procs[-1]
    async with http_session(url) as via:
        errors: list[str] = []

        async def slow() -> None:
            with pytest.raises(MCPError) as raised:
                await call(via, "slow", {"seconds": 60})
            errors.append(raised.value.error.message)

        async with anyio.create_task_group() as tg:
            for _ in range(in_flight - 1):
                tg.start_soon(slow)
            for count in range(1, in_flight):
                await triad.until(r"\[fx\] slow call \S+ started", count=count)
            with pytest.raises(MCPError) as raised:
                await call(via, "die")  # the child exits under every call in flight
            errors.append(raised.value.error.message)
        assert len(errors) == in_flight
        assert all("upstream 'fx'" in error and "next try" not in error for error in errors), errors
        await triad.until(r"upstream fx ready", count=2)  # restarted
        for i in range(10):
            assert (await call(via, "echo", {"text": str(i)}))["content"][0]["text"] == str(i)
    assert "circuit open" not in triad.stderr
