"""Approval in a cluster: a call waiting on one replica is listed in another replica's console and answered there
(the queue and the answers in Redis, sealed with the cluster key). Real redis-server, HAProxy and replicas
(`tests.cluster_env`); the approver uses the console over plain HTTP, as a browser's forms would. An answer written
into Redis without the cluster key is not taken."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import anyio
import httpx2
import pytest

from tests.cluster_env import TOKENS, TriadCluster, handshake_session
from tests.conftest import Proc
from tests.test_approval_console import answer, signed_in

pytestmark = pytest.mark.anyio


def console_of(cluster: TriadCluster, name: str) -> httpx2.Client:
    """An owner (ops) signed in to replica `name`'s console."""
    return signed_in(f"http://127.0.0.1:{cluster.ports[name]}", TOKENS["ops"])


async def test_another_replicas_console_answers_a_waiting_call(procs: list[Proc], tmp_path: Path) -> None:
    cluster = TriadCluster(procs, tmp_path, replicas=2)
    cluster.start_redis()
    cluster.start_upstream()
    cluster.write_config(console={"enabled": True},
                         approval={"rules": [{"tools": ["structured"], "ask": "console", "timeout": "60s"}]})
    for name in cluster.ports:
        cluster.start_replica(name)
    cluster.start_haproxy()
    for name in cluster.ports:
        cluster.wait_ready(name)
    http = console_of(cluster, "r2")
    results: list[Any] = []

    async def call(n: int) -> None:
        async with handshake_session(cluster.replica_url("r1"), "alice") as session:
            results.append(await session.call_tool("structured", {"n": n}))

    async with anyio.create_task_group() as tg:
        tg.start_soon(call, 5)
        await anyio.to_thread.run_sync(answer, http, "approve", "ok from r2", cluster.redis_port)
    async with anyio.create_task_group() as tg:
        tg.start_soon(call, 6)
        await anyio.to_thread.run_sync(answer, http, "deny", "not from r2")
    approved, denied = results
    assert approved.structured_content == {"double": 10}
    assert denied.is_error is True and "approver ops denied it: not from r2" in denied.content[0].text
    assert [line for line in cluster.ledger() if line.startswith("structured")] == ['structured {"n": 5}']
    audit = [r for r in cluster.served_by()["r1"] if r["decision"] == "approval"]
    assert [(r["outcome"], r.get("approved_by") or r.get("answered_by")) for r in audit] == [
        ("approved", "console:ops"), ("denied", "console:ops")]
    assert "No call is waiting" in http.get("/console/approvals").text
    http.close()
