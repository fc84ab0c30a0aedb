"""The worked deployment (`deploy/run-cluster.sh`): it starts every replica or none, and its Redis persists."""

from __future__ import annotations

import os
import re
import signal
import socket
import subprocess
from pathlib import Path

import redis

from tests.cluster_env import free_port, haproxy_stats, redis_ping, require, wait_until
from tests.conftest import ROOT, Proc


def test_run_cluster_fails_when_a_replica_cannot_bind() -> None:
    """One replica's port is taken: the script exits non-zero naming that replica, instead of going on with two
    of three and printing its banner (and stops what it started)."""
    require("redis-server")
    require("haproxy")
    front = free_port()
    while any(not _free(front + i) for i in (1, 2, 3, 10)):
        front = free_port()
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", front + 2))
        taken.listen(1)
        done = subprocess.run(["sh", str(ROOT / "deploy" / "run-cluster.sh")], capture_output=True, text=True,
                              timeout=120, cwd=ROOT, env={**os.environ, "TRIAD_FRONT_PORT": str(front),
                                                          "TRIAD_REDIS_PORT": str(free_port()),
                                                          "TRIAD_PEER_PORT": str(free_port())})
    assert done.returncode != 0, done.stdout + done.stderr
    assert "replica r2 exited at start" in done.stderr and "cannot listen on" in done.stderr, done.stderr
    assert "triad cluster: http://" not in done.stdout


def test_run_cluster_keeps_redis_data_and_the_stick_table_across_restarts(procs: list[Proc], tmp_path: Path) -> None:
    """The deployment runs Redis with AOF persistence in TRIAD_DATA_DIR, which outlives the script (it was a
    temporary directory removed on exit, so the persistence the README promises was lost with every stop): a key
    written while it runs is read back by a Redis started anew on that directory. And SIGHUP reloads HAProxy
    without losing its stick table, even when sent during HAProxy's first sync (right after the banner), when a
    bare `haproxy -sf` hands over nothing."""
    require("redis-server")
    require("haproxy")
    front = free_port()
    while any(not _free(front + i) for i in (1, 2, 3, 10)):
        front = free_port()
    redis_port, data, banner = free_port(), tmp_path / "data", tmp_path / "stdout"
    with banner.open("wb") as stdout:
        script = subprocess.Popen(["sh", str(ROOT / "deploy" / "run-cluster.sh")], cwd=ROOT, stdout=stdout,
                                  stderr=subprocess.DEVNULL,
                                  env={**os.environ, "TRIAD_FRONT_PORT": str(front),
                                       "TRIAD_REDIS_PORT": str(redis_port), "TRIAD_PEER_PORT": str(free_port()),
                                       "TRIAD_DATA_DIR": str(data)})
    try:
        wait_until(lambda: "triad cluster: http://" in banner.read_text(), "the deployment's banner", timeout=120)
        found = re.search(r"logs in (\S+);", banner.read_text())
        assert found is not None, banner.read_text()
        stats = Path(found.group(1)) / "haproxy.sock"
        wait_until(stats.exists, "HAProxy's stats socket")
        for i in range(10):
            haproxy_stats(stats, f"set table triad key session-{i}".encode())
        script.send_signal(signal.SIGHUP)
        wait_until(lambda: "HAProxy reloaded" in banner.read_text(), "the reload", timeout=60)
        wait_until(lambda: b"used:10" in haproxy_stats(stats, b"show table triad"), "the table in the new HAProxy")
        client = redis.Redis(port=redis_port)
        client.set("triad-test:durable", b"kept")
        client.execute_command("BGREWRITEAOF")  # flushed now rather than within `appendfsync everysec`
        wait_until(lambda: client.info("persistence")["aof_rewrite_in_progress"] == 0, "the AOF rewrite")
        client.close()
    finally:
        script.send_signal(signal.SIGTERM)  # the script stops what it started (its own trap)
        script.wait(60)
    assert (data / "redis").is_dir() and any((data / "redis").iterdir()), "the AOF is where the deployment says"
    again = Proc([require("redis-server"), "--port", str(redis_port), "--bind", "127.0.0.1", "--save", "",
                  "--appendonly", "yes", "--dir", str(data / "redis")])
    procs.append(again)
    wait_until(lambda: redis_ping(redis_port), "redis-server to answer")
    assert redis.Redis(port=redis_port).get("triad-test:durable") == b"kept"


def _free(port: int) -> bool:
    with socket.socket() as sock:
        try:
            sock.bind(("127.0.0.1", port))
        except OSError:
            return False
        return True
