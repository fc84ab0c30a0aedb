"""Which replicas are alive: each writes a record with a short expiry every `cluster.heartbeat` seconds, and
reads everyone's (`/readyz` shows that view; forwarding finds an owner's address in it). A replica whose record
expired (three beats missed) is gone.

Only records that verify with the cluster key (`Records`) and name the replica they are kept under count: a forged
or damaged heartbeat is skipped (and reported), so forwarding, which carries the client's token and session id,
only ever reaches a replica that proved it holds the cluster key. The members set holds replica ids only; anything
else in it is removed, and a members key of another type is replaced.
"""

from __future__ import annotations

import contextlib
import re
import time
from collections.abc import Callable
from dataclasses import dataclass

import anyio
from pydantic import Field

from consumers import JSONObject
from gateway.cluster._link import KEY_PREFIX, Link, RedisDown, RedisRefused
from gateway.cluster._records import REPLICA_ID, RecordModel, RecordRejected, Records, Rejections

MEMBERS = f"{KEY_PREFIX}replicas"
MISSED_BEATS = 3
MAX_REPLICAS = 256
"""Members read per beat: a members set stuffed with junk costs one bounded read."""
_REPLICA_ID = re.compile(REPLICA_ID)


class BeatRecord(RecordModel):
    """A replica's heartbeat, as kept in Redis."""

    replica: str = Field(pattern=REPLICA_ID)
    address: str | None = Field(default=None, pattern=r"^https?://[^/\s]+$")
    started: float
    beat: float
    sessions: int = Field(default=0, ge=0)
    version: int = Field(default=0, ge=0)
    upstreams_ready: int = Field(default=0, ge=0)
    draining: bool = False
    """Stopping (SIGTERM): out of the load balancer, still serving its sessions; the others keep forwarding them
    to it until it is gone."""


@dataclass(frozen=True)
class Heartbeat:
    """What this replica announces in its record, each beat: where its HTTP listener is, and `facts()` (sessions,
    registry version, readiness)."""

    address: str | None
    facts: Callable[[], JSONObject] = dict


def record_key(replica: str) -> str:
    return f"{KEY_PREFIX}replica:{replica}"


class Replicas:
    def __init__(self, link: Link, records: Records, rejections: Rejections, replica_id: str, beat: float) -> None:
        self._link = link
        self._records = records
        self._rejections = rejections
        self.replica_id = replica_id
        self._beat = beat
        self.started = time.time()
        self.alive: dict[str, BeatRecord] = {}
        """The last view read from Redis: replica id -> its verified record (kept as it was while Redis is
        unreachable)."""
        self.last_read: float | None = None
        self.probe: tuple[str, bytes] | None = None
        """The cluster-key probe record (`Cluster.check_key`), put back each beat if Redis lost it."""
        self._left = False
        self.draining = False
        """Announced in each beat from the start of the drain on."""

    async def run(self, heartbeat: Heartbeat) -> None:
        while not self._left:
            with contextlib.suppress(RedisDown):
                await self.beat(heartbeat)
            await anyio.sleep(self._beat)

    async def beat(self, heartbeat: Heartbeat) -> None:
        client = self._link.client
        if self._left:
            return
        record = BeatRecord.model_validate({"replica": self.replica_id, "address": heartbeat.address,
                                            "started": self.started, "beat": time.time(), **heartbeat.facts(),
                                            "draining": self.draining})
        ttl_ms = int(self._beat * MISSED_BEATS * 1000)
        key = record_key(self.replica_id)
        await self._link.run(client.set(key, self._records.seal(key, record), px=ttl_ms))
        try:
            await self._link.run(client.sadd(MEMBERS, self.replica_id))
        except RedisRefused:  # the members key holds another type (not ours): replace it
            self._rejections.note("replica members", "wrong type")
            await self._link.run(client.delete(MEMBERS))
            await self._link.run(client.sadd(MEMBERS, self.replica_id))
        if self.probe is not None:
            await self._link.run(client.set(*self.probe, nx=True))
        if self._left:  # leave() ran while this beat was writing: take out what the beat put back
            await self.leave()
            return
        await self.read()

    async def read(self) -> None:
        client = self._link.client
        found = await self._link.run(client.srandmember(MEMBERS, MAX_REPLICAS)) or []
        if not isinstance(found, list):
            found = [found]
        members = sorted(m for m in (_member(raw) for raw in found) if m is not None)
        junk = [raw for raw in found if _member(raw) is None]
        if junk:
            self._rejections.note("replica members", "invalid body")
            await self._link.run(client.srem(MEMBERS, *junk))
        records = await self._link.run(client.mget([record_key(m) for m in members])) if members else []
        alive: dict[str, BeatRecord] = {}
        for member, raw in zip(members, records, strict=True):
            if raw is None:
                await self._link.run(client.srem(MEMBERS, member))  # gone: its record expired
                continue
            try:
                record = self._records.open(record_key(member), raw, BeatRecord)
            except RecordRejected as rejected:
                self._rejections.note("heartbeat", rejected)
                continue
            if record.replica == member:
                alive[member] = record
        self.alive, self.last_read = alive, time.time()

    def address_of(self, replica: str) -> str | None:
        record = self.alive.get(replica)
        return record.address if record is not None else None

    async def leave(self, stop_beating: bool = False) -> None:
        """On a clean stop: gone at once, not after three missed beats."""
        self._left = self._left or stop_beating
        client = self._link.client
        try:
            await self._link.run(client.delete(record_key(self.replica_id)))
            await self._link.run(client.srem(MEMBERS, self.replica_id))
        except RedisDown:
            pass


def _member(raw: object) -> str | None:
    """A members-set entry as a replica id; None for anything else."""
    member = raw.decode(errors="replace") if isinstance(raw, bytes) else raw
    return member if isinstance(member, str) and _REPLICA_ID.fullmatch(member) else None
