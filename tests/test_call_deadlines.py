"""Which limit cut a call, and whose: the `timeout` hook's `max` caps only the upstreams and tools the hook lists,
and the error says whether the cap or the silence after progress ended the call."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import mcp_types as types
import pytest
from mcp.shared.exceptions import MCPError

from tests.conftest import Proc, start_triad, stdio_upstream, write_config
from tests.test_gateway_e2e import call, http_session

pytestmark = pytest.mark.anyio

PROGRESS_FOREVER = {"steps": 40, "delay": 0.3}
"""Progress every 0.3 s for 12 s: only a cap ends it."""
SILENT_AFTER_PROGRESS = {"steps": 2, "delay": 0.1, "then": 30}
"""Two steps, then silence: the timeout counted from the last progress ends it."""

CASES: dict[tuple[str, str], tuple[str, dict[str, Any], str]] = {
    # (limit hit, upstream listed by the hook?): (tool, arguments, what the error must say)
    ("cap", "listed"): ("listed__progress", PROGRESS_FOREVER, "within its maximum call time of 3s"),
    ("cap", "not listed"): ("other__progress", PROGRESS_FOREVER, "within its maximum call time of 5s"),
    ("progress timeout", "listed"): ("listed__progress", SILENT_AFTER_PROGRESS, "within 1s of its last progress"),
    ("progress timeout", "not listed"): ("other__progress", SILENT_AFTER_PROGRESS, "within 2s of its last progress"),
}


@pytest.fixture
def triad_url(procs: list[Proc], tmp_path: Path) -> str:
    config = write_config(tmp_path, {
        "upstreams": {"listed": stdio_upstream("deadline-listed", timeout="2s", max_call_time="5s"),
                      "other": stdio_upstream("deadline-other", timeout="2s", max_call_time="5s")},
        "hooks": [{"timeout": {"upstreams": {"listed": "1s"}, "max": "3s"}}],
    })
    return start_triad(procs, config, wait_ready=2)


@pytest.mark.parametrize("case", list(CASES), ids=[f"{hit}-{listed}" for hit, listed in CASES])
async def test_the_error_names_the_limit_that_cut_the_call_and_max_caps_only_listed_upstreams(
        case: tuple[str, str], triad_url: str) -> None:
    tool, arguments, expected = CASES[case]
    async with http_session(triad_url) as via:
        with pytest.raises(MCPError) as raised:
            await call(via, tool, arguments)
    assert raised.value.error.code == types.REQUEST_TIMEOUT
    assert expected in raised.value.error.message, raised.value.error.message
