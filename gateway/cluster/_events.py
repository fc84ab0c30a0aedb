"""Events every replica must see, over Redis pub/sub: a reload asked of one replica (`reload`), an upstream whose
lists changed (`relist`), a subscribed resource that changed (`updated`). Each replica then acts on its own
connections and clients, so each client's notifications are still computed from its own view.

Pub/sub delivers to those listening at the time: while Redis is unreachable events are lost, and the listener
reconnects by itself; once back, `on_reconnect` runs (the daemon re-lists every upstream, catching up on list
changes it missed). A message is a record sealed with the cluster key (`Records`, bound to the channel) whose body
is `{"sender": replica, "kind": ..., "at": time, ...}`; a replica ignores its own, and skips (reporting at a bounded
rate) one that does not verify, is not one of the known kinds, or was sealed more than `MAX_AGE` seconds ago (a
recorded event replayed later).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Awaitable, Callable
from typing import Literal

import anyio
from pydantic import Field

from gateway.cluster._link import KEY_PREFIX, OP_TIMEOUT, Link, RedisDown
from gateway.cluster._records import REPLICA_ID, RecordModel, RecordRejected, Records, Rejections

logger = logging.getLogger("triad.cluster")

CHANNEL = f"{KEY_PREFIX}events"
RECONNECT_DELAY = 0.5
QUEUE = 1024
"""Events waiting to be published (`send_soon`); more are dropped, as they would be while Redis is down."""

MAX_AGE = 60.0
"""Seconds an event counts after it was sealed (clocks of replicas may differ by less than this)."""
MAX_FIELD = 2048

Kind = Literal["reload", "relist", "updated"]


class Event(RecordModel):
    sender: str = Field(pattern=REPLICA_ID)
    kind: Kind
    at: float
    upstream: str | None = Field(default=None, max_length=MAX_FIELD)
    digest: str | None = Field(default=None, max_length=MAX_FIELD)
    uri: str | None = Field(default=None, max_length=MAX_FIELD)


Handler = Callable[[Event], Awaitable[None]]


class Events:
    def __init__(self, link: Link, records: Records, rejections: Rejections, replica_id: str) -> None:
        self._link = link
        self._records = records
        self._rejections = rejections
        self._replica_id = replica_id
        self._handlers: dict[str, Handler] = {}
        self.on_reconnect: Callable[[], Awaitable[None]] | None = None
        self.listening = anyio.Event()
        self._outbox, self._pending = anyio.create_memory_object_stream[tuple[Kind, dict[str, str]]](QUEUE)

    def on(self, kind: Kind, handler: Handler) -> None:
        self._handlers[kind] = handler

    async def publish(self, kind: Kind, **payload: str) -> None:
        event = Event.model_validate({"sender": self._replica_id, "kind": kind, "at": time.time(), **payload})
        message = self._records.seal(CHANNEL, event)
        try:
            await self._link.run(self._link.client.publish(CHANNEL, message))
        except RedisDown:
            logger.info("cluster: a %s event could not be sent to the other replicas (Redis is unreachable)", kind)

    def send_soon(self, kind: Kind, **payload: str) -> None:
        """`publish`, from a synchronous callback: queued, sent by `run()`."""
        try:
            self._outbox.send_nowait((kind, payload))
        except anyio.WouldBlock:
            logger.debug("cluster: event queue full; a %s event is dropped", kind)

    async def run(self) -> None:
        async with anyio.create_task_group() as tg:
            tg.start_soon(self._send_queued)
            await self._receive()

    async def _send_queued(self) -> None:
        async for kind, payload in self._pending:
            await self.publish(kind, **payload)

    async def _receive(self) -> None:
        outage = False
        while True:
            try:
                await self._listen(outage)
            except Exception as exc:  # Redis went away: listen again once it is back
                if not outage:
                    logger.warning("cluster: lost the event channel (%s); reconnecting", type(exc).__name__)
                self._link.mark_down(exc)
                outage = True
            await anyio.sleep(RECONNECT_DELAY)

    async def _listen(self, after_outage: bool) -> None:
        pubsub = self._link.client.pubsub(ignore_subscribe_messages=True)
        try:
            await pubsub.subscribe(CHANNEL)
            self.listening.set()
            if after_outage:
                logger.info("cluster: event channel back")
                if self.on_reconnect is not None:
                    await self.on_reconnect()
            while True:
                message = await pubsub.get_message(timeout=OP_TIMEOUT / 2)
                if message is None:
                    await pubsub.ping()  # an idle channel whose Redis died is found out here
                    continue
                await self._deliver(message.get("data"))
        finally:
            with anyio.CancelScope(shield=True), anyio.move_on_after(OP_TIMEOUT):
                await pubsub.aclose()  # type: ignore[no-untyped-call]

    async def _deliver(self, data: object) -> None:
        try:
            event = self._records.open(CHANNEL, data, Event)
        except RecordRejected as rejected:
            self._rejections.note("event", rejected)
            return
        if abs(time.time() - event.at) > MAX_AGE:
            self._rejections.note("event", "stale")
            return
        if event.sender == self._replica_id:
            return
        handler = self._handlers.get(event.kind)
        if handler is None:
            return
        try:
            await handler(event)
        except Exception:  # one bad event must not end the listener
            logger.exception("cluster: handling a %s event failed", event.kind)
