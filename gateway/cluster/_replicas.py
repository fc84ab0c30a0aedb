"""Which replicas are alive: each writes a record with a short expiry every `cluster.heartbeat` seconds, and
reads everyone's (`/readyz` shows that view; forwarding finds an owner's address in it). A replica whose record
expired (three beats missed) is gone.
"""

from __future__ import annotations

import contextlib
import json
import time
from collections.abc import Callable
from dataclasses import dataclass

import anyio

from consumers import JSONObject
from gateway.cluster._link import KEY_PREFIX, Link, RedisDown, text

MEMBERS = f"{KEY_PREFIX}replicas"
MISSED_BEATS = 3


@dataclass(frozen=True)
class Heartbeat:
    """What this replica announces in its record, each beat: where its HTTP listener is, and `facts()` (sessions,
    registry version, readiness)."""

    address: str | None
    facts: Callable[[], JSONObject] = dict


def record_key(replica: str) -> str:
    return f"{KEY_PREFIX}replica:{replica}"


class Replicas:
    def __init__(self, link: Link, replica_id: str, beat: float) -> None:
        self._link = link
        self.replica_id = replica_id
        self._beat = beat
        self.started = time.time()
        self.alive: dict[str, JSONObject] = {}
        """The last view read from Redis: replica id -> its record (kept as it was while Redis is unreachable)."""
        self.last_read: float | None = None
        self._left = False

    async def run(self, heartbeat: Heartbeat) -> None:
        while not self._left:
            with contextlib.suppress(RedisDown):
                await self.beat(heartbeat)
            await anyio.sleep(self._beat)

    async def beat(self, heartbeat: Heartbeat) -> None:
        client = self._link.client
        if self._left:
            return
        record = {"address": heartbeat.address, "started": self.started, "beat": time.time(), **heartbeat.facts()}
        ttl_ms = int(self._beat * MISSED_BEATS * 1000)
        await self._link.run(client.set(record_key(self.replica_id), json.dumps(record), px=ttl_ms))
        await self._link.run(client.sadd(MEMBERS, self.replica_id))
        if self._left:  # leave() ran while this beat was writing: take out what the beat put back
            await self.leave()
            return
        await self.read()

    async def read(self) -> None:
        client = self._link.client
        members = sorted(text(m) for m in await self._link.run(client.smembers(MEMBERS)))
        records = await self._link.run(client.mget([record_key(m) for m in members])) if members else []
        alive: dict[str, JSONObject] = {}
        for member, raw in zip(members, records, strict=True):
            if raw is None:
                await self._link.run(client.srem(MEMBERS, member))  # gone: its record expired
                continue
            alive[member] = json.loads(raw)
        self.alive, self.last_read = alive, time.time()

    def address_of(self, replica: str) -> str | None:
        record = self.alive.get(replica)
        address = record.get("address") if record is not None else None
        return address if isinstance(address, str) else None

    async def leave(self, stop_beating: bool = False) -> None:
        """On a clean stop: gone at once, not after three missed beats."""
        self._left = self._left or stop_beating
        client = self._link.client
        try:
            await self._link.run(client.delete(record_key(self.replica_id)))
            await self._link.run(client.srem(MEMBERS, self.replica_id))
        except RedisDown:
            pass
