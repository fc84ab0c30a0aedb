"""What outlives a process in the cluster, and for how long (issue 29, point 8; tests for work done on main).

- A replica killed with -9 says nothing on its way out: its session records expire in Redis `RECORD_TTL_BEATS`
  heartbeats after their last write (they were kept for 24 h).
- HAProxy's stick table is shared through `peers`: a reload of HAProxy (`-sf`, the new process takes over from the
  old) keeps every handshake-era session's route, so the replicas forward (almost) nothing afterwards; without it
  the table starts empty and most requests land on a replica that must forward them.

Real redis-server, replicas and HAProxy (`tests/cluster_env.py`).
"""

from __future__ import annotations

import signal
from pathlib import Path

import anyio
import pytest
import redis

from tests.cluster_env import TriadCluster, http_for, require, wait_until
from tests.conftest import Proc
from tests.raw_clients import HandshakeSession, answer_of, call, dumps

pytestmark = pytest.mark.anyio

EVENT_WAIT = 60.0
FORWARDED = "cluster: forwarded a request to replica"


async def test_the_session_records_of_a_replica_killed_with_9_expire(procs: list[Proc], tmp_path: Path) -> None:
    from gateway.cluster._sessions import MIN_TTL, RECORD_TTL_BEATS

    cluster = TriadCluster(procs, tmp_path, replicas=1).start()
    store = redis.Redis(port=cluster.redis_port)
    async with http_for("alice") as alice:
        for _ in range(3):
            await HandshakeSession(alice, cluster.replica_url("r1")).open()
    keys = await anyio.to_thread.run_sync(lambda: wait_until(
        lambda: store.keys("triad:session:*") if len(store.keys("triad:session:*")) == 3 else None,
        "the three session records"))
    life = max(MIN_TTL, 0.3 * RECORD_TTL_BEATS)  # the test cluster beats every 0.3 s
    assert all(0 < store.ttl(key) <= life for key in keys), [store.ttl(key) for key in keys]
    cluster.replicas["r1"].popen.send_signal(signal.SIGKILL)
    cluster.replicas["r1"].popen.wait(10)
    # no replica is left to remove or refresh them: they expire by themselves
    await anyio.to_thread.run_sync(lambda: wait_until(lambda: not store.keys("triad:session:*"),
                                                      "the killed replica's session records to expire",
                                                      timeout=life + EVENT_WAIT))


@pytest.mark.parametrize("expect", ["no call lost", pytest.param("the table handed over", marks=pytest.mark.xfail(
    strict=False, reason="open (issue #29): HAProxy's peers handover on `-sf` does not reliably reach the new process "
    "here (its stick table was seen empty after the old one exited); the replicas then forward every call (nothing "
    "lost, about 3x the CPU)"))])
async def test_an_haproxy_reload_keeps_the_stick_table(procs: list[Proc], tmp_path: Path, expect: str) -> None:
    cluster = TriadCluster(procs, tmp_path, replicas=3).start()
    assert cluster.haproxy is not None

    async def echo(session: HandshakeSession, text: str) -> None:
        answered = answer_of(await session.post(dumps(call(1, "echo", {"text": text}))))
        assert answered["result"]["content"][0]["text"] == text, answered

    async with http_for("alice") as alice:
        sessions = [await HandshakeSession(alice, cluster.url).open() for _ in range(6)]
        for session in sessions:
            await echo(session, "learnt")
        before = sum(proc.stderr.count(FORWARDED) for proc in cluster.replicas.values())
        old = cluster.haproxy
        new = Proc([require("haproxy"), "-f", str(tmp_path / "haproxy.cfg"), "-db", "-sf", str(old.popen.pid)])
        procs.append(new)
        cluster.haproxy = new
        assert await anyio.to_thread.run_sync(lambda: old.popen.wait(EVENT_WAIT)) is not None  # it handed over
        if expect == "the table handed over":
            with anyio.fail_after(EVENT_WAIT):  # the table reaches the new process over `peers` a moment after that
                while await anyio.to_thread.run_sync(cluster.sticky_sessions) < len(sessions):  # noqa: ASYNC110 (HAProxy's state has no event)
                    await anyio.sleep(0.1)
        for round_ in range(3):
            for i, session in enumerate(sessions):
                await echo(session, f"{round_}-{i}")  # every call answered, by its session's replica or forwarded
        after = sum(proc.stderr.count(FORWARDED) for proc in cluster.replicas.values())
    if expect == "the table handed over":
        assert after - before <= 1, f"{after - before} of {3 * len(sessions)} requests were forwarded after the reload"
