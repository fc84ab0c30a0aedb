"""Triad's benchmark: the gateway against direct calls, a transparent pipe, and peer gateways. Loopback only.

    make bench              (sets up bench/.venv-* for the peers, then runs this script)
    python bench/run.py [--calls N] [--skip-peers] [--skip-contextforge] [--skip-fleet] [--out bench/results]

The peers: mcp-proxy, a FastMCP proxy, and IBM ContextForge (its default multi-worker server and one worker, each
with a virtual server over the same echo upstream; bench/peers/contextforge.py says how it is set up).

Prints a Markdown table and writes JSON rows to bench/results/. Every process it starts is stopped at the end.
Figures per row: sequential p50/p99 (raw JSON-RPC driver), calls/s with 8 and 32 concurrent sessions, the proxy
process's CPU time per forwarded call and its peak RSS; gathered in rounds that visit every row in turn, so that
the machine's noisy moments fall on all rows alike. The fleet part starts 50 upstreams x 100 tools behind
Triad and measures start-to-ready (beside the spawn floor: the same 50 upstreams started and listed by a bare
script), `tools/list` over 5,000 tools (with Triad's CPU per page), the upstream requests that listing caused, and
Triad's RSS with 1,000 idle HTTP sessions.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import re
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import anyio
import httpx2
import yaml
from peers import contextforge

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
PY = sys.executable
CLK_TCK = os.sysconf("SC_CLK_TCK")
ACCEPT = {"Accept": "application/json, text/event-stream", "Content-Type": "application/json"}
PEERS = {"mcp-proxy": HERE / ".venv-mcp-proxy" / "bin", "fastmcp": HERE / ".venv-fastmcp" / "bin"}


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


class Process:
    """A process the bench started. With `tree`, its CPU time and memory are those of it and its children (a
    multi-worker server's master and workers; each worker's peak RSS counts the pages it shares with the others)."""

    def __init__(self, args: list[str], log: Path, env: dict[str, str] | None = None, cwd: Path = ROOT,
                 tree: bool = False, stdout_to_log: bool = False) -> None:
        self.log, self.tree = log, tree
        self.started = time.perf_counter()
        stderr = log.open("w")
        self.popen = subprocess.Popen(args, stdout=stderr if stdout_to_log else subprocess.DEVNULL, stderr=stderr,
                                      stdin=subprocess.DEVNULL, env={**os.environ, **(env or {})}, cwd=cwd)

    @property
    def pid(self) -> int:
        return self.popen.pid

    def pids(self) -> list[int]:
        if not self.tree:
            return [self.pid]
        children = Path(f"/proc/{self.pid}/task/{self.pid}/children").read_text().split()
        return [self.pid, *map(int, children)]

    def cpu_seconds(self) -> float:
        total = 0
        for pid in self.pids():
            fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
            total += int(fields[11]) + int(fields[12])
        return total / CLK_TCK

    def memory(self, key: str) -> float:
        """VmHWM (peak) or VmRSS, in MB."""
        total = 0
        for pid in self.pids():
            match = re.search(rf"^{key}:\s+(\d+) kB", Path(f"/proc/{pid}/status").read_text(), re.M)
            if not match:
                return float("nan")
            total += int(match.group(1))
        return total / 1024

    def pss_mb(self) -> float:
        """Proportional set size now, in MB: what a process tree really holds (shared pages split between them)."""
        total = 0
        for pid in self.pids():
            match = re.search(r"^Pss:\s+(\d+) kB", Path(f"/proc/{pid}/smaps_rollup").read_text(), re.M)
            total += int(match.group(1)) if match else 0
        return total / 1024

    def stop(self) -> None:
        if self.popen.poll() is None:
            children = self.pids()[1:]
            self.popen.terminate()
            try:
                self.popen.wait(10)
            except subprocess.TimeoutExpired:
                self.popen.kill()
                self.popen.wait()
            for pid in children:  # workers a killed master left behind
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGKILL)


MODERN = "2026-07-28"
MODERN_META = {"io.modelcontextprotocol/protocolVersion": MODERN,
               "io.modelcontextprotocol/clientInfo": {"name": "bench", "version": "1"},
               "io.modelcontextprotocol/clientCapabilities": {}}


class RawSession:
    """A lean JSON-RPC-over-HTTP client: one keep-alive connection, one parse per response. A handshake-era session
    (2025-11-25), or with `modern` a stateless 2026-07-28 client (its envelope in `_meta` and routing headers).
    `headers` go on every request (a peer's bearer token); `tools` maps the echo tools' names to the ones the target
    gives them (a peer's prefix)."""

    def __init__(self, http: httpx2.AsyncClient, url: str, modern: bool = False, headers: dict[str, str] | None = None,
                 tools: dict[str, str] | None = None) -> None:
        self.http, self.url, self.next_id, self.modern = http, url, 0, modern
        self.headers, self.tools = {**ACCEPT, **(headers or {})}, tools or {}

    async def request(self, method: str, params: dict[str, Any] | None = None) -> dict[str, Any]:
        self.next_id += 1
        headers = self.headers
        if self.modern:
            params = {**(params or {}), "_meta": MODERN_META}
            headers = {**headers, "Mcp-Method": method, **({"Mcp-Name": params["name"]} if "name" in params else {})}
        body = {"jsonrpc": "2.0", "id": self.next_id, "method": method, **({"params": params} if params else {})}
        response = await self.http.post(self.url, json=body, headers=headers)
        if "mcp-session-id" in response.headers:
            self.headers["Mcp-Session-Id"] = response.headers["mcp-session-id"]
        text = response.text
        if response.headers.get("content-type", "").startswith("text/event-stream"):
            text = next(line[5:] for line in text.splitlines() if line.startswith("data:"))
        try:
            message = json.loads(text)
        except ValueError:
            raise RuntimeError(f"{self.url} {method}: HTTP {response.status_code} {text[:300]!r}") from None
        if "error" in message:
            raise RuntimeError(f"{self.url} {method}: {message['error']}")
        return message["result"]

    async def open(self) -> RawSession:
        if self.modern:
            self.headers["MCP-Protocol-Version"] = MODERN
            return self
        await self.request("initialize", {"protocolVersion": "2025-11-25", "capabilities": {},
                                          "clientInfo": {"name": "bench", "version": "1"}})
        self.headers["MCP-Protocol-Version"] = "2025-11-25"
        await self.http.post(self.url, json={"jsonrpc": "2.0", "method": "notifications/initialized"},
                             headers=self.headers)
        return self

    async def call(self, tool: str) -> None:
        result = await self.request("tools/call", {"name": self.tools.get(tool, tool), "arguments": {"text": "hello"}})
        assert result["content"][0]["text"] == "hello", result


async def wait_listening(url: str, seconds: float = 60) -> None:
    deadline = time.monotonic() + seconds
    async with httpx2.AsyncClient() as http:
        while True:
            try:
                await RawSession(http, url).open()
                return
            except (httpx2.HTTPError, RuntimeError, StopIteration, json.JSONDecodeError):
                if time.monotonic() > deadline:
                    raise
                await anyio.sleep(0.1)


async def timed(session: RawSession, tool: str, calls: int) -> list[float]:
    times = []
    for _ in range(calls):
        start = time.perf_counter()
        await session.call(tool)
        times.append((time.perf_counter() - start) * 1000)
    return times


async def concurrently(sessions: list[RawSession], calls_each: int) -> tuple[int, float]:
    """(calls made, seconds taken) with every session calling `echo` at once."""

    async def run(session: RawSession) -> None:
        for _ in range(calls_each):
            await session.call("echo")

    start = time.perf_counter()
    async with anyio.create_task_group() as tg:
        for session in sessions:
            tg.start_soon(run, session)
    return len(sessions) * calls_each, time.perf_counter() - start


async def sdk_sequential(url: str, tool: str, calls: int) -> float:
    from mcp import ClientSession
    from mcp.client.streamable_http import streamable_http_client

    async with streamable_http_client(url) as (read, write), ClientSession(read, write) as session:
        await session.initialize()
        times = []
        for i in range(calls + 10):
            start = time.perf_counter()
            await session.call_tool(tool, {"text": "hello"})
            if i >= 10:
                times.append((time.perf_counter() - start) * 1000)
        return statistics.median(times)


def percentile(values: list[float], p: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(p / 100 * len(ordered)))]


@dataclass
class Target:
    name: str
    url: str
    proxy: Process | None
    """The process whose CPU and memory the row reports (None: a direct row)."""
    modern: bool = False
    sdk: bool = False
    """Also measure with the Python SDK client."""
    headers: dict[str, str] | None = None
    tools: dict[str, str] | None = None
    """As in RawSession."""

    def session(self, http: httpx2.AsyncClient) -> RawSession:
        return RawSession(http, self.url, self.modern, self.headers, self.tools)


ROUNDS = 5
"""Each figure is gathered over this many rounds that visit every target in turn, so that a noisy moment of the
machine falls on all rows alike instead of on one."""


async def measure(targets: list[Target], calls: int) -> list[dict[str, Any]]:
    fast: dict[str, list[float]] = {t.name: [] for t in targets}
    slow: dict[str, list[float]] = {t.name: [] for t in targets}
    made: dict[tuple[str, int], list[tuple[int, float]]] = {(t.name, n): [] for t in targets for n in (8, 32)}
    cpu = dict.fromkeys(fast, 0.0)
    forwarded = dict.fromkeys(fast, 0)
    limits = httpx2.Limits(max_connections=64, max_keepalive_connections=64)
    async with httpx2.AsyncClient(limits=limits, timeout=60) as http:
        alone = {t.name: await t.session(http).open() for t in targets}
        crowds = {(t.name, n): [await t.session(http).open() for _ in range(n)]
                  for t in targets for n in (8, 32)}
        for t in targets:
            await timed(alone[t.name], "echo", 20)  # warm-up
            for n in (8, 32):  # every session's first call: a per_client upstream session opens then (measured apart)
                await concurrently(crowds[(t.name, n)], 1)
        n_fast, n_slow = calls // ROUNDS, max(calls // 3, 50) // ROUNDS
        each = {8: max(calls // 8, 20) // ROUNDS + 1, 32: max(calls // 16, 10) // ROUNDS + 1}
        for _ in range(ROUNDS):
            for t in targets:
                before = t.proxy.cpu_seconds() if t.proxy else 0.0
                fast[t.name] += await timed(alone[t.name], "echo", n_fast)
                slow[t.name] += await timed(alone[t.name], "echo_slow", n_slow)
                forwarded[t.name] += n_fast + n_slow
                for n in (8, 32):
                    done = await concurrently(crowds[(t.name, n)], each[n])
                    made[(t.name, n)].append(done)
                    forwarded[t.name] += done[0]
                if t.proxy is not None:
                    cpu[t.name] += t.proxy.cpu_seconds() - before
    rows = []
    for t in targets:
        row: dict[str, Any] = {"row": t.name, "era": MODERN if t.modern else "2025-11-25",
                               "p50_ms": statistics.median(fast[t.name]), "p99_ms": percentile(fast[t.name], 99),
                               "slow_p50_ms": statistics.median(slow[t.name])}
        for n in (8, 32):
            row[f"rps_{n}"] = sum(c for c, _ in made[(t.name, n)]) / sum(s for _, s in made[(t.name, n)])
        if t.proxy is not None:
            row["cpu_ms_per_call"] = cpu[t.name] * 1000 / forwarded[t.name]
            row["peak_rss_mb"] = t.proxy.memory("VmHWM")
            if t.proxy.tree:
                row["processes"] = len(t.proxy.pids())
                row["pss_mb"] = t.proxy.pss_mb()
        if t.sdk:
            row["sdk_p50_ms"] = await sdk_sequential(t.url, "echo", max(calls // 3, 50))
        rows.append(row)
    return rows


def triad_config(tmp: Path, upstreams: dict[str, Any], **extra: Any) -> Path:
    path = tmp / f"triad-{len(list(tmp.iterdir()))}.yaml"
    path.write_text(yaml.safe_dump({"upstreams": upstreams, **extra}))
    return path


def start_triad(tmp: Path, config: Path, log_level: str = "WARNING") -> tuple[Process, str]:
    port = free_port()
    proc = Process([PY, "-m", "gateway.cli", "serve", "-c", str(config), "--port", str(port), "--log-level",
                    log_level], tmp / f"triad-{port}.log")
    return proc, f"http://127.0.0.1:{port}/mcp"


@contextmanager
def processes() -> Iterator[list[Process]]:
    started: list[Process] = []
    try:
        yield started
    finally:
        for proc in reversed(started):
            proc.stop()


async def contextforge_targets(tmp: Path, upstream: str, started: list[Process]) -> list[Target]:
    """ContextForge's default multi-worker server and a one-worker one, each with a database of its own, a gateway
    for `upstream` and a virtual server over its tools (bench/peers/contextforge.py says what is changed and why)."""
    servers = {f"ContextForge -> HTTP ({contextforge.default_workers()} workers)": contextforge.default_workers(),
               "ContextForge -> HTTP, 1 worker": None}
    launched = []
    for name, workers in servers.items():
        workdir = tmp / f"contextforge-{len(launched)}"
        workdir.mkdir()
        port = free_port()
        env = contextforge.environment(workdir, port)
        proc = Process(contextforge.command(port, workers), workdir / "contextforge.log", env, cwd=workdir,
                       tree=workers is not None, stdout_to_log=True)
        started.append(proc)
        launched.append((name, proc, env, f"http://127.0.0.1:{port}"))
    targets = []
    for name, proc, env, base in launched:  # both start (and migrate their databases) at once
        await contextforge.wait_healthy(base, proc.popen, proc.log)
        token = contextforge.mint_token(env)
        url, tools = await contextforge.publish(base, upstream, token)
        targets.append(Target(name, url, proc, headers={"Authorization": f"Bearer {token}"}, tools=tools))
    return targets


async def call_rows(tmp: Path, calls: int, skip_peers: bool, skip_contextforge: bool) -> list[dict[str, Any]]:
    with processes() as started:
        up_port = free_port()
        started.append(Process([PY, str(HERE / "echo_upstream.py"), "--http", str(up_port)], tmp / "upstream.log"))
        upstream = f"http://127.0.0.1:{up_port}/mcp"
        await wait_listening(upstream)

        pipe_port = free_port()
        pipe = Process([PY, str(HERE / "pipe.py"), upstream, str(pipe_port)], tmp / "pipe.log")
        started.append(pipe)
        pipe_url = f"http://127.0.0.1:{pipe_port}/mcp"
        await wait_listening(pipe_url)

        triad, triad_url = start_triad(tmp, triad_config(tmp, {"echo": {"url": upstream, "sessions": "shared"}}))
        started.append(triad)
        await start_to_ready(triad, triad_url, 1)

        own, own_url = start_triad(tmp, triad_config(tmp, {"echo": {"url": upstream, "sessions": "per_client"}}))
        started.append(own)
        await start_to_ready(own, own_url, 1)

        stdio_upstream = {"echo": {"command": PY, "args": [str(HERE / "echo_upstream.py")]}}
        triad_stdio, stdio_url = start_triad(tmp, triad_config(tmp, stdio_upstream))
        started.append(triad_stdio)
        await start_to_ready(triad_stdio, stdio_url, 1)

        targets = [
            Target("direct (SDK upstream, HTTP)", upstream, None, sdk=True),
            Target("transparent pipe -> HTTP", pipe_url, pipe),
            Target("Triad -> HTTP", triad_url, triad, sdk=True),
            Target("Triad -> HTTP, per_client", own_url, own),
            Target("Triad -> stdio", stdio_url, triad_stdio),
            # the same hops for a stateless 2026-07-28 client
            Target("direct, 2026-07-28 client", upstream, None, modern=True),
            Target("transparent pipe, 2026-07-28 client", pipe_url, pipe, modern=True),
            Target("Triad -> HTTP, 2026-07-28 client", triad_url, triad, modern=True),
        ]
        if not skip_peers and (PEERS["mcp-proxy"] / "mcp-proxy").exists():
            port = free_port()
            proxy = Process([str(PEERS["mcp-proxy"] / "mcp-proxy"), "--host", "127.0.0.1", "--port", str(port), "--",
                             PY, str(HERE / "echo_upstream.py")], tmp / "mcp-proxy.log")
            started.append(proxy)
            await wait_listening(f"http://127.0.0.1:{port}/mcp")
            targets.append(Target("mcp-proxy -> stdio", f"http://127.0.0.1:{port}/mcp", proxy))
        if not skip_peers and (PEERS["fastmcp"] / "python").exists():
            port = free_port()
            proxy = Process([str(PEERS["fastmcp"] / "python"), str(HERE / "fastmcp_proxy.py"), upstream, str(port)],
                            tmp / "fastmcp.log")
            started.append(proxy)
            await wait_listening(f"http://127.0.0.1:{port}/mcp")
            targets.append(Target("FastMCP proxy -> HTTP", f"http://127.0.0.1:{port}/mcp", proxy))
        if not skip_peers and not skip_contextforge:
            if contextforge.installed():
                targets += await contextforge_targets(tmp, upstream, started)
            else:
                print(f"ContextForge is not installed in {contextforge.BIN.parent} (`make bench` installs it): "
                      "its rows are left out", file=sys.stderr)
        return await measure(targets, calls)


PER_CLIENT_SESSIONS = 40
"""Downstream sessions opened to measure what `sessions: per_client` costs per client."""


async def start_echo_upstream(started: list[Process], log: Path) -> str:
    """The echo upstream over streamable HTTP, among `started`; its URL once it listens."""
    port = free_port()
    started.append(Process([PY, str(HERE / "echo_upstream.py"), "--http", str(port)], log))
    url = f"http://127.0.0.1:{port}/mcp"
    await wait_listening(url)
    return url


async def first_and_next(sessions: list[RawSession], ask: Callable[[RawSession], Awaitable[Any]]
                         ) -> tuple[list[float], list[float]]:
    """Milliseconds of each session's first `ask` and of its next one; one session at a time (latency, not
    throughput)."""
    first, second = [], []
    for session in sessions:
        for times in (first, second):
            start = time.perf_counter()
            await ask(session)
            times.append((time.perf_counter() - start) * 1000)
    return first, second


async def per_client_rows(tmp: Path) -> dict[str, Any]:
    """What an upstream session of one's own costs a client: Triad's RSS per idle per-client session (HTTP; stdio,
    with the children's RSS apart), and a client's first call against its second (the extra `initialize`)."""
    out: dict[str, Any] = {}
    with processes() as started:
        upstream = await start_echo_upstream(started, tmp / "pc-up.log")
        kinds = {"http": {"url": upstream, "sessions": "per_client"},
                 "stdio": {"command": PY, "args": [str(HERE / "echo_upstream.py")], "sessions": "per_client"}}
        for kind, settings in kinds.items():
            triad, url = start_triad(tmp, triad_config(tmp, {"echo": settings}))
            started.append(triad)
            await start_to_ready(triad, url, 1)
            async with httpx2.AsyncClient(timeout=60) as http:
                sessions = [await RawSession(http, url).open() for _ in range(PER_CLIENT_SESSIONS)]
                before = triad.memory("VmRSS")
                children = children_rss_mb(triad.pid)
                first, second = await first_and_next(sessions, lambda session: session.call("echo"))
                out[f"{kind}_rss_per_client_session_kb"] = (triad.memory("VmRSS") - before) * 1024 / len(sessions)
                if kind == "stdio":
                    out["stdio_child_rss_per_client_session_mb"] = (children_rss_mb(triad.pid) - children) / len(
                        sessions)
                out[f"{kind}_first_call_p50_ms"] = statistics.median(first)
                out[f"{kind}_second_call_p50_ms"] = statistics.median(second)
            triad.stop()
    return out


async def per_client_list_rows(tmp: Path) -> dict[str, Any]:
    """What listing costs when each client sees what its own upstream session lists (`sessions: per_client`),
    beside `shared`: a session's first `tools/list` (the very first one opens an upstream session, since no
    session with its capabilities has listed yet; later ones reuse what a session with the same capabilities
    listed), and its next one (a cached page)."""
    out: dict[str, Any] = {}
    with processes() as started:
        upstream = await start_echo_upstream(started, tmp / "pl-up.log")
        for mode in ("shared", "per_client"):
            triad, url = start_triad(tmp, triad_config(tmp, {"echo": {"url": upstream, "sessions": mode}}))
            started.append(triad)
            await start_to_ready(triad, url, 1)
            async with httpx2.AsyncClient(timeout=60) as http:
                sessions = [await RawSession(http, url).open() for _ in range(PER_CLIENT_SESSIONS)]
                first, second = await first_and_next(sessions, lambda session: session.request("tools/list"))
                out[f"{mode}_first_session_first_list_ms"] = first[0]
                out[f"{mode}_first_list_p50_ms"] = statistics.median(first[1:])
                out[f"{mode}_next_list_p50_ms"] = statistics.median(second)
            triad.stop()
    return out


def children_rss_mb(pid: int) -> float:
    """The resident memory of a process's children, in MB (Linux /proc)."""
    total = 0.0
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            status = (entry / "status").read_text()
        except OSError:
            continue
        fields = dict(line.split(":", 1) for line in status.splitlines() if ":" in line)
        if fields.get("PPid", "").strip() == str(pid) and "VmRSS" in fields:
            total += float(fields["VmRSS"].split()[0]) / 1024
    return total


async def fleet_rows(tmp: Path) -> dict[str, Any]:
    fleet = {f"fleet{i:02d}": {"command": PY, "args": [str(HERE / "fleet_upstream.py")]} for i in range(50)}
    out: dict[str, Any] = {"fleet_spawn_floor_s": await spawn_floor(50)}
    with processes() as started:
        # one upstream on its own: spawn, initialize, list (what Triad waits for, per upstream)
        solo, solo_url = start_triad(tmp, triad_config(tmp, {"solo": fleet["fleet00"]}), "INFO")
        started.append(solo)
        out["single_upstream_start_to_ready_s"] = await start_to_ready(solo, solo_url, 1)
        solo.stop()

        triad, url = start_triad(tmp, triad_config(tmp, fleet, page_size=200), "INFO")
        started.append(triad)
        out["fleet_start_to_ready_s"] = await start_to_ready(triad, url, 50)
        lists_before = triad.log.read_text().count("fleet-request tools/list")
        async with httpx2.AsyncClient(timeout=60) as http:
            session = await RawSession(http, url).open()
            await list_all(session)  # warm-up: views and pages are computed once per registry version
            times, pages, first_page = [], 0, []
            cpu_before = triad.cpu_seconds()
            for _ in range(20):
                start = time.perf_counter()
                tools, pages = await list_all(session)
                times.append((time.perf_counter() - start) * 1000)
                start = time.perf_counter()
                await session.request("tools/list")
                first_page.append((time.perf_counter() - start) * 1000)
            out["fleet_tools"] = tools
            out["fleet_pages"] = pages
            out["fleet_list_all_pages_ms"] = statistics.median(times)
            out["fleet_list_one_page_ms"] = statistics.median(first_page)
            out["fleet_list_triad_cpu_ms_per_page"] = (triad.cpu_seconds() - cpu_before) * 1000 / (20 * (pages + 1))
            modern = await RawSession(http, url, modern=True).open()
            await list_all(modern)
            times = []
            for _ in range(20):
                start = time.perf_counter()
                await list_all(modern)
                times.append((time.perf_counter() - start) * 1000)
            out["fleet_list_all_pages_2026_client_ms"] = statistics.median(times)
        out["fleet_upstream_requests_during_lists"] = (triad.log.read_text().count("fleet-request tools/list")
                                                       - lists_before)
        out["fleet_rss_mb"] = triad.memory("VmRSS")
        async with httpx2.AsyncClient(timeout=60, limits=httpx2.Limits(max_connections=50)) as http:
            idle = []
            for _ in range(20):  # 1,000 sessions, opened 50 at a time and kept open (idle)
                async with anyio.create_task_group() as tg:
                    for _ in range(50):
                        session = RawSession(http, url)
                        idle.append(session)
                        tg.start_soon(session.open)
            out["fleet_rss_1000_sessions_mb"] = triad.memory("VmRSS")

        port = free_port()
        direct = Process([PY, str(HERE / "echo_upstream.py"), "--http", str(port), "--extra-tools", "98"],
                         tmp / "direct100.log")
        started.append(direct)
        direct_url = f"http://127.0.0.1:{port}/mcp"
        await wait_listening(direct_url)
        async with httpx2.AsyncClient() as http:
            session = await RawSession(http, direct_url).open()
            times = []
            for _ in range(20):
                start = time.perf_counter()
                result = await session.request("tools/list")
                times.append((time.perf_counter() - start) * 1000)
            assert len(result["tools"]) == 100
            out["direct_list_100_tools_ms"] = statistics.median(times)
    return out


async def spawn_floor(count: int) -> float:
    """Seconds for this (small) process to start `count` fleet upstreams at once and have each answer `initialize`
    and `tools/list`: what starting the fleet costs the machine before any gateway work."""
    messages = b"".join(json.dumps(m).encode() + b"\n" for m in (
        {"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {"protocolVersion": "2025-11-25"}},
        {"jsonrpc": "2.0", "id": 2, "method": "tools/list"}))
    started = time.perf_counter()

    async def one() -> None:
        async with await anyio.open_process([PY, str(HERE / "fleet_upstream.py")], stderr=subprocess.DEVNULL) as proc:
            assert proc.stdin is not None and proc.stdout is not None
            await proc.stdin.send(messages)
            received = b""
            while received.count(b"\n") < 2:
                received += await proc.stdout.receive()
            await proc.stdin.aclose()

    async with anyio.create_task_group() as tg:
        for _ in range(count):
            tg.start_soon(one)
    return time.perf_counter() - started


async def list_all(session: RawSession) -> tuple[int, int]:
    tools, pages, cursor = 0, 0, None
    while True:
        page = await session.request("tools/list", {"cursor": cursor} if cursor else None)
        tools, pages = tools + len(page["tools"]), pages + 1
        if not (cursor := page.get("nextCursor")):
            return tools, pages


async def start_to_ready(proc: Process, url: str, count: int) -> float:
    """Seconds from the process's start until `count` upstreams are ready (polled on /readyz every 10 ms)."""
    readyz = url.replace("/mcp", "/readyz")
    async with httpx2.AsyncClient() as http:
        while True:
            try:
                body = (await http.get(readyz)).json()
                if sum(u["state"] == "ready" for u in body["upstreams"].values()) >= count:
                    break
            except httpx2.HTTPError:
                pass
            if proc.popen.poll() is not None:
                raise RuntimeError(f"triad exited: {proc.log.read_text()[-2000:]}")
            await anyio.sleep(0.01)
    return time.perf_counter() - proc.started

def table(rows: list[dict[str, Any]]) -> str:
    """Each row is compared with the direct row and the pipe row of its own protocol era."""
    bases = {r["era"]: r for r in rows if r["row"].startswith("direct")}
    pipes = {r["era"]: r for r in rows if r["row"].startswith("transparent")}
    head = ("| row | p50 ms | p99 ms | added p50 ms | slow p50 ms | calls/s 8 | calls/s 32 | CPU ms/call | peak RSS MB "
            "| SDK p50 ms |")
    lines = [head, "|" + "---|" * 10]
    for r in rows:
        added = r["p50_ms"] - bases[r["era"]]["p50_ms"]
        lines.append(f"| {r['row']} | {r['p50_ms']:.2f} | {r['p99_ms']:.2f} | {added:+.2f} | {r['slow_p50_ms']:.2f} "
                     f"| {r['rps_8']:.0f} | {r['rps_32']:.0f} | {r.get('cpu_ms_per_call', float('nan')):.2f} "
                     f"| {r.get('peak_rss_mb', float('nan')):.0f} | {r.get('sdk_p50_ms', float('nan')):.2f} |")
    if pipes:
        lines += ["", "Ratios to the transparent pipe (hop vs hop: added p50 and CPU per call; throughput at 32):", ""]
    for r in rows:
        base, pipe = bases[r["era"]], pipes.get(r["era"])
        if pipe is None or "cpu_ms_per_call" not in r or r is pipe:
            continue
        pipe_added = pipe["p50_ms"] - base["p50_ms"]
        pipe_slow_added = pipe["slow_p50_ms"] - base["slow_p50_ms"]
        lines.append(f"- {r['row']}: added p50 x{(r['p50_ms'] - base['p50_ms']) / pipe_added:.2f} (slow upstream "
                     f"x{(r['slow_p50_ms'] - base['slow_p50_ms']) / pipe_slow_added:.2f}), CPU/call "
                     f"x{r['cpu_ms_per_call'] / pipe['cpu_ms_per_call']:.2f}, calls/s at 32 "
                     f"x{r['rps_32'] / pipe['rps_32']:.2f}, p50 vs direct x{r['p50_ms'] / base['p50_ms']:.2f}")
    trees = [r for r in rows if "processes" in r]
    if trees:
        lines += ["", "Multi-process rows (CPU and peak RSS summed over the master and its workers; shared pages count "
                  "in each worker's RSS):", ""]
    for r in trees:
        lines.append(f"- {r['row']}: {r['processes']} processes, proportional set size (PSS) at the end "
                     f"{r['pss_mb']:.0f} MB")
    return "\n".join(lines)


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--calls", type=int, default=300, help="sequential calls per row (default 300)")
    parser.add_argument("--skip-peers", action="store_true", help="leave out mcp-proxy, FastMCP and ContextForge")
    parser.add_argument("--skip-contextforge", action="store_true",
                        help="leave out ContextForge (the slowest peer to start)")
    parser.add_argument("--skip-fleet", action="store_true")
    parser.add_argument("--out", type=Path, default=HERE / "results")
    args = parser.parse_args()
    started = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="triad-bench-") as tmp_name:
        tmp = Path(tmp_name)
        rows = await call_rows(tmp, args.calls, args.skip_peers, args.skip_contextforge)
        per_client = {**await per_client_rows(tmp), **await per_client_list_rows(tmp)}
        fleet = {} if args.skip_fleet else await fleet_rows(tmp)
    print(table(rows))
    print(f"\nsessions: per_client ({PER_CLIENT_SESSIONS} client sessions, one echo upstream):\n")
    for key, value in per_client.items():
        print(f"- {key}: {value:.2f}")
    if fleet:
        print("\nFleet (50 upstreams x 100 tools behind Triad):\n")
        for key, value in fleet.items():
            print(f"- {key}: {value:.3f}" if isinstance(value, float) else f"- {key}: {value}")
    args.out.mkdir(parents=True, exist_ok=True)
    stamp = time.strftime("%Y%m%dT%H%M%S")
    (args.out / f"bench-{stamp}.json").write_text(json.dumps({"rows": rows, "per_client": per_client,
                                                                "fleet": fleet}, indent=2))
    print(f"\n({time.perf_counter() - started:.0f}s; JSON in {args.out}/bench-{stamp}.json)")


if __name__ == "__main__":
    anyio.run(main)
