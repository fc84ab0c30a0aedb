"""Random garbage written into a cluster's Redis under load, and what the clients' calls went through
(sent/ok/lost/duplicated/wrong, `storm_calls.py`).

    python bench/redis_garbage.py [--seconds 60] [--clients 4]

Redis, three replicas (`cluster:`, one shared HTTP upstream that logs every call it executes) and HAProxy
(deploy/haproxy.cfg.in). While clients of both eras call through HAProxy, a writer puts random values under Triad's
keys (heartbeats, the members set, session records, among them those of live sessions, pins, secrets, rate-limit
buckets, the cluster-key probe) and under random keys, as strings of random bytes and sizes, JSON that looks like a
record, envelopes with a wrong MAC, and lists, hashes and sets; it publishes junk on the event channel and deletes
keys. The run also counts `/readyz` answers of 500 and replicas that exited.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

import anyio
import httpx2
import redis
import yaml
from cluster import need
from run import PY, ROOT, Process, free_port, processes
from storm_calls import LEDGER, Tally, handshake_worker, modern_worker, report, wait_in_log

KEY = "bench-garbage-cluster-key-0123456789abcdef"
TOKEN, OPS = "garbage-client-token", "garbage-ops-token"
KEYS = ("triad:replicas", "triad:replica:r1", "triad:replica:r2", "triad:replica:r3", "triad:replica:r9",
        "triad:events", "triad:cluster-key", "triad:pins:triad-pins.json")


def junk_value(rng: random.Random) -> bytes:
    kind = rng.randrange(6)
    if kind == 0:
        return os.urandom(rng.choice((0, 1, 17, 300, 70_000, 400_000)))
    if kind == 1:
        return json.dumps({"v": 1, "kid": "0" * 12, "body": json.dumps({"replica": "r9", "address":
                           "http://127.0.0.1:9", "started": 0, "beat": time.time()}), "mac": "0" * 64}).encode()
    if kind == 2:
        return json.dumps([1, {"a": None}, "x" * rng.randrange(100)]).encode()
    if kind == 3:
        return b'{"v": 1, "kid": ' + b"[" * rng.randrange(1, 5000)
    if kind == 4:
        return str(rng.randrange(-10**30, 10**30)).encode()
    return b"\xff\xfe" + os.urandom(16)


class Garbage:
    def __init__(self, port: int, seed: int) -> None:
        self.redis = redis.Redis(port=port)
        self.rng = random.Random(seed)
        self.writes = 0
        self.stop = threading.Event()

    def key(self) -> str:
        rng = self.rng
        choice = rng.randrange(5)
        if choice == 0:
            return rng.choice(KEYS)
        if choice == 1:  # a live record: a session's, a bucket's, a secret's
            found = self.redis.keys(rng.choice(("triad:session:*", "triad:bucket:*", "triad:secret:*",
                                                "triad:replica:*")))
            if found:
                return str(rng.choice(found).decode())
        if choice == 2:
            return f"triad:session:{os.urandom(20).hex()}"
        return f"triad:{os.urandom(4).hex()}"

    def once(self) -> None:
        key, value, rng, client = self.key(), junk_value(self.rng), self.rng, self.redis
        kind = rng.randrange(8)
        if key == "triad:events" or kind == 0:
            client.publish("triad:events", value)
        elif kind == 1:
            client.delete(key)
        elif kind == 2:
            client.delete(key)
            client.rpush(key, value, b"x")
        elif kind == 3:
            client.delete(key)
            client.hset(key, "f", value)
        elif kind == 4:
            client.sadd(key if rng.random() < 0.5 else "triad:replicas", value[:64] or b"r9", b"r9")
        else:
            client.set(key, value)
        self.writes += 1

    def run(self) -> None:
        while not self.stop.is_set():
            try:
                self.once()
            except redis.ResponseError:  # e.g. SADD on a key that is a string: Redis said no
                self.writes += 1
            time.sleep(0.002)


async def garbage_run(tmp: Path, seconds: float, clients: int) -> dict[str, Any]:
    with processes() as started:
        redis_port = free_port()
        started.append(Process([need("redis-server"), "--port", str(redis_port), "--bind", "127.0.0.1", "--save", "",
                                "--appendonly", "no", "--dir", str(tmp)], tmp / "redis.log"))
        ledger_log = tmp / "ledger.log"
        started.append(Process([PY, str(LEDGER), "--name", "garbage-ledger"], ledger_log))
        port = (await anyio.to_thread.run_sync(wait_in_log, ledger_log, r"READY (\d+)")).group(1)
        config = tmp / "cluster.yaml"
        config.write_text(yaml.safe_dump({
            "cluster": {"redis": f"redis://127.0.0.1:{redis_port}/0", "replica_id": "${TRIAD_REPLICA_ID}",
                        "secret_key": "${TRIAD_CLUSTER_KEY}", "heartbeat": "0.5s", "drain_delay": "1s"},
            "upstreams": {"ledger": {"url": f"http://127.0.0.1:{port}/mcp", "protocol": "handshake",
                                     "ping_interval": "1h"}},
            "naming": {"prefix": "never"},
            "clients": {"garbage": {"token": TOKEN}, "ops": {"token": OPS, "owner": True}},
            "hooks": [{"rate_limit": {"per_client": "1000000/m"}}]}))
        ports = {f"r{i}": free_port() for i in (1, 2, 3)}
        replicas = {}
        for name, replica_port in ports.items():
            replicas[name] = Process([PY, "-m", "gateway.cli", "serve", "-c", str(config), "--port",
                                      str(replica_port), "--log-level", "INFO"], tmp / f"{name}.log",
                                     env={"TRIAD_REPLICA_ID": name, "TRIAD_CLUSTER_KEY": KEY})
            started.append(replicas[name])
        for name in ports:
            await anyio.to_thread.run_sync(wait_in_log, tmp / f"{name}.log", r"upstream ledger ready")
        front = free_port()
        servers = "".join(f"    server {name} 127.0.0.1:{replica_port} check inter 200 fall 2 rise 1\n"
                          for name, replica_port in ports.items())
        template = (ROOT / "deploy" / "haproxy.cfg.in").read_text()
        (tmp / "haproxy.cfg").write_text(template.replace("@FRONT_PORT@", str(front))
                                         .replace("@PEER_PORT@", str(free_port()))
                                         .replace("@STATS_SOCKET@", str(tmp / "haproxy.sock"))
                                         .replace("@SERVERS@\n", servers))
        started.append(Process([need("haproxy"), "-f", str(tmp / "haproxy.cfg"), "-db"], tmp / "haproxy.log"))
        await anyio.sleep(2)  # HAProxy's first health checks (rise 1, every 200 ms)
        url = f"http://127.0.0.1:{front}/mcp"
        tally, stop, statuses = Tally(), anyio.Event(), {"readyz": 0, "readyz 500": 0}
        garbage = Garbage(redis_port, seed=29)

        async def readiness() -> None:
            async with httpx2.AsyncClient(timeout=10) as http:
                while not stop.is_set():
                    for replica_port in ports.values():
                        try:
                            answer = await http.get(f"http://127.0.0.1:{replica_port}/readyz")
                        except httpx2.TransportError:
                            continue
                        statuses["readyz"] += 1
                        statuses["readyz 500"] += answer.status_code == 500
                    await anyio.sleep(0.1)

        async with anyio.create_task_group() as tg:
            for n in range(clients):
                tg.start_soon(handshake_worker if n % 2 == 0 else modern_worker, url, TOKEN, f"g{n}", tally, stop)
            tg.start_soon(readiness)
            writer = threading.Thread(target=garbage.run, daemon=True)
            writer.start()
            await anyio.sleep(seconds)
            garbage.stop.set()
            await anyio.to_thread.run_sync(writer.join)
            stop.set()
        logs = {name: (tmp / f"{name}.log").read_text() for name in ports}
        return {"counts": tally.counts(ledger_log), "seconds": seconds, "garbage writes": garbage.writes,
                **statuses, "replicas alive": sum(proc.popen.poll() is None for proc in replicas.values()),
                "tracebacks": sum(log.count("Traceback") for log in logs.values()),
                "skipped-record warnings": sum(log.count("skipped a ") for log in logs.values())}


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--seconds", type=float, default=60)
    parser.add_argument("--clients", type=int, default=4)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="triad-redis-garbage-") as tmp:
        result = await garbage_run(Path(tmp), args.seconds, args.clients)
    counts = result.pop("counts")
    print(report("redis garbage", counts, result))
    sys.exit(0 if counts["lost"] == counts["duplicated"] == counts["wrong"] == 0 else 1)


if __name__ == "__main__":
    anyio.run(main)
