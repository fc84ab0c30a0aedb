"""What the storm benches (`reload_storm.py`, `redis_garbage.py`) count: every call clients send while the storm
blows, checked against what the upstream executed (tests/servers/ledger_upstream.py prints one `CALL` line per
call it runs).

- sent: calls the clients made; ok: answered with their own text; wrong: answered with something else (another
  call's text, or an answer the upstream never executed); lost: sent, and not answered ok or wrong (an error, a
  tool error, a transport failure); duplicated: calls the upstream executed more than once.

Clients are the MCP SDK's, of both eras: handshake-era sessions (reopened when their session is gone) and
2026-07-28 clients; each call has a unique text.
"""

from __future__ import annotations

import json
import re
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import anyio
import httpx2
from mcp import Client, ClientSession
from mcp.client.streamable_http import streamable_http_client

ROOT = Path(__file__).resolve().parents[1]
LEDGER = ROOT / "tests" / "servers" / "ledger_upstream.py"
CALL_TIMEOUT = 30.0


@dataclass
class Tally:
    sent: int = 0
    ok: int = 0
    wrong: int = 0
    errors: Counter[str] = field(default_factory=Counter)
    answered: set[str] = field(default_factory=set)

    def counts(self, ledger_log: Path) -> dict[str, Any]:
        executed = Counter(json.loads(line.split(" ", 2)[2]).get("text") for line in
                           ledger_log.read_text().splitlines() if line.startswith("CALL echo "))
        phantom = sum(1 for text in self.answered if executed[text] == 0)
        return {"sent": self.sent, "ok": self.ok - phantom, "lost": self.sent - self.ok - self.wrong,
                "duplicated": sum(1 for n in executed.values() if n > 1), "wrong": self.wrong + phantom,
                "errors": dict(self.errors.most_common(5))}


async def _one(tally: Tally, call: Any, text: str) -> None:
    tally.sent += 1
    try:
        with anyio.fail_after(CALL_TIMEOUT):
            result = await call("echo", {"text": text})
    except Exception as exc:  # counted, by kind: the storm's cost
        while isinstance(exc, BaseExceptionGroup) and len(exc.exceptions) == 1:
            exc = exc.exceptions[0]
        tally.errors[f"{type(exc).__name__}: {str(exc)[:80]}"] += 1
        raise
    got = result.content[0].text if result.content and hasattr(result.content[0], "text") else None
    if result.is_error:
        tally.errors[f"tool error: {str(got)[:80]}"] += 1
    elif got == text:
        tally.ok += 1
        tally.answered.add(text)
    else:
        tally.wrong += 1


async def handshake_worker(url: str, token: str, name: str, tally: Tally, stop: anyio.Event) -> None:
    i = 0
    while not stop.is_set():
        try:
            async with httpx2.AsyncClient(headers={"Authorization": f"Bearer {token}"}, timeout=CALL_TIMEOUT) as http, \
                    streamable_http_client(url, http_client=http) as (read, write), \
                    ClientSession(read, write) as session:
                await session.initialize()
                while not stop.is_set():
                    i += 1
                    await _one(tally, session.call_tool, f"{name}-{i}")
        except Exception:  # the session is gone or broken: a new one (counted above when a call failed)
            await anyio.sleep(0.05)


async def modern_worker(url: str, token: str, name: str, tally: Tally, stop: anyio.Event) -> None:
    i = 0
    while not stop.is_set():
        try:
            async with httpx2.AsyncClient(headers={"Authorization": f"Bearer {token}"}, timeout=CALL_TIMEOUT) as http, \
                    Client(streamable_http_client(url, http_client=http), mode="2026-07-28", cache=None) as modern:
                while not stop.is_set():
                    i += 1
                    await _one(tally, modern.call_tool, f"{name}-{i}")
        except Exception:
            await anyio.sleep(0.05)


def wait_in_log(log: Path, pattern: str, timeout: float = 180) -> re.Match[str]:
    """The first match of `pattern` in a process's log (blocking: run it in a thread)."""
    deadline = time.monotonic() + timeout
    while not (found := re.search(pattern, log.read_text())):
        if time.monotonic() > deadline:
            raise SystemExit(f"timed out waiting for {pattern!r} in {log}")
        time.sleep(0.05)
    return found


def report(title: str, counts: dict[str, Any], extra: dict[str, Any]) -> str:
    line = ", ".join(f"{key} {value}" for key, value in counts.items() if key != "errors")
    more = ", ".join(f"{key} {value}" for key, value in extra.items())
    errors = "".join(f"\n  {n} x {kind}" for kind, n in counts["errors"].items())
    return f"{title}: {line}; {more}{errors}"
