"""The vault's size bound (issue 29): what it stores and what it reads back from Redis is bounded.

Before, `Vault.put` sealed and stored a secret of any size, and `Vault.get` read the whole value under a vault key
(whatever someone with access to Redis put there) and tried to decrypt it; a value of another Redis type surfaced as
"Redis is unreachable". Now a secret over `MAX_SECRET_BYTES` is refused with an error naming the limit, at most the
largest sealed value Triad writes is read back, and every kind of value that is not one of ours is skipped and
counted. A table over the sizes around the limit and the kinds of foreign value. Real redis-server.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from typing import Any

import pytest

from tests.cluster_env import CLUSTER_KEY, TriadCluster
from tests.conftest import Proc

pytestmark = pytest.mark.anyio


@pytest.fixture
async def cluster(procs: list[Proc], tmp_path: Path) -> AsyncIterator[Any]:
    from gateway.cluster import Cluster
    from gateway.config import ClusterConfig

    env = TriadCluster(procs, tmp_path)
    env.start_redis()
    settings = ClusterConfig(redis=f"redis://127.0.0.1:{env.redis_port}/0", replica_id="r1",
                             secret_key=CLUSTER_KEY)  # type: ignore[arg-type]
    joined = Cluster(settings)
    async with joined.running(heartbeat=False):
        yield joined


@pytest.mark.parametrize("size", [0, 1, 4096, "limit", "limit+1", 1024 * 1024])
async def test_a_secret_is_kept_up_to_the_limit_and_refused_over_it(cluster: Any, size: int | str) -> None:
    from gateway.cluster import MAX_SECRET_BYTES, SecretTooLarge
    from gateway.identity import Identity

    length = {"limit": MAX_SECRET_BYTES, "limit+1": MAX_SECRET_BYTES + 1}.get(str(size), size)
    assert isinstance(length, int)
    value, alice = b"s" * length, Identity("alice")
    if length <= MAX_SECRET_BYTES:
        await cluster.vault.put(alice, "tokens", value)
        assert await cluster.vault.get(alice, "tokens") == value
    else:
        with pytest.raises(SecretTooLarge, match=f"limit of {MAX_SECRET_BYTES} bytes") as refused:
            await cluster.vault.put(alice, "tokens", value)
        assert "sss" not in str(refused.value)  # the size, never the value
        assert await cluster.vault.get(alice, "tokens") is None  # nothing was stored


Plant = Callable[[Any, str], Awaitable[object]]


async def _sealed_by_us_but_huge(cluster: Any, key: str) -> object:
    return await cluster.link.client.set(key, cluster.box.seal(b"x" * (2 * 1024 * 1024), key))


FOREIGN: dict[str, Plant] = {
    "a huge value of ours (sealed with the cluster key)": _sealed_by_us_but_huge,
    "ten MiB of junk": lambda c, key: c.link.client.set(key, b"j" * (10 * 1024 * 1024)),
    "a list": lambda c, key: c.link.client.rpush(key, b"a", b"b"),
    "a hash": lambda c, key: c.link.client.hset(key, "f", "v"),
    "a set": lambda c, key: c.link.client.sadd(key, "m"),
    "junk text": lambda c, key: c.link.client.set(key, b"not a fernet token"),
}


@pytest.mark.parametrize("kind", FOREIGN)
async def test_a_value_that_is_not_ours_is_skipped_and_counted(cluster: Any, kind: str) -> None:
    from gateway.cluster import SecretUnreadable
    from gateway.identity import Identity

    alice = Identity("alice")
    key = cluster.vault._key(alice, "tokens")
    await FOREIGN[kind](cluster, key)
    skipped = cluster.rejections.total
    try:
        found = await cluster.vault.get(alice, "tokens")
    except SecretUnreadable:
        found = None
    assert found is None
    assert cluster.rejections.total == skipped + 1
    await cluster.vault.put(alice, "tokens", b"fresh")  # the user authorizes anew: the key is ours again
    assert await cluster.vault.get(alice, "tokens") == b"fresh"
