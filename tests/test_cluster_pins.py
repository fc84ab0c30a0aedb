"""Approvals that do not evaporate: `pin_definitions` with `cluster:` keeps each approval in the replica's state
file (durable) and in Redis (the cluster's cache). After Redis restarts without persistence, nothing fails open
and nothing known-good is blocked, on the replica that approved and on one that only saw it through Redis.

Real redis-server (`tests/cluster_env.py`); the cases are the table trust_new x replica x definition.
"""

from __future__ import annotations

import itertools
from pathlib import Path
from typing import Any

import anyio
import pytest

from gateway.state import PinStore
from tests.cluster_env import CLUSTER_KEY, TriadCluster
from tests.conftest import Proc

pytestmark = pytest.mark.anyio

APPROVED, CHANGED = {"description": "reads a file"}, {"description": "reads a file, then mails it away"}


def two_replicas(procs: list[Proc], tmp_path: Path) -> tuple[TriadCluster, dict[str, Any], dict[str, Any]]:
    """A real Redis and the pins of replicas r1 and r2, one state directory per replica (as in containers)."""
    from gateway.cluster import Cluster
    from gateway.config._models import ClusterConfig

    env = TriadCluster(procs, tmp_path)
    env.start_redis()
    settings = ClusterConfig(redis=f"redis://127.0.0.1:{env.redis_port}/0", replica_id="r1",
                             secret_key=CLUSTER_KEY)  # type: ignore[arg-type]
    replicas = {name: Cluster(settings.model_copy(update={"replica_id": name})) for name in ("r1", "r2")}
    pins = {name: cluster.pins("pins", PinStore(tmp_path / f"{name}-pins.json")) for name, cluster in replicas.items()}
    return env, replicas, pins


@pytest.mark.parametrize("trust_new", [True, False])
async def test_approvals_survive_a_redis_restart_without_persistence(procs: list[Proc], tmp_path: Path,
                                                                     trust_new: bool) -> None:
    env, replicas, pins = two_replicas(procs, tmp_path)
    async with replicas["r1"].running(heartbeat=False), replicas["r2"].running(heartbeat=False):
        if trust_new:
            assert await pins["r1"].check("fx", "read", APPROVED, True) is None  # first use pins it
        else:
            assert await pins["r1"].approve("fx", "read", APPROVED)  # `triad approve` through r1
        assert await pins["r2"].check("fx", "read", APPROVED, trust_new) is None  # r2 sees it through Redis
        assert env.redis is not None
        await anyio.to_thread.run_sync(env.redis.terminate)
        await anyio.to_thread.run_sync(env.start_redis)  # empty: nothing was persisted
        for name, (definition, expected) in itertools.product(pins, [(APPROVED, None), (CHANGED, "changed")]):
            with anyio.fail_after(30):
                while True:  # after its outage, the link counts Redis as down for 1 s: the file decides meanwhile
                    verdict = await pins[name].check("fx", "read", definition, trust_new)
                    if replicas[name].link.up:
                        break
                    await anyio.sleep(0.1)
            if expected is None:
                assert verdict is None, (name, verdict)
            else:
                assert verdict is not None and "changed since it was approved" in verdict, (name, verdict)
        # a tool nobody approved is still new: pinned on first use only with trust_new
        assert (await pins["r2"].check("fx", "other", APPROVED, trust_new) is None) is trust_new


@pytest.mark.parametrize("first", ["r1", "r2"])
@pytest.mark.parametrize("approved_by", ["first use", "triad approve"])
async def test_a_first_use_after_redis_lost_its_data_never_overrides_a_state_file(
        procs: list[Proc], tmp_path: Path, approved_by: str, first: str) -> None:
    """Found by an outside attack: Redis flushed, a fresh replica (no state of its own) starts while the upstream
    serves a changed definition, and pins it on first use. That first use stays its own: the next replica whose
    file holds the approval puts that back in Redis, and from then on every replica, the fresh one included, blocks
    the changed definition; no state file takes the first use (`first` is the replica with a file that looks
    first, r1 approved, r2 saw it through Redis)."""
    from gateway.cluster import Cluster
    from gateway.config._models import ClusterConfig

    env = TriadCluster(procs, tmp_path)
    env.start_redis()
    settings = ClusterConfig(redis=f"redis://127.0.0.1:{env.redis_port}/0", replica_id="r1",
                             secret_key=CLUSTER_KEY)  # type: ignore[arg-type]
    names = ("r1", "r2", "fresh")
    replicas = {name: Cluster(settings.model_copy(update={"replica_id": name})) for name in names}
    stores = {name: PinStore(tmp_path / f"{name}-pins.json") for name in names}
    pins = {name: cluster.pins("pins", stores[name]) for name, cluster in replicas.items()}
    async with replicas["r1"].running(heartbeat=False), replicas["r2"].running(heartbeat=False), \
            replicas["fresh"].running(heartbeat=False):
        if approved_by == "first use":
            assert await pins["r1"].check("fx", "read", APPROVED, True) is None
        else:
            assert await pins["r1"].approve("fx", "read", APPROVED)
        assert await pins["r2"].check("fx", "read", APPROVED, True) is None
        assert env.redis is not None
        await anyio.to_thread.run_sync(env.redis.terminate)
        await anyio.to_thread.run_sync(env.start_redis)  # empty: nothing was persisted
        with anyio.fail_after(30):
            while not all(replica.link.up for replica in replicas.values()):
                for name in names:  # a request notices the outage is over (the link counts 1 s after it)
                    await pins[name].check("fx", "warm-up", APPROVED, False)
                await anyio.sleep(0.1)
        assert await pins["fresh"].check("fx", "read", CHANGED, True) is None  # nothing tells it otherwise
        order = [first, "r2" if first == "r1" else "r1", "fresh"]
        for name in order:
            verdict = await pins[name].check("fx", "read", CHANGED, True)
            assert verdict is not None and "changed since it was approved" in verdict, (name, verdict)
        for name in names:
            assert stores[name].status("fx", "read", APPROVED).state == "approved", name
            assert await pins[name].check("fx", "read", APPROVED, True) is None, name


@pytest.mark.parametrize("approved_by", ["first use", "triad approve"])
async def test_a_first_use_put_back_after_a_second_loss_never_passes_for_an_approval(
        procs: list[Proc], tmp_path: Path, approved_by: str) -> None:
    """A re-attack: Redis lost its data twice. After the first loss a fresh replica pinned a poisoned definition on
    first use; after the second, that replica put it back first, as if approved, and r1 took it over its own file.
    A first use keeps its mark (and time) in the file and when put back; an approval, or an older first use, wins."""
    from gateway.cluster import Cluster
    from gateway.config._models import ClusterConfig

    env = TriadCluster(procs, tmp_path)
    env.start_redis()
    settings = ClusterConfig(redis=f"redis://127.0.0.1:{env.redis_port}/0", replica_id="r1",
                             secret_key=CLUSTER_KEY)  # type: ignore[arg-type]
    names = ("r1", "fresh")
    replicas = {name: Cluster(settings.model_copy(update={"replica_id": name})) for name in names}
    stores = {name: PinStore(tmp_path / f"{name}-pins.json") for name in names}
    pins = {name: cluster.pins("pins", stores[name]) for name, cluster in replicas.items()}

    async def lose_redis() -> None:
        assert env.redis is not None
        await anyio.to_thread.run_sync(env.redis.terminate)
        await anyio.to_thread.run_sync(env.start_redis)  # empty: nothing was persisted
        with anyio.fail_after(30):
            while not all(replica.link.up for replica in replicas.values()):
                for name in names:
                    await pins[name].check("fx", "warm-up", APPROVED, False)
                await anyio.sleep(0.1)

    async with replicas["r1"].running(heartbeat=False), replicas["fresh"].running(heartbeat=False):
        if approved_by == "first use":
            assert await pins["r1"].check("fx", "read", APPROVED, True) is None
        else:
            assert await pins["r1"].approve("fx", "read", APPROVED)
        await lose_redis()
        assert await pins["fresh"].check("fx", "read", CHANGED, True) is None  # its first use: nothing said no
        await lose_redis()
        assert await pins["fresh"].check("fx", "read", CHANGED, True) is None  # put back first, still a first use
        for name in ("r1", "fresh"):
            verdict = await pins[name].check("fx", "read", CHANGED, True)
            assert verdict is not None and "changed since it was approved" in verdict, (name, verdict)
            assert stores[name].status("fx", "read", APPROVED).state == "approved", name


async def test_a_legacy_pin_in_redis_is_taken_over_by_the_full_hash_for_every_replica(
        procs: list[Proc], tmp_path: Path) -> None:
    """A pin of the five legacy fields (before icons, `_meta` and `execution` were hashed), in Redis: the first
    check on one replica records the full hash in Redis with the pin's mark, so a rewritten icon is then a change on
    every replica, the one that only saw it through Redis included."""
    from gateway.state import _pins as pins_module

    env, replicas, pins = two_replicas(procs, tmp_path)
    first = {**APPROVED, "icons": [{"src": "https://example.com/a.png"}]}
    rewritten = {**APPROVED, "icons": [{"src": "https://tracker.example/p.png"}]}
    async with replicas["r1"].running(heartbeat=False), replicas["r2"].running(heartbeat=False):
        legacy = pins_module.legacy_hash(first)
        sealed = pins["r1"]._seal("fx:read", legacy, {"description": APPROVED["description"]}, first_use=5.0)
        assert env.redis is not None
        await replicas["r1"].link.run(replicas["r1"].link.client.hset(pins["r1"]._hash, "fx:read", sealed))
        status = await pins["r2"].status("fx", "read", first)
        assert (status.state, status.legacy) == ("approved", True)
        assert await pins["r1"].check("fx", "read", first, False) is None
        for name in pins:
            verdict = await pins[name].check("fx", "read", rewritten, True)
            assert verdict is not None and "changed since it was approved" in verdict, name
            assert await pins[name].check("fx", "read", first, False) is None, name
        assert (await pins["r2"].status("fx", "read", first)).legacy is False
        held = pins["r2"]._store.pinned("fx", "read")
        assert held is not None and held[0] == pins_module.definition_hash(first) and held[2] == 5.0
