"""The worked deployment (`deploy/run-cluster.sh`): it starts every replica or none."""

from __future__ import annotations

import os
import socket
import subprocess

from tests.cluster_env import free_port, require
from tests.conftest import ROOT


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


def _free(port: int) -> bool:
    with socket.socket() as sock:
        try:
            sock.bind(("127.0.0.1", port))
        except OSError:
            return False
        return True
