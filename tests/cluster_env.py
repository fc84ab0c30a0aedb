"""A Triad cluster for tests, on free loopback ports: a real redis-server, replicas of `triad serve` sharing one
config file, a real HAProxy in front (deploy/haproxy.cfg.in, the documented setting), and one upstream they all
share (tests/servers/ledger_upstream.py, which prints every call it executes). Everything is stopped by the
`procs` fixture at the end of the test.
"""

from __future__ import annotations

import contextlib
import json
import re
import shutil
import socket
import subprocess
import sys
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import httpx2
import pytest
import yaml
from mcp import Client, ClientSession
from mcp.client.streamable_http import streamable_http_client

from tests.conftest import DIRECT_PATH, PYTHON, ROOT, RUN_MARKER, TRIAD, Proc, marker

LEDGER = ROOT / "tests" / "servers" / "ledger_upstream.py"
TEMPLATE = ROOT / "deploy" / "haproxy.cfg.in"
SYNCED = ROOT / "deploy" / "haproxy_synced.py"
CLUSTER_KEY = "test-cluster-key-0123456789abcdef-0123456789"
TOKENS = {"alice": "alice-token", "bob": "bob-token", "ops": "ops-token"}


def require(binary: str) -> str:
    found = shutil.which(binary) or shutil.which(binary, path="/usr/sbin:/usr/bin")
    if found is None:
        pytest.fail(f"{binary} is required for the cluster tests: install Debian's {binary} (`make system-tools`)")
    return found


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


def wait_until(check: Any, what: str, timeout: float = 60) -> Any:
    deadline = time.monotonic() + timeout
    while True:
        try:
            if found := check():
                return found
        except (OSError, httpx2.HTTPError):
            pass
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.05)


def redis_ping(port: int) -> bool:
    with socket.create_connection(("127.0.0.1", port), timeout=1) as sock:
        sock.sendall(b"PING\r\n")
        return sock.recv(16).startswith(b"+PONG")


def haproxy_stats(path: Path, command: bytes) -> bytes:
    """HAProxy's answer to one command on its stats socket `path`."""
    with socket.socket(socket.AF_UNIX) as sock:
        sock.connect(str(path))
        sock.sendall(command + b"\n")
        data = b""
        while chunk := sock.recv(65536):
            data += chunk
    return data


class TriadCluster:
    def __init__(self, procs: list[Proc], tmp: Path, replicas: int = 3, hooks: list[Any] | None = None,
                 upstream: Path = LEDGER) -> None:
        self.procs = procs
        self.upstream_script = upstream
        self.tmp = tmp
        self.redis_port = free_port()
        self.front_port = free_port()
        self.ports = {f"r{i + 1}": free_port() for i in range(replicas)}
        self.replicas: dict[str, Proc] = {}
        self.redis: Proc | None = None
        self.haproxy: Proc | None = None
        self.upstream: Proc | None = None
        self.config_path = tmp / "cluster.yaml"
        self.hooks = hooks or []

    # -- parts ---------------------------------------------------------------------------------------------------

    def start_redis(self) -> None:
        self.redis = Proc([require("redis-server"), "--port", str(self.redis_port), "--bind", "127.0.0.1",
                           "--save", "", "--appendonly", "no", "--dir", str(self.tmp),
                           "--logfile", str(self.tmp / "redis.log")])
        self.procs.append(self.redis)
        wait_until(lambda: redis_ping(self.redis_port), "redis-server to answer")

    def start_upstream(self) -> None:
        self.upstream = Proc([PYTHON, str(self.upstream_script), "--transport", "http", "--name", marker("ledger")]
                             if self.upstream_script != LEDGER else [PYTHON, str(LEDGER), "--name", marker("ledger")])
        self.procs.append(self.upstream)

    def config(self, **extra: Any) -> dict[str, Any]:
        assert self.upstream is not None
        port = self.upstream.wait_for(r"READY (\d+)").group(1)
        url = f"http://127.0.0.1:{port}/mcp"
        return {
            "cluster": {"redis": f"redis://127.0.0.1:{self.redis_port}/0", "replica_id": "${TRIAD_REPLICA_ID}",
                        "secret_key": "${TRIAD_CLUSTER_KEY}", "heartbeat": "0.3s", "drain_delay": "0.6s"},
            "upstreams": {"fx": {"url": url, "protocol": "handshake", "ping_interval": "1h"}},
            "naming": {"prefix": "never"},
            **({} if DIRECT_PATH else {"listen": {"direct_path": False}}),
            "clients": {"alice": {"token": TOKENS["alice"]}, "bob": {"token": TOKENS["bob"]},
                        "ops": {"token": TOKENS["ops"], "owner": True}},
            "hooks": [{"audit": {"path": str(self.tmp / "audit-${TRIAD_REPLICA_ID}.jsonl")}}, *self.hooks],
            **extra,
        }

    def write_config(self, **extra: Any) -> None:
        self.config_path.write_text(yaml.safe_dump(self.config(**extra), sort_keys=False))

    def start_replica(self, name: str) -> Proc:
        proc = Proc([*TRIAD, "serve", "-c", str(self.config_path), "--port", str(self.ports[name]),
                     "--log-level", "DEBUG"],
                    env={"TRIAD_REPLICA_ID": name, "TRIAD_CLUSTER_KEY": CLUSTER_KEY, "TRIAD_TEST_MARK": RUN_MARKER})
        self.procs.append(proc)
        self.replicas[name] = proc
        return proc

    def start_haproxy(self) -> None:
        servers = "".join(f"    server {name} 127.0.0.1:{port} check inter 100 fall 2 rise 1\n"
                          for name, port in self.ports.items())
        text = (TEMPLATE.read_text().replace("@FRONT_PORT@", str(self.front_port))
                .replace("@STATS_SOCKET@", str(self.tmp / "haproxy.sock")).replace("@PEER_PORT@", str(free_port()))
                .replace("@SERVERS@\n", servers))
        path = self.tmp / "haproxy.cfg"
        path.write_text(text)
        self.haproxy = Proc([require("haproxy"), "-f", str(path), "-db"])
        self.procs.append(self.haproxy)

    def reload_haproxy(self) -> None:
        """`haproxy -sf` as the deployment does it (deploy/run-cluster.sh on SIGHUP): once the running process can
        hand its stick table over (`deploy/haproxy_synced.py`); returns when the old process has exited."""
        assert self.haproxy is not None
        synced = subprocess.run([sys.executable, str(SYNCED), str(self.tmp / "haproxy.sock"), "--wait", "60"],
                                capture_output=True, text=True, timeout=90, check=False)
        assert synced.returncode == 0, synced.stderr
        old = self.haproxy
        self.haproxy = Proc([require("haproxy"), "-f", str(self.tmp / "haproxy.cfg"), "-db", "-sf",
                             str(old.popen.pid)])
        self.procs.append(self.haproxy)
        old.popen.wait(60)

    def start(self) -> TriadCluster:
        require("redis-server")
        require("haproxy")
        self.start_redis()
        self.start_upstream()
        self.write_config()
        for name in self.ports:
            self.start_replica(name)
        self.start_haproxy()
        for name in self.ports:
            self.wait_ready(name)
        return self

    def wait_ready(self, name: str) -> None:
        proc = self.replicas[name]
        proc.wait_for(r"upstream fx ready")
        wait_until(lambda: name in self.cluster_view(name)["replicas"] and self.lb_state().get(name) == "UP",
                   f"replica {name} to be in the cluster and up in HAProxy")

    # -- views ---------------------------------------------------------------------------------------------------

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.front_port}/mcp"

    def replica_url(self, name: str) -> str:
        return f"http://127.0.0.1:{self.ports[name]}/mcp"

    def readyz(self, name: str) -> dict[str, Any]:
        answer = httpx2.get(f"http://127.0.0.1:{self.ports[name]}/readyz", timeout=5,
                            headers={"Authorization": f"Bearer {TOKENS['ops']}"})
        body: dict[str, Any] = answer.json()
        return body

    def cluster_view(self, name: str) -> dict[str, Any]:
        view: dict[str, Any] = self.readyz(name)["cluster"]
        return view

    def _stats(self, command: bytes) -> bytes:
        return haproxy_stats(self.tmp / "haproxy.sock", command)

    def lb_state(self) -> dict[str, str]:
        """Each replica's status in HAProxy's `triad` backend (from its stats socket)."""
        data = self._stats(b"show stat")
        rows = [line.split(",") for line in data.decode().splitlines() if line and not line.startswith("#")]
        return {row[1]: row[17] for row in rows if len(row) > 17 and row[0] == "triad" and row[1] in self.ports}

    def sticky_sessions(self) -> int:
        """Entries in HAProxy's stick table of the `triad` backend (from its stats socket; 0 while unreachable)."""
        try:
            data = self._stats(b"show table triad")
        except OSError:
            return 0
        found = re.search(rb"used:(\d+)", data)
        return int(found.group(1)) if found else 0

    def served_by(self) -> dict[str, list[dict[str, Any]]]:
        """Each replica's audit records (what it served)."""
        found = {}
        for name in self.ports:
            path = self.tmp / f"audit-{name}.jsonl"
            found[name] = [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []
        return found

    def ledger(self) -> list[str]:
        """Every call the upstream executed: `name arguments-JSON`."""
        assert self.upstream is not None
        return [line.split(" ", 1)[1].strip() for line in self.upstream.stderr.splitlines() if line.startswith("CALL ")]


def http_for(client: str, **extra: Any) -> httpx2.AsyncClient:
    return httpx2.AsyncClient(headers={"Authorization": f"Bearer {TOKENS[client]}"}, timeout=30, **extra)


@contextlib.asynccontextmanager
async def handshake_session(url: str, client: str, **callbacks: Any) -> AsyncIterator[ClientSession]:
    async with http_for(client) as http, streamable_http_client(url, http_client=http) as (read, write), \
            ClientSession(read, write, **callbacks) as session:
        await session.initialize()
        yield session


@contextlib.asynccontextmanager
async def modern_client(url: str, client: str, **callbacks: Any) -> AsyncIterator[Client]:
    async with http_for(client) as http, \
            Client(streamable_http_client(url, http_client=http), mode="2026-07-28", cache=None,
                   **callbacks) as modern:
        yield modern
