"""`--log-format json`: ISO timestamps with a time zone, and the call path's structured fields (upstream, client,
tool, session hashed, duration, outcome) on a real daemon's log; the session id a client holds never appears."""

from __future__ import annotations

import json
import re
from datetime import datetime
from pathlib import Path
from typing import Any

import httpx2
import pytest

from tests.conftest import TRIAD, Proc, start_fixture, stdio_upstream, write_config
from tests.raw_clients import HandshakeSession, answer_of, call, dumps

pytestmark = pytest.mark.anyio


def json_lines(proc: Proc) -> list[dict[str, Any]]:
    return [json.loads(line) for line in proc.stderr.splitlines() if line.strip()]


async def json_logging_triad(procs: list[Proc], config: Path, upstream: str) -> tuple[Proc, str]:
    """`triad serve` with JSON log lines at DEBUG, once `upstream` is ready; its process and URL."""
    proc = Proc([*TRIAD, "serve", "-c", str(config), "--port", "0", "--log-format", "json", "--log-level", "DEBUG"])
    procs.append(proc)
    url = (await proc.until(r'"message": "listening on (http://127\.0\.0\.1:\d+/mcp)')).group(1)
    await proc.until(rf"upstream {upstream} ready")
    return proc, url


async def test_json_lines_carry_iso_times_and_the_call_paths_fields(procs: list[Proc], tmp_path: Path) -> None:
    config = write_config(tmp_path, {"upstreams": {"fx": stdio_upstream("jsonfields", timeout="1s")},
                                     "policy": {"profile": {"deny": ["fail"]}}})
    proc, url = await json_logging_triad(procs, config, "fx")
    async with httpx2.AsyncClient() as http:
        session = await HandshakeSession(http, url).open()
        session_id = session.headers["Mcp-Session-Id"]
        answer = answer_of(await session.post(dumps(call(1, "echo", {"text": "x"}))))
        assert answer["result"]["content"][0]["text"] == "x"
        answer = answer_of(await session.post(dumps(call(2, "slow", {"seconds": 600}))))
        assert answer["error"]["code"] == -32001  # past the upstream's timeout
        answer = answer_of(await session.post(dumps(call(3, "fail", {}))))
        assert "Unknown tool" in answer["error"]["message"]
    await proc.until(r'"outcome": "denied"')

    lines = json_lines(proc)
    for line in lines:
        stamp = datetime.fromisoformat(line["time"])
        assert stamp.utcoffset() is not None and re.search(r"T\d\d:\d\d:\d\d\.\d{3}", line["time"]), line["time"]
    calls = {line["raw"]: line for line in lines if line["logger"] == "triad.calls"}
    echo = calls["echo"]
    label = echo["session"]
    assert re.fullmatch(r"s-[0-9a-f]{12}", label)
    assert {k: echo[k] for k in ("kind", "upstream", "client", "tool", "outcome", "level")} == {
        "kind": "tool", "upstream": "fx", "client": "local", "tool": "echo", "outcome": "ok", "level": "debug"}
    assert isinstance(echo["duration_ms"], float) and echo["duration_ms"] >= 0
    slow = calls["slow"]
    assert (slow["outcome"], slow["level"], slow["session"]) == ("timeout", "info", label)
    denied = next(line for line in lines if line.get("outcome") == "denied")
    assert {k: denied[k] for k in ("client", "tool", "layer", "pattern", "session")} == {
        "client": "local", "tool": "fail", "layer": "profile", "pattern": "fail", "session": label}
    assert session_id not in proc.stderr  # only its hash is ever written


async def test_the_consumers_lines_carry_the_upstream_the_session_the_outcome_and_the_duration(
        procs: list[Proc], tmp_path: Path) -> None:
    """An upstream's state lines and a per-client upstream session's lines, with the same hashed session as the
    call path's lines of that client."""
    config = write_config(tmp_path, {"upstreams": {"px": {"url": start_fixture(procs, "http", "jsonconsumers"),
                                                          "sessions": "per_client"}}})
    proc, url = await json_logging_triad(procs, config, "px")
    async with httpx2.AsyncClient() as http:
        session = await HandshakeSession(http, url).open()
        answer = answer_of(await session.post(dumps(call(1, "echo", {"text": "x"}))))
        assert answer["result"]["content"][0]["text"] == "x"
    await proc.until(r'"raw": "echo"')
    lines = json_lines(proc)
    ready = next(line for line in lines if line["message"].startswith("upstream px ready"))
    assert (ready["upstream"], ready["outcome"]) == ("px", "ready") and ready["duration_ms"] > 0
    opened = next(line for line in lines if line.get("outcome") == "session_opened")
    echo = next(line for line in lines if line.get("raw") == "echo")
    assert (opened["upstream"], opened["session"]) == ("px", echo["session"]) and opened["duration_ms"] > 0
