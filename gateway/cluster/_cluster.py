"""One replica's membership of a cluster: the Redis link and what is shared through it (see the package's
modules), started and stopped with the daemon."""

from __future__ import annotations

import contextlib
import logging
import time
from collections.abc import AsyncIterator
from typing import Literal

import anyio

from consumers import JSONObject
from gateway.cluster._approvals import RedisApprovals
from gateway.cluster._buckets import RedisBuckets
from gateway.cluster._events import Events
from gateway.cluster._link import KEY_PREFIX, Link, RedisDown
from gateway.cluster._pins import RedisPins
from gateway.cluster._records import RecordModel, RecordRejected, Records, Rejections
from gateway.cluster._replicas import Heartbeat, Replicas
from gateway.cluster._secret_box import SecretBox
from gateway.cluster._sessions import Sessions
from gateway.cluster._vault import Vault
from gateway.config import ClusterConfig
from gateway.identity import Identity
from gateway.state import Approvals, Buckets, Pins, PinStore

logger = logging.getLogger("triad.cluster")

PROBE_KEY = f"{KEY_PREFIX}cluster-key"
LEAVE_BEATS = 1.5
"""Heartbeats a leaving replica waits for the others to read that it left (each reads once a beat)."""


class ClusterKeyMismatch(Exception):
    """This replica's cluster key is not the one the cluster's records are sealed with: it must not join."""


class _Probe(RecordModel):
    purpose: Literal["cluster key"]


class Cluster:
    """Implements `gateway.state.SharedState` for the hooks, and holds the replica's view of the others."""

    def __init__(self, config: ClusterConfig) -> None:
        self.config = config
        self.replica_id = config.replica_id
        self.link = Link(config.redis)
        self.box = SecretBox(config.secret_key.get_secret_value())
        self.records = Records(config.secret_key.get_secret_value())
        self.rejections = Rejections()
        """Records read from Redis that did not verify, reported at a bounded rate."""
        self.replicas = Replicas(self.link, self.records, self.rejections, config.replica_id, config.heartbeat)
        self.events = Events(self.link, self.records, self.rejections, config.replica_id)
        self.sessions = Sessions(self.link, self.records, self.rejections, config.replica_id, config.heartbeat)
        self._buckets = RedisBuckets(self.link, self.box)
        self._pins: dict[str, RedisPins] = {}
        self._approvals = RedisApprovals(self.link, self.records, self.rejections)
        self.vault = Vault(self.link, self.box, self.rejections)
        """Per-identity secrets, encrypted with the cluster key."""
        self.draining = False
        """Stopping: `/readyz` answers 503 so the load balancer takes this replica out (`drain`)."""

    # -- SharedState ---------------------------------------------------------------------------------------------

    def buckets(self) -> Buckets:
        return self._buckets

    def pins(self, state: str, store: PinStore) -> Pins:
        if state not in self._pins:
            self._pins[state] = RedisPins(self.link, self.records, self.rejections, state, store)
        return self._pins[state]

    def approvals(self) -> Approvals:
        return self._approvals

    # -- sessions ------------------------------------------------------------------------------------------------

    def owner_hash(self, identity: Identity) -> str:
        return self.box.identity_hash(identity)

    def opened(self, session_id: str, identity: Identity) -> None:
        """A handshake-era session opened here (`exposers.notify.SessionRecords`)."""
        self.sessions.opened(session_id, self.owner_hash(identity))

    def closed(self, session_id: str) -> None:
        self.sessions.closed(session_id)

    async def session_owner(self, session_id: str, caller: Identity) -> str | None:
        """The address of the live replica that owns `session_id`, when `caller` opened it; None otherwise (the
        session is then unknown here, as on one replica)."""
        found = await self.sessions.owner(session_id)
        if found is None:
            return None
        replica, owner = found
        if replica == self.replica_id or owner != self.owner_hash(caller):
            return None
        return self.replicas.address_of(replica)

    # -- readiness -----------------------------------------------------------------------------------------------

    def view(self) -> JSONObject:
        """What `/readyz` shows of the cluster: this replica, whether Redis answers, and the replicas alive at the
        last heartbeat (with their age)."""
        now = time.time()
        return {"replica": self.replica_id, "redis": "up" if self.link.up else "down", "draining": self.draining,
                "skipped_records": self.rejections.total,
                "replicas": {name: {"address": record.address, "last_beat_s": round(now - record.beat, 2),
                                    "sessions": record.sessions, "upstreams_ready": record.upstreams_ready,
                                    "version": record.version, "draining": record.draining}
                             for name, record in self.replicas.alive.items()}}

    async def drain(self) -> None:
        """Before stopping, for `drain_delay` seconds: not ready any more (the load balancer takes this replica out
        of rotation), but still in the cluster's view, marked draining, so that a request on one of its sessions
        that lands elsewhere is still forwarded here while it serves them. `leave` ends that, as the socket
        closes."""
        self.draining = self.replicas.draining = True
        await anyio.sleep(self.config.drain_delay)

    async def leave(self) -> None:
        """Gone from the cluster's view at once, not after three missed beats; returns once the others have read
        that (they read every beat), so that nothing is forwarded here once the calls stop being served: a request
        forwarded meanwhile is still served, one after it gets 404 on the replica it landed on."""
        await self.replicas.leave(stop_beating=True)
        await anyio.sleep(LEAVE_BEATS * self.config.heartbeat)

    async def check_key(self) -> None:
        """Join only a cluster whose key is ours: the first replica leaves a sealed probe record; one started
        with another `cluster.secret_key` finds it signed with another key and stops (`ClusterKeyMismatch`),
        rather than join and have every record it reads or writes rejected. A probe that is junk is replaced."""
        client, probe = self.link.client, _Probe(purpose="cluster key")
        self.replicas.probe = (PROBE_KEY, self.records.seal(PROBE_KEY, probe))
        await self.link.run(client.set(*self.replicas.probe, nx=True))
        try:
            self.records.open(PROBE_KEY, await self.link.run(client.get(PROBE_KEY)), _Probe)
        except RecordRejected as rejected:
            if rejected.reason == "another cluster key":
                raise ClusterKeyMismatch(
                    f"cluster: Redis holds records sealed with another cluster key ({rejected}): every replica "
                    "must have the same cluster.secret_key. This replica does not join. (After changing the key "
                    f"of every replica on purpose, delete the Redis key {PROBE_KEY}.)") from None
            self.rejections.note("probe", rejected)
            await self.link.run(client.set(*self.replicas.probe))

    # -- running -------------------------------------------------------------------------------------------------

    @contextlib.asynccontextmanager
    async def running(self, heartbeat: Heartbeat | Literal[False]) -> AsyncIterator[None]:
        """Listen to events and keep session records (and with a `heartbeat`, announce this replica: its address
        and facts) until exit."""
        try:
            await self.link.run(self.link.client.ping())
            await self.check_key()
        except RedisDown:
            logger.warning("cluster: Redis is unreachable at start; replica %s starts degraded", self.replica_id)
        except ClusterKeyMismatch as exc:  # before anything starts: one ERROR line and exit 1, no traceback
            logger.error("%s", exc)
            raise SystemExit(1) from None
        async with anyio.create_task_group() as tg:
            tg.start_soon(self.events.run, name="cluster-events")
            tg.start_soon(self.sessions.run, name="cluster-sessions")
            if heartbeat:
                tg.start_soon(self.replicas.run, heartbeat, name="cluster-heartbeat")
            try:
                yield
            finally:
                tg.cancel_scope.cancel()
                with anyio.CancelScope(shield=True), anyio.move_on_after(2):
                    if heartbeat:
                        await self.replicas.leave()
                    await self.link.close()
