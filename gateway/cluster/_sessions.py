"""Where each handshake-era session lives: a record per session (keyed by a hash of its id, never the id itself)
naming the owner replica and a keyed hash of the identity that opened it, sealed with the cluster key
(`Records`). A request for a session that landed on another replica is forwarded to the owner only when the
caller is that identity and the owner is alive; otherwise (no record, or one that does not verify) it is answered
as on one replica, 404, and the client opens a new session.

Records are written and removed off the request path (a bounded queue drained by `run()`); while Redis is
unreachable they are dropped, so sessions opened then can only be reached through the load balancer's routing.
A record expires `RECORD_TTL_BEATS` heartbeats after it was last written, and the owner rewrites the records of
its open sessions every `REFRESH_BEATS` heartbeats: the records of a replica killed with -9 are gone within
seconds, not left in Redis for a day.
"""

from __future__ import annotations

import contextlib
import hashlib
import logging

import anyio
from pydantic import Field

from gateway.cluster._link import KEY_PREFIX, Link, RedisDown
from gateway.cluster._records import REPLICA_ID, RecordModel, RecordRejected, Records, Rejections

logger = logging.getLogger("triad.cluster")

RECORD_TTL_BEATS = 30
"""A record lives this many heartbeats after its last write (30 s at the default beat): long enough to ride out
a short Redis outage without losing the forwarding of sessions, short enough that a dead replica leaves nothing."""
REFRESH_BEATS = 10
"""How often (in heartbeats) the owner rewrites its sessions' records; a third of their life."""
MIN_TTL = 5.0
"""Seconds a record lives at least, whatever the heartbeat."""
QUEUE = 1024


class SessionRecord(RecordModel):
    replica: str = Field(pattern=REPLICA_ID)
    owner: str = Field(pattern=r"^[0-9a-f]{32}$")


def session_key(session_id: str) -> str:
    return f"{KEY_PREFIX}session:{hashlib.sha256(session_id.encode()).hexdigest()[:40]}"


class Sessions:
    def __init__(self, link: Link, records: Records, rejections: Rejections, replica_id: str, beat: float) -> None:
        self._link = link
        self._records = records
        self._rejections = rejections
        self._replica_id = replica_id
        self.ttl = max(MIN_TTL, beat * RECORD_TTL_BEATS)
        self._refresh_every = self.ttl * REFRESH_BEATS / RECORD_TTL_BEATS
        self._open: dict[str, bytes] = {}
        """Key -> sealed record of every session open here (bounded by the sessions this replica admits)."""
        self._send, self._receive = anyio.create_memory_object_stream[tuple[str, bytes | None]](QUEUE)

    def opened(self, session_id: str, owner_hash: str) -> None:
        key = session_key(session_id)
        sealed = self._records.seal(key, SessionRecord(replica=self._replica_id, owner=owner_hash))
        self._open[key] = sealed
        self._queue(key, sealed)

    def closed(self, session_id: str) -> None:
        key = session_key(session_id)
        self._open.pop(key, None)
        self._queue(key, None)

    def _queue(self, key: str, value: bytes | None) -> None:
        try:
            self._send.send_nowait((key, value))
        except anyio.WouldBlock:
            logger.debug("cluster: session records queue full; a record is dropped")

    async def run(self) -> None:
        async with anyio.create_task_group() as tg:
            tg.start_soon(self._refresh)
            client = self._link.client
            async for key, value in self._receive:
                try:
                    if value is None:
                        await self._link.run(client.delete(key))
                    else:
                        await self._link.run(client.set(key, value, ex=int(self.ttl)))
                except RedisDown:
                    pass

    async def _refresh(self) -> None:
        """Rewrite the records of the sessions open here before they expire (also after Redis lost them)."""
        while True:
            await anyio.sleep(self._refresh_every)
            if not self._open:
                continue
            async with self._link.client.pipeline(transaction=False) as batch:
                for key, sealed in list(self._open.items()):
                    batch.set(key, sealed, ex=int(self.ttl))
                with contextlib.suppress(RedisDown):
                    await self._link.run(batch.execute())

    async def owner(self, session_id: str) -> tuple[str, str] | None:
        """(owner replica, owner identity hash) of a session another replica recorded; None if none is known."""
        key = session_key(session_id)
        try:
            raw = await self._link.run(self._link.client.get(key))
        except RedisDown:
            return None
        if raw is None:
            return None
        try:
            record = self._records.open(key, raw, SessionRecord)
        except RecordRejected as rejected:
            self._rejections.note("session", rejected)
            return None
        return record.replica, record.owner
