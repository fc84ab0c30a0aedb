"""Redis is a store, not a trusted peer: whatever anyone with access to Redis writes there, every replica keeps
serving, `/readyz` never answers 500, a forged heartbeat never receives a forwarded request (with its token and
session id), a forged event changes nothing, and a replica with another cluster key refuses to join.

Real redis-server, real replicas and HAProxy (`tests/cluster_env.py`); the hostile values are generated as the
product of every kind of key Triad reads and every kind of bad value (`HOSTILE_VALUES`).
"""

from __future__ import annotations

import json
import random
import socket
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import anyio
import httpx2
import pytest
import redis

from tests.cluster_env import CLUSTER_KEY, TriadCluster, free_port, http_for, modern_client
from tests.conftest import TRIAD, Proc
from tests.raw_clients import HandshakeSession, dumps

pytestmark = pytest.mark.anyio

EVENT_WAIT = 60.0
"""A generous bound on waiting for something that should take well under a second (the machine is shared)."""
OTHER_KEY = "another-cluster-key-0123456789abcdef-0123"


class Capture:
    """A loopback listener standing in for an attacker's address: counts the connections it gets."""

    def __init__(self) -> None:
        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(64)
        self.address = f"http://127.0.0.1:{self.sock.getsockname()[1]}"
        self.connections = 0
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while True:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            self.connections += 1
            conn.close()

    def close(self) -> None:
        self.sock.close()


def forged_envelope(body: dict[str, Any], kid: str = "000000000000") -> str:
    """A record in Triad's envelope shape, with a MAC made without the cluster key."""
    return json.dumps({"v": 1, "kid": kid, "body": json.dumps(body), "mac": "0" * 64})


def hostile_values(capture: str, replica: str) -> list[tuple[str, Any]]:
    """Every kind of bad value: (kind, value); a value that is a tuple is a Redis type other than a string."""
    heartbeat = {"address": capture, "started": time.time(), "beat": time.time(), "sessions": 0}
    return [
        ("junk", b"\x00\xffnot json at all"),
        ("empty", b""),
        ("json list", json.dumps([1, 2, 3])),
        ("json number", "12"),
        ("json wrong types", json.dumps({"address": 5, "beat": "yesterday", "replica": ["r1"]})),
        ("unsigned heartbeat", json.dumps(heartbeat)),
        ("unsigned session", json.dumps({"replica": replica, "owner": "0" * 32})),
        ("forged MAC", forged_envelope({"replica": replica, **heartbeat})),
        ("forged MAC with our key id", "KID"),  # filled in with the replicas' key id by the writer
        ("huge", b"x" * (2 * 1024 * 1024)),
        ("redis list", ("list",)),
        ("redis hash", ("hash",)),
        ("redis set", ("set",)),
        ("redis zset", ("zset",)),
    ]


class Hostile:
    """Writes hostile values into Redis under every key kind Triad reads."""

    def __init__(self, cluster: TriadCluster, capture: Capture, session_key: str, key_id: str) -> None:
        self.client = redis.Redis(port=cluster.redis_port)
        self.capture = capture
        self.session_key = session_key
        self.key_id = key_id
        self.written = 0

    def keys(self) -> list[tuple[str, str]]:
        """(kind, Redis key): every key kind Triad reads, the live replicas' and the live session's included."""
        return [("heartbeat", f"triad:replica:{name}") for name in ("r1", "r2", "r3", "r9")] + [
            ("members", "triad:replicas"), ("session", self.session_key), ("probe", "triad:cluster-key"),
            ("pins", "triad:pins:pins"), ("secret", "triad:secret:0:0"), ("other", "triad:whatever"),
            ("event", "triad:events")]

    def write(self, kind: str, key: str, value: Any) -> None:
        if value == "KID":
            value = forged_envelope({"replica": "r1", "address": self.capture.address, "started": 1.0,
                                     "beat": time.time()}, self.key_id)
        if kind == "event":
            if not isinstance(value, tuple):
                self.client.publish(key, value)
                self.client.publish(key, json.dumps({"from": "r9", "kind": "reload"}))
            return
        if kind == "members":
            if self.client.type(key) not in (b"set", b"none"):
                self.client.delete(key)
            self.client.sadd(key, "r9", value if not isinstance(value, tuple) else "r8")
            self.client.set("triad:replica:r9", value if not isinstance(value, tuple) else b"{")
            return
        if kind == "pins":
            if isinstance(value, tuple):
                self.client.delete(key)
                self.client.rpush(key, "x")
            else:
                if self.client.type(key) not in (b"hash", b"none"):
                    self.client.delete(key)
                self.client.hset(key, "fx:echo", value)
            return
        if isinstance(value, tuple):  # in one transaction: a replica may write the key between two commands
            pipe = self.client.pipeline(transaction=True)
            pipe.delete(key)
            {"list": lambda: pipe.rpush(key, "a", "b"), "hash": lambda: pipe.hset(key, "a", "b"),
             "set": lambda: pipe.sadd(key, "a"), "zset": lambda: pipe.zadd(key, {"a": 1.0})}[value[0]]()
            pipe.execute()
        else:
            self.client.set(key, value)
        self.written += 1

    def run_all(self, rounds: int) -> None:
        table = [(kind, key, value) for kind, key in self.keys()
                 for _name, value in hostile_values(self.capture.address, "r1")]
        for _ in range(rounds):
            random.shuffle(table)
            for kind, key, value in table:
                self.write(kind, key, value)


async def eventually(check: Callable[[], bool]) -> None:
    """Until `check()` holds (the caller bounds the wait)."""
    while True:
        if check():
            return
        await anyio.sleep(0.05)


@pytest.fixture
def capture() -> Iterator[Capture]:
    listener = Capture()
    yield listener
    listener.close()


def key_id() -> str:
    from gateway.cluster._records import Records

    return Records(CLUSTER_KEY).key_id


async def test_every_replica_keeps_serving_whatever_is_written_into_redis(procs: list[Proc], tmp_path: Path,
                                                                         capture: Capture) -> None:
    """Hostile values under every key kind, written again and again while clients call through HAProxy and a
    session of r1 is used through r2 (forwarded): no call fails, no replica exits, `/readyz` is never a 500,
    nothing reaches the forged address, no forged event makes a replica reload, and a replica restarted meanwhile
    joins and serves."""
    cluster = TriadCluster(procs, tmp_path, replicas=3).start()
    failures: list[str] = []
    statuses: set[int] = set()
    done = {"calls": 0, "forwarded": 0}
    stop = anyio.Event()

    async with http_for("alice") as alice:
        owned = await HandshakeSession(alice, cluster.replica_url("r1")).open()
        listing = dumps({"jsonrpc": "2.0", "id": 1, "method": "tools/list"})
        assert (await owned.post(listing)).status_code == 200
        from gateway.cluster._sessions import session_key

        hostile = Hostile(cluster, capture, session_key(owned.headers["Mcp-Session-Id"]), key_id())
        reloads = {name: cluster.readyz(name)["reload"]["reloads"] for name in cluster.ports}

        async def caller(worker: int) -> None:
            async with modern_client(cluster.url, "bob") as modern:
                i = 0
                while not stop.is_set():
                    try:
                        result = await modern.call_tool("echo", {"text": f"w{worker}-{i}"})
                        assert not result.is_error and result.content[0].text == f"w{worker}-{i}"
                        done["calls"] += 1
                    except Exception as exc:
                        failures.append(f"{type(exc).__name__}: {exc}")
                    i += 1

        async def forwarded() -> None:
            while not stop.is_set():
                answered = await alice.post(cluster.replica_url("r2"), content=listing, headers=owned.headers)
                statuses.add(answered.status_code)
                done["forwarded"] += 1

        async def ready() -> None:
            async with httpx2.AsyncClient(timeout=10) as http:
                while not stop.is_set():
                    for port in cluster.ports.values():
                        try:
                            answered = await http.get(f"http://127.0.0.1:{port}/readyz")
                        except httpx2.TransportError:
                            continue  # the replica being restarted
                        statuses.add(answered.status_code)
                    await anyio.sleep(0.02)

        async with anyio.create_task_group() as tg:
            for worker in range(3):
                tg.start_soon(caller, worker)
            tg.start_soon(forwarded)
            tg.start_soon(ready)
            with anyio.fail_after(EVENT_WAIT):
                await eventually(lambda: done["calls"] >= 10)
            await anyio.to_thread.run_sync(hostile.run_all, 3)
            # a replica restarted while Redis holds junk joins again
            await anyio.to_thread.run_sync(cluster.replicas["r3"].terminate)
            cluster.start_replica("r3")
            await anyio.to_thread.run_sync(cluster.wait_ready, "r3")
            await anyio.to_thread.run_sync(hostile.run_all, 2)
            mark = done["calls"]
            with anyio.fail_after(EVENT_WAIT):
                await eventually(lambda: done["calls"] >= mark + 20 and done["forwarded"] >= 20)
            stop.set()
    assert failures == [], failures[:5]
    assert 500 not in statuses, statuses
    assert capture.connections == 0
    assert all(proc.popen.poll() is None for proc in cluster.replicas.values())
    assert all(cluster.readyz(name)["reload"]["reloads"] == reloads[name] for name in ("r1", "r2"))
    for name, proc in cluster.replicas.items():
        assert "Traceback" not in proc.stderr, (name, proc.stderr[-3000:])
        assert "skipped a" in proc.stderr  # reported (rate-limited), not silently ignored
    assert any(proc.stderr.count("skipped a heartbeat record") <= 30 for proc in cluster.replicas.values())


def test_a_replica_with_another_cluster_key_refuses_to_join(procs: list[Proc], tmp_path: Path) -> None:
    """A replica started with another `cluster.secret_key` exits 1 with one ERROR line saying so; the cluster's
    replicas are not affected and their view never shows it."""
    cluster = TriadCluster(procs, tmp_path, replicas=1).start()
    intruder = Proc([*TRIAD, "serve", "-c", str(cluster.config_path), "--port", str(free_port())],
                    env={"TRIAD_REPLICA_ID": "r4", "TRIAD_CLUSTER_KEY": OTHER_KEY})
    procs.append(intruder)
    assert intruder.popen.wait(60) == 1
    assert "sealed with another cluster key" in intruder.stderr and "Traceback" not in intruder.stderr
    assert OTHER_KEY not in intruder.stderr and CLUSTER_KEY not in intruder.stderr
    assert set(cluster.cluster_view("r1")["replicas"]) == {"r1"}

