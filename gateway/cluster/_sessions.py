"""Where each handshake-era session lives: a record per session (keyed by a hash of its id, never the id itself)
naming the owner replica and a keyed hash of the identity that opened it. A request for a session that landed on
another replica is forwarded to the owner only when the caller is that identity and the owner is alive;
otherwise it is answered as on one replica, 404, and the client opens a new session.

Records are written and removed off the request path (a bounded queue drained by `run()`); while Redis is
unreachable they are dropped, so sessions opened then can only be reached through the load balancer's routing.
"""

from __future__ import annotations

import hashlib
import json
import logging

import anyio

from consumers import JSONObject
from gateway.cluster._link import KEY_PREFIX, Link, RedisDown

logger = logging.getLogger("triad.cluster")

RECORD_TTL = 24 * 3600
"""A record's expiry, for sessions of a replica that died without removing them (its heartbeat says it is gone
long before)."""
QUEUE = 1024


def session_key(session_id: str) -> str:
    return f"{KEY_PREFIX}session:{hashlib.sha256(session_id.encode()).hexdigest()[:40]}"


class Sessions:
    def __init__(self, link: Link, replica_id: str) -> None:
        self._link = link
        self._replica_id = replica_id
        self._send, self._receive = anyio.create_memory_object_stream[tuple[str, str | None]](QUEUE)

    def opened(self, session_id: str, owner_hash: str) -> None:
        self._queue(session_key(session_id), json.dumps({"replica": self._replica_id, "owner": owner_hash}))

    def closed(self, session_id: str) -> None:
        self._queue(session_key(session_id), None)

    def _queue(self, key: str, value: str | None) -> None:
        try:
            self._send.send_nowait((key, value))
        except anyio.WouldBlock:
            logger.debug("cluster: session records queue full; a record is dropped")

    async def run(self) -> None:
        client = self._link.client
        async for key, value in self._receive:
            try:
                if value is None:
                    await self._link.run(client.delete(key))
                else:
                    await self._link.run(client.set(key, value, ex=RECORD_TTL))
            except RedisDown:
                pass

    async def owner(self, session_id: str) -> tuple[str, str] | None:
        """(owner replica, owner identity hash) of a session another replica recorded; None if none is known."""
        try:
            raw = await self._link.run(self._link.client.get(session_key(session_id)))
        except RedisDown:
            return None
        if raw is None:
            return None
        record: JSONObject = json.loads(raw)
        return str(record.get("replica")), str(record.get("owner"))
