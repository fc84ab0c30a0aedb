"""Hostile inputs' cost: the worst request of each kind a caller controls, against a plain call. Loopback only.

    python bench/hostile.py [--rounds N]

Starts Triad on a fleet of 50 upstreams x 100 tools (bench/fleet_upstream.py) plus the tests' fixture upstream
(resource templates, prompts, completions, and tools whose schemas have patterns Python's `re` backtracks on),
with `validate_arguments` on. Sends each kind's worst input `--rounds` times, each time a new one where a cache
could help (a run-level list with a fresh pattern), and prints a Markdown table: kind, the input's size, Triad's
CPU ms per request (utime + stime from /proc/PID/stat) and the ratio to a plain `tools/call`. Every process it
starts is stopped, by PID, at the end.
"""

from __future__ import annotations

import argparse
import json
import string
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

import anyio
import httpx2
from run import ACCEPT, HERE, PY, ROOT, Process, processes, start_to_ready, start_triad, triad_config

from exposers._wire import MAX_JSON_VALUES
from gateway.identity import MAX_RUN_LIST_WORK

FIXTURE = ROOT / "tests" / "servers" / "fixture_upstream.py"
TARGET = "fleet00__tool_001"
Request = Callable[[int], tuple[dict[str, Any], ...]]
"""Round number -> (JSON-RPC request, extra headers[, query parameters])."""
MIN_MEASURED_CPU = 0.5
"""Seconds of Triad CPU a kind is sent for at least (50 clock ticks: a 2% resolution), up to `MAX_ROUNDS_FACTOR`."""
MAX_ROUNDS_FACTOR = 100


def call(name: str, arguments: dict[str, Any], meta: dict[str, Any] | None = None) -> dict[str, Any]:
    params: dict[str, Any] = {"name": name, "arguments": arguments, **({"_meta": meta} if meta else {})}
    return {"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": params}


def request(method: str, params: dict[str, Any]) -> dict[str, Any]:
    return {"jsonrpc": "2.0", "id": 1, "method": method, "params": params}


def worst_list(nonce: int) -> list[str]:
    """As costly as `MAX_RUN_LIST_WILDCARDS` (64) lets a list be: 32 inner globs that nearly match every tool,
    479 long prefixes that share the tools' head, and the tool itself last (so every matcher is tried first)."""
    inner = [f"*{c}*{nonce}" for c in string.ascii_lowercase + "012345"]
    prefixes = [f"fleet00__{'t' * 230}{nonce}_{i}*" for i in range(479)]
    return [*inner, *prefixes, TARGET]


def work_list(nonce: int) -> list[str]:
    """As costly as `MAX_RUN_LIST_WORK` lets a list be on a view of 5,000 tools: its stars in inner globs, and
    long prefixes to the pattern bound."""
    inner = [f"*{c}*{nonce}" for c in string.ascii_lowercase[: MAX_RUN_LIST_WORK // 5_000 // 2]]
    prefixes = [f"fleet00__{'t' * 230}{nonce}_{i}*" for i in range(511 - len(inner))]
    return [*inner, *prefixes, TARGET]


def over_budget(nonce: int) -> list[str]:
    """The known instance: 512 patterns of 256 characters `a*b*c*...`, refused by the search budget."""
    letters = string.ascii_lowercase
    return [("*".join(letters[(i + j + nonce) % 26] for j in range(256)))[:256] for i in range(512)]


def small_objects(count: int, nonce: int) -> list[dict[str, Any]]:
    """`count` JSON values and keys as `{"a": [k, {"b": k}]}` (7 each), the costliest per byte; fresh each round."""
    return [{"a": [k + nonce, {"b": k}]} for k in range(count // 7)]


def big_body_rows() -> list[tuple[str, str, Request]]:
    """The body of small objects in each place a caller puts one, just under `MAX_JSON_VALUES` and far over it
    (refused), on the SDK path (ping, notification, initialize) and the direct path (lists, calls)."""
    places: list[tuple[str, Callable[[list[dict[str, Any]]], dict[str, Any]]]] = [
        ("ping _meta", lambda v: request("ping", {"_meta": {"x": v}})),
        ("notification _meta", lambda v: {"jsonrpc": "2.0", "method": "notifications/progress",
                                          "params": {"progressToken": 1, "progress": 1, "_meta": {"x": v}}}),
        ("tools/list _meta", lambda v: request("tools/list", {"_meta": {"x": v}})),
        ("tools/call unknown tool", lambda v: call("fleet00__nope", {"x": v})),
        ("tools/call arguments", lambda v: call(TARGET, {"x": 1, "y": v})),
    ]
    rows: list[tuple[str, str, Request]] = []
    for place, make in places:
        rows.append((f"body in {place}", f"{MAX_JSON_VALUES - 100:,} values and keys",
                     lambda n, make=make: (make(small_objects(MAX_JSON_VALUES - 100, n)), {})))  # type: ignore[misc]
        rows.append((f"body in {place} (refused)", "500,000 values",
                     lambda n, make=make: (make(small_objects(500_000, n)), {})))  # type: ignore[misc]
    return rows


KINDS: list[tuple[str, str, Request]] = [
    ("plain tools/call", "-", lambda n: (call(TARGET, {"x": n}), {})),
    ("_meta run list at budget", "512 patterns", lambda n: (call(TARGET, {"x": 1}, {"triad/tools": worst_list(n)}),
                                                            {})),
    ("_meta run list over budget (refused)", "512 x 256 chars",
     lambda n: (call(TARGET, {"x": 1}, {"triad/tools": over_budget(n)}), {})),
    ("X-Triad-Tools header at budget", "512 patterns",
     lambda n: (call(TARGET, {"x": 1}), {"X-Triad-Tools": ",".join(worst_list(n))})),
    ("tools/list, run list at MAX_RUN_LIST_WILDCARDS (refused: over MAX_RUN_LIST_WORK)", "5,000 tools",
     lambda n: (request("tools/list", {"_meta": {"triad/tools": worst_list(n)}}), {})),
    ("plain tools/list", "5,000 tools", lambda n: (request("tools/list", {}), {})),
    ("tools/list, run list at MAX_RUN_LIST_WORK", "5,000 tools",
     lambda n: (request("tools/list", {"_meta": {"triad/tools": work_list(n)}}), {})),
    ("schema pattern ^(a|a)*$", "100,000 chars", lambda n: (call("fx__redos", {"s": "a" * 100_000 + "!"}), {})),
    ("schema patternProperties", "2,000 keys",
     lambda n: (call("fx__redos", {f"{'b' * 40}{i}!": "x" for i in range(2000)}), {})),
    ("schema look-ahead (refused)", "-", lambda n: (call("fx__lookaround", {"s": "x" * 1000}), {})),
    ("cursor", "100,000 chars", lambda n: (request("tools/list", {"cursor": "A" * 100_000}), {})),
    ("resource URI vs templates", "8,000 chars",
     lambda n: (request("resources/read", {"uri": "fixture://items/" + "%7B" * 2600}), {})),
    ("search query, distinct tokens", "1,024 chars",
     lambda n: (call("search_tools", {"query": " ".join(f"q{n}w{i}" for i in range(140))[:1024]}), {})),
    ("completion value", "200,000 chars",
     lambda n: (request("completion/complete", {"ref": {"type": "ref/prompt", "name": "fx__greet"},
                                                "argument": {"name": "who", "value": "w" * 200_000}}), {})),
    ("prompt arguments", "5,000 arguments",
     lambda n: (request("prompts/get", {"name": "fx__greet", "arguments": {f"k{i}": "v" * 20 for i in range(5000)}}),
                {})),
    ("?tools= at budget (httpx's 64 KiB URL: 32 inner globs, 240 prefixes)", "273 patterns",
     lambda n: (call(TARGET, {"x": 1}), {}, {"tools": ",".join([*worst_list(n)[:272], TARGET])})),
    *big_body_rows(),
    ("body: one string", "4 MiB", lambda n: (call(TARGET, {"x": 1, "y": f"{n}" + "a" * (4 * 2**20 - 200)}), {})),
    ("body: 199-digit runs in strings", "2 MiB",
     lambda n: (call(TARGET, {"x": 1, "y": [f"{n}" + "1" * 199] * (MAX_JSON_VALUES - 100)}), {})),
]


async def session(http: httpx2.AsyncClient, url: str) -> dict[str, str]:
    """A handshake-era session's headers."""
    response = await http.post(url, headers=ACCEPT, json={
        "jsonrpc": "2.0", "id": 0, "method": "initialize",
        "params": {"protocolVersion": "2025-11-25", "capabilities": {},
                   "clientInfo": {"name": "hostile", "version": "1"}}})
    headers = {**ACCEPT, "Mcp-Session-Id": response.headers["mcp-session-id"], "MCP-Protocol-Version": "2025-11-25"}
    await http.post(url, headers=headers, json={"jsonrpc": "2.0", "method": "notifications/initialized"})
    return headers


def outcome(response: httpx2.Response) -> str:
    text = response.text
    if response.status_code == 202 and not text:  # a notification taken
        return "202"
    if response.headers.get("content-type", "").startswith("text/event-stream"):
        text = next(line[5:] for line in text.splitlines() if line.startswith("data:"))
    message = json.loads(text)
    if "error" in message:
        return f"error {message['error']['code']}"
    return "tool error" if message["result"].get("isError") else "result"


def sent(made: tuple[dict[str, Any], ...]) -> tuple[dict[str, Any], dict[str, str], dict[str, str]]:
    return made[0], made[1], made[2] if len(made) > 2 else {}


async def measure(triad: Process, url: str, rounds: int) -> list[tuple[str, str, float, str]]:
    rows = []
    async with httpx2.AsyncClient(timeout=120) as http:
        headers = await session(http, url)
        for kind, size, make in KINDS:
            body, extra, params = sent(make(-1))  # warm-up: views of the base identity, validators, search index
            await http.post(url, headers={**headers, **extra}, params=params, json=body)
            before, seen, n = triad.cpu_seconds(), "", 0
            # /proc counts CPU in clock ticks (10 ms): a cheap kind runs until it has used enough of them to measure
            while n < rounds or (triad.cpu_seconds() - before < MIN_MEASURED_CPU and n < MAX_ROUNDS_FACTOR * rounds):
                body, extra, params = sent(make(n))
                seen = outcome(await http.post(url, headers={**headers, **extra}, params=params, json=body))
                n += 1
            rows.append((kind, size, (triad.cpu_seconds() - before) * 1000 / n, seen))
    return rows


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=20)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as name, processes() as started:
        tmp = Path(name)
        fleet: dict[str, Any] = {f"fleet{i:02d}": {"command": PY, "args": [str(HERE / "fleet_upstream.py")]}
                                 for i in range(50)}
        fleet["fx"] = {"command": PY, "args": [str(FIXTURE), "--redos-tool"]}
        config = triad_config(tmp, fleet, hooks=["validate_arguments"],
                              search={"tools_mode": "search"}, naming={"prefix": "always"})
        triad, url = start_triad(tmp, config)
        started.append(triad)
        await start_to_ready(triad, url, 51)
        rows = await measure(triad, url, args.rounds)
    plain = rows[0][2]
    print("| kind | size | Triad CPU ms / request | x plain call | answer |")
    print("|---|---|---:|---:|---|")
    for kind, size, cpu, seen in rows:
        print(f"| {kind} | {size} | {cpu:.2f} | {cpu / plain:.1f} | {seen} |")


if __name__ == "__main__":
    anyio.run(main)
