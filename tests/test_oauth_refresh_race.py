"""One refresh in flight per upstream credential, across the replicas of a cluster: callers that find the token
due while a refresh is under way wait for it and use the token it got, so a rotated refresh token is never sent
twice (oidc-provider, as `tests/test_oauth_upstream.py` runs it, rotates refresh tokens and refuses a reused one
with `invalid_grant`, revoking the grant). With `cluster:` the lock is in Redis."""

from __future__ import annotations

import json
import time
from pathlib import Path

import anyio
import pytest

from tests.cluster_env import CLUSTER_KEY, TOKENS, TriadCluster
from tests.conftest import Proc
from tests.test_oauth_upstream import Protected, whoami

pytestmark = pytest.mark.anyio


@pytest.mark.parametrize("callers", [(3, 0), (3, 3)])
async def test_concurrent_callers_of_a_due_token_share_one_refresh_across_replicas(
        procs: list[Proc], tmp_path: Path, monkeypatch: pytest.MonkeyPatch, callers: tuple[int, int]) -> None:
    """alice's token (kept in Redis) is due; `callers` of hers call at once through replica r1 and r2: the
    authorization server sees one refresh and no reuse, and every call goes out as alice."""
    from gateway.cluster import Cluster
    from gateway.cluster._vault_tokens import VaultTokens
    from gateway.config._models import ClusterConfig

    env = TriadCluster(procs, tmp_path, replicas=2)
    env.start_redis()
    monkeypatch.setenv("TRIAD_CLUSTER_KEY", CLUSTER_KEY)
    monkeypatch.setenv("TRIAD_REPLICA_ID", "login")
    cluster = {"redis": f"redis://127.0.0.1:{env.redis_port}/0", "replica_id": "${TRIAD_REPLICA_ID}",
               "secret_key": "${TRIAD_CLUSTER_KEY}", "heartbeat": "0.3s"}
    protected = Protected(procs, tmp_path, auth={"mode": "per_user"}, cluster=cluster,
                          clients={name: {"token": TOKENS[name]} for name in ("alice", "bob")},
                          listen={"public_url": f"http://127.0.0.1:{env.ports['r1']}"})
    protected.login(account="triad-service")
    protected.login("alice", account="alice")  # kept in Redis
    settings = ClusterConfig(redis=cluster["redis"], replica_id="test", secret_key=CLUSTER_KEY)  # type: ignore[arg-type]
    reader = Cluster(settings)
    async with reader.running(heartbeat=False):
        stored = VaultTokens(reader.vault, "alice", "up")
        tokens = await stored.get_tokens()
        assert tokens is not None and tokens.refresh_token and tokens.expires_in == 600
        due = {"tokens": tokens.model_dump(mode="json", exclude_none=True), "expires_at": time.time() + 30}
        await reader.vault.put("alice", "upstream-oauth:up:tokens", json.dumps(due).encode())
    env.config_path = protected.config
    for name in env.ports:
        env.start_replica(name).wait_for(r"upstream up ready")
    r1, r2 = (env.replica_url(name) for name in env.ports)
    granted = protected.authorization_server.stderr.count("GRANT refresh_token")
    answers: list[str] = []

    async def call(url: str) -> None:
        answers.append(await whoami(url, TOKENS["alice"]))

    async with anyio.create_task_group() as tg:
        for url, count in zip((r1, r2), callers, strict=True):
            for _ in range(count):
                tg.start_soon(call, url)
    assert [answer.split()[0] for answer in answers] == ["alice"] * sum(callers), answers
    seen = protected.authorization_server.stderr
    assert seen.count("GRANT refresh_token") - granted == 1, seen
    assert "GRANT_ERROR" not in seen, seen
    assert len({answer.split()[1] for answer in answers}) == 1, "every call should use the one refreshed token"
