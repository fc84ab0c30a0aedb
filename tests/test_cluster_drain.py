"""A replica that is stopping (SIGTERM) keeps its handshake-era sessions until it exits (issue 29, point 7).

Before, a stopping replica deleted its heartbeat at once: the load balancer took it out of rotation, the session's
requests landed on another replica, and that one no longer forwarded them (the owner was not in its view) although
the owner still served them: the client got 404 for the whole drain. An idle GET stream held the exit for the whole
graceful shutdown (21-25 s), then was cut with ERROR tracebacks. Now the draining replica keeps beating, marked
draining, until its socket closes, and its GET streams end cleanly at the start of the drain.

Real replicas behind a real HAProxy and Redis (`tests/cluster_env.py`); the client is the SDK's, which holds a GET
stream open on its session.
"""

from __future__ import annotations

import signal
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import anyio
import pytest
import yaml

from tests.cluster_env import TriadCluster, handshake_session, wait_until
from tests.conftest import Proc

pytestmark = pytest.mark.anyio

EVENT_WAIT = 60.0
DRAIN_DELAY = 5.0
"""Long enough for the calls this test makes while the replica drains (the machine is shared and slow)."""
CALLS_WHILE_DRAINING = 5


@pytest.fixture
def cluster(procs: list[Proc], tmp_path: Path) -> Iterator[TriadCluster]:
    env = TriadCluster(procs, tmp_path, replicas=2)
    env.start_redis()
    env.start_upstream()
    settings: dict[str, Any] = env.config()
    settings["cluster"]["drain_delay"] = f"{DRAIN_DELAY}s"
    settings.setdefault("listen", {})["shutdown_grace"] = "2s"
    env.config_path.write_text(yaml.safe_dump(settings, sort_keys=False))
    for name in env.ports:
        env.start_replica(name)
    env.start_haproxy()
    for name in env.ports:
        env.wait_ready(name)
    yield env


def served(cluster: TriadCluster, name: str) -> int:
    return sum(1 for record in cluster.served_by()[name] if record["client"] == "alice")


async def test_a_draining_replica_keeps_its_sessions_until_it_exits(cluster: TriadCluster) -> None:
    async with handshake_session(cluster.url, "alice") as session:
        assert (await session.call_tool("echo", {"text": "before"})).content[0].text == "before"
        # the replica HAProxy chose for the session (its audit record may be written just after the answer)
        victim = await anyio.to_thread.run_sync(lambda: wait_until(
            lambda: next((name for name in cluster.ports if served(cluster, name)), None), "the call's audit record"))
        [other] = [name for name in cluster.ports if name != victim]
        cluster.replicas[victim].popen.send_signal(signal.SIGTERM)
        # out of HAProxy's rotation: the session's requests now land on the other replica
        await anyio.to_thread.run_sync(lambda: wait_until(lambda: cluster.lb_state().get(victim) != "UP",
                                                          f"HAProxy to take {victim} out"))
        # the other replica has read the victim's heartbeat since (it shows it draining; it was gone before)
        await anyio.to_thread.run_sync(lambda: wait_until(
            lambda: cluster.cluster_view(other)["replicas"].get(victim, {}).get("draining", True),
            f"{other} to read {victim}'s state", timeout=DRAIN_DELAY))
        before = served(cluster, victim)
        with anyio.fail_after(EVENT_WAIT):
            for i in range(CALLS_WHILE_DRAINING):
                assert (await session.call_tool("echo", {"text": f"d{i}"})).content[0].text == f"d{i}"
        assert cluster.replicas[victim].popen.poll() is None, "the calls were made while it drained"
        assert cluster.cluster_view(other)["replicas"][victim]["draining"]
        await anyio.to_thread.run_sync(lambda: wait_until(  # each served by the session's own replica
            lambda: served(cluster, victim) == before + CALLS_WHILE_DRAINING, "the calls' audit records"))
        assert "forwarded a request to replica" in cluster.replicas[other].stderr
        code = await anyio.to_thread.run_sync(lambda: cluster.replicas[victim].popen.wait(EVENT_WAIT))
    log = cluster.replicas[victim].stderr
    # its idle GET stream ended at the start of the drain: nothing held the exit until uvicorn cut it
    assert "timeout graceful shutdown exceeded" not in log and "Traceback" not in log, log[-3000:]
    assert code == 0, log[-2000:]
    # gone from the others' view once it exited
    await anyio.to_thread.run_sync(lambda: wait_until(
        lambda: victim not in cluster.cluster_view(other)["replicas"], f"{victim} gone from {other}'s view"))
