"""A call of a tool whose upstream is down says so, and when the upstream is tried next: for shared and per-client
upstreams, to clients of both eras; a tool the caller may not see still looks unknown (issue 29, point 15)."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import httpx2
import mcp_types as types
import pytest

from tests.conftest import FIXTURE, PYTHON, Proc, marker, start_triad, write_config
from tests.raw_clients import HandshakeSession, answer_of, call, dumps, modern_call, modern_headers, modern_post
from tests.test_upstream_failures import closed_port

pytestmark = pytest.mark.anyio

SESSIONS = ("shared", "per_client")
ERAS = ("handshake", "2026-07-28")
TOOLS = {"allowed": "echo", "denied": "image"}
"""`image` is denied by the global profile: hidden by policy, whatever its upstream's state."""
DOWN = re.compile(r"upstream '(?P<name>\w+)' is down \(.+\); (the next try is in \d+s|reconnecting now)")


async def post(http: httpx2.AsyncClient, url: str, session: HandshakeSession, era: str, name: str
               ) -> tuple[int, dict[str, Any]]:
    """(HTTP status, JSON-RPC answer) of a call of `name` in `era`."""
    if era == "handshake":
        response = await session.post(dumps(call(1, name, {"text": "x"})))
    else:
        response = await modern_post(http, url, dumps(modern_call(1, name, {"text": "x"})),
                                     modern_headers("tools/call", name))
    return response.status_code, answer_of(response)


async def answer(http: httpx2.AsyncClient, url: str, session: HandshakeSession, era: str, name: str
                 ) -> tuple[int, dict[str, Any]]:
    """(HTTP status, JSON-RPC error) of a call of `name` in `era`."""
    status, body = await post(http, url, session, era, name)
    assert "error" in body, body
    return status, body["error"]


async def test_a_down_upstream_is_named_with_its_next_try_only_to_callers_that_may_see_the_tool(
        procs: list[Proc], tmp_path: Path) -> None:
    fixtures, upstreams = {}, {}
    for sessions in SESSIONS:
        port = closed_port()
        fixtures[sessions] = Proc([PYTHON, str(FIXTURE), "--transport", "http", "--port", str(port), "--name",
                                   marker(f"down-{sessions}")])
        procs.append(fixtures[sessions])
        fixtures[sessions].wait_for(r"READY")
        upstreams[sessions.replace("_", "")] = {"url": f"http://127.0.0.1:{port}/mcp", "sessions": sessions,
                                                "ping_interval": "1s"}
    config = write_config(tmp_path, {"upstreams": upstreams, "policy": {"profile": {"deny": ["*__image"]}}})
    url = start_triad(procs, config, wait_ready=2)
    triad = procs[-1]
    async with httpx2.AsyncClient() as http:
        session = await HandshakeSession(http, url).open()
        for era in ERAS:  # while they are up, they answer (and the session has its own per-client session)
            for upstream in ("shared", "perclient"):
                assert (await post(http, url, session, era, f"{upstream}__echo"))[1]["result"]["content"][0]["text"] \
                    == "x"
        for fixture in fixtures.values():
            fixture.terminate()
        for name in ("shared", "perclient"):
            await triad.until(rf"upstream {name} is down")
        never_was = {era: await answer(http, url, session, era, "shared__no_such_tool") for era in ERAS}
        for era in ERAS:
            assert never_was[era] == ((400 if era == "2026-07-28" else 200),
                                      {"code": types.INVALID_PARAMS, "message": "Unknown tool: shared__no_such_tool"})
        for sessions in SESSIONS:
            upstream = sessions.replace("_", "")
            for era in ERAS:
                for case, tool in TOOLS.items():
                    name = f"{upstream}__{tool}"
                    status, error = await answer(http, url, session, era, name)
                    where = (sessions, era, case, error)
                    if case == "denied":  # exactly what a name that never existed gets
                        assert (status, error) == (never_was[era][0], {"code": types.INVALID_PARAMS,
                                                                       "message": f"Unknown tool: {name}"}), where
                        continue
                    assert status == 200, where  # -32603 has no HTTP status of its own in 2026-07-28
                    assert error["code"] == types.INTERNAL_ERROR, where
                    matched = DOWN.fullmatch(error["message"])
                    assert matched is not None and matched["name"] == upstream, where
                    assert error["data"]["upstream"] == upstream and error["data"]["state"] == "down", where
                    assert isinstance(error["data"]["retryIn"], int | float), where
