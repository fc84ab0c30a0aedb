"""What scale-out costs and gives: the hop with `cluster:` on versus off on one replica, and calls/s through HAProxy
with one and with three replicas (deploy/haproxy.cfg.in). Loopback only; needs redis-server and haproxy.

    python bench/cluster.py [--calls N] [--out bench/results]

Rows (measured by bench/run.py's `measure`: sequential p50/p99, calls/s with 8 and 32 concurrent sessions, the
replica's CPU per call):
- one replica, no cluster / `cluster:` (Redis, nothing shared on the call path) / each with a `rate_limit` hook
  (in-process buckets versus a Redis script per call: the price of shared state per call);
- HAProxy in front of one replica, then of three (2026-07-28 clients spread per request; handshake sessions
  stick to the replica that opened them). On a 2-core machine three replicas compete for the same cores: the
  figure is a report, not a target.
"""

from __future__ import annotations

import argparse
import json
import shutil
import tempfile
import time
from pathlib import Path
from typing import Any

import anyio
from run import (
    HERE,
    PY,
    ROOT,
    Process,
    Target,
    free_port,
    measure,
    processes,
    start_to_ready,
    table,
    triad_config,
    wait_listening,
)

KEY = "bench-cluster-key-0123456789abcdef0123"


def need(binary: str) -> str:
    found = shutil.which(binary) or shutil.which(binary, path="/usr/sbin:/usr/bin")
    if found is None:
        raise SystemExit(f"bench/cluster.py: {binary} is missing (Debian's {binary}; `make system-tools`)")
    return found


def replica(tmp: Path, config: Path, name: str, port: int) -> Process:
    return Process([PY, "-m", "gateway.cli", "serve", "-c", str(config), "--port", str(port), "--log-level",
                    "WARNING"], tmp / f"replica-{name}-{port}.log", env={"TRIAD_REPLICA_ID": name,
                                                                         "TRIAD_CLUSTER_KEY": KEY})


def haproxy(tmp: Path, servers: dict[str, int]) -> tuple[Process, str]:
    front = free_port()
    lines = "".join(f"    server {name} 127.0.0.1:{port} check inter 500 fall 2 rise 1\n"
                    for name, port in servers.items())
    text = ((ROOT / "deploy" / "haproxy.cfg.in").read_text().replace("@FRONT_PORT@", str(front))
            .replace("@STATS_SOCKET@", str(tmp / f"haproxy-{front}.sock")).replace("@SERVERS@\n", lines))
    path = tmp / f"haproxy-{front}.cfg"
    path.write_text(text)
    return Process([need("haproxy"), "-f", str(path), "-db"], tmp / f"haproxy-{front}.log"), \
        f"http://127.0.0.1:{front}/mcp"


async def cluster_rows(tmp: Path, calls: int) -> list[dict[str, Any]]:
    with processes() as started:
        redis_port = free_port()
        started.append(Process([need("redis-server"), "--port", str(redis_port), "--bind", "127.0.0.1", "--save", "",
                                "--appendonly", "no", "--dir", str(tmp)], tmp / "redis.log"))
        up_port = free_port()
        started.append(Process([PY, str(HERE / "echo_upstream.py"), "--http", str(up_port)], tmp / "upstream.log"))
        upstream = {"echo": {"url": f"http://127.0.0.1:{up_port}/mcp", "sessions": "shared"}}
        await wait_listening(upstream["echo"]["url"])
        cluster = {"redis": f"redis://127.0.0.1:{redis_port}/0", "replica_id": "${TRIAD_REPLICA_ID}",
                   "secret_key": "${TRIAD_CLUSTER_KEY}"}
        limit = [{"rate_limit": {"per_client": "10000000/m"}}]
        variants = {
            "one replica, no cluster": {},
            "one replica, cluster: (Redis)": {"cluster": cluster},
            "one replica, rate_limit in-process": {"hooks": limit},
            "one replica, rate_limit in Redis": {"cluster": cluster, "hooks": limit},
        }
        direct = upstream["echo"]["url"]
        targets = [Target("direct (SDK upstream, HTTP)", direct, None),
                   Target("direct, 2026-07-28 client", direct, None, modern=True)]
        for i, (name, extra) in enumerate(variants.items()):
            proc = replica(tmp, triad_config(tmp, upstream, **extra), f"solo{i}", port := free_port())
            started.append(proc)
            url = f"http://127.0.0.1:{port}/mcp"
            await start_to_ready(proc, url, 1)
            targets += [Target(name, url, proc), Target(f"{name}, 2026-07-28 client", url, proc, modern=True)]
        rows = await measure(targets, calls)

        shared = triad_config(tmp, upstream, cluster=cluster)
        ports = {f"r{i}": free_port() for i in (1, 2, 3)}
        for name, port in ports.items():
            proc = replica(tmp, shared, name, port)
            started.append(proc)
            await start_to_ready(proc, f"http://127.0.0.1:{port}/mcp", 1)
        one, one_url = haproxy(tmp, {"r1": ports["r1"]})
        three, three_url = haproxy(tmp, ports)
        started += [one, three]
        for url in (one_url, three_url):
            await wait_listening(url)
        balanced = [Target("HAProxy -> 1 replica", one_url, None), Target("HAProxy -> 3 replicas", three_url, None),
                    Target("HAProxy -> 1 replica, 2026-07-28 client", one_url, None, modern=True),
                    Target("HAProxy -> 3 replicas, 2026-07-28 client", three_url, None, modern=True)]
        rows += await measure(balanced, calls)
        return rows


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--calls", type=int, default=300, help="sequential calls per row (default 300)")
    parser.add_argument("--out", type=Path, default=HERE / "results")
    args = parser.parse_args()
    started = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="triad-bench-cluster-") as tmp_name:
        rows = await cluster_rows(Path(tmp_name), args.calls)
    print(table(rows))
    args.out.mkdir(parents=True, exist_ok=True)
    stamp = time.strftime("%Y%m%dT%H%M%S")
    (args.out / f"cluster-{stamp}.json").write_text(json.dumps({"rows": rows}, indent=2))
    print(f"\n({time.perf_counter() - started:.0f}s; JSON in {args.out}/cluster-{stamp}.json)")


if __name__ == "__main__":
    anyio.run(main)
