"""Approval in a cluster: a call waiting on one replica is listed in another replica's console and answered there
(the queue and the answers in Redis, sealed with the cluster key). Real redis-server, HAProxy and replicas
(`tests.cluster_env`); the approver uses the console over plain HTTP, as a browser's forms would. An answer written
into Redis without the cluster key is not taken."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import anyio
import httpx2
import pytest
import redis

from tests.cluster_env import TOKENS, TriadCluster, handshake_session, wait_until
from tests.conftest import Proc

pytestmark = pytest.mark.anyio


def console_of(cluster: TriadCluster, name: str) -> tuple[httpx2.Client, str]:
    """An owner (ops) signed in to replica `name`'s console: the HTTP client (with its cookie) and its base."""
    base = f"http://127.0.0.1:{cluster.ports[name]}"
    http = httpx2.Client(base_url=base, headers={"Origin": base}, timeout=10)
    signed = http.post("/console/login", data={"token": TOKENS["ops"]})
    assert signed.status_code == 303, signed.text
    return http, base


def answer(http: httpx2.Client, decision: str, reason: str, forge_in: int | None = None) -> None:
    """Answer the call waiting in `http`'s console; with `forge_in` (Redis's port), first write an approval into
    Redis as someone without the cluster key would, and see the waiting replica read it and not take it."""
    def waiting() -> str | None:
        text = http.get("/console/approvals").text
        return text if 'name="id"' in text else None

    page = wait_until(waiting, "the waiting call in the other replica's console")
    assert "structured" in page and "alice" in page
    found = re.search(r'name="id" value="([^"]+)"', page)
    csrf = re.search(r'name="csrf" value="([^"]+)"', page)
    assert found is not None and csrf is not None
    if forge_in is not None:
        forged = redis.Redis(port=forge_in)
        key = f"triad:approval-answer:{found.group(1)}"
        forged.rpush(key, json.dumps({"v": 1, "kid": "x", "body": '{"approved":true,"by":"ops","reason":""}',
                                      "mac": "0" * 64}))
        wait_until(lambda: forged.llen(key) == 0, "the waiting replica to read the forged answer")
        assert found.group(1) in http.get("/console/approvals").text  # not taken: the call still waits
        forged.close()
    done = http.post("/console/approvals/answer", data={"id": found.group(1), "decision": decision,
                                                        "reason": reason, "csrf": csrf.group(1)})
    assert done.status_code == 303, done.text
    # the call is claimed: answering it again (from any replica) is refused
    again = http.post("/console/approvals/answer", data={"id": found.group(1), "decision": "approve",
                                                         "reason": "", "csrf": csrf.group(1)})
    assert again.status_code == 403 and "not waiting any more" in again.text


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
    http, _ = console_of(cluster, "r2")
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
