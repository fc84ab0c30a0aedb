"""Events every replica must see, over Redis pub/sub: a reload asked of one replica (`reload`), an upstream whose
lists changed (`relist`), a subscribed resource that changed (`updated`). Each replica then acts on its own
connections and clients, so each client's notifications are still computed from its own view.

Pub/sub delivers to those listening at the time: while Redis is unreachable events are lost, and the listener
reconnects by itself; once back, `on_reconnect` runs (the daemon re-lists every upstream, catching up on list
changes it missed). A message is JSON `{"from": replica, "kind": ..., ...}`; a replica ignores its own.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Awaitable, Callable
from typing import Any

import anyio

from consumers import JSON, JSONObject
from gateway.cluster._link import KEY_PREFIX, OP_TIMEOUT, Link, RedisDown

logger = logging.getLogger("triad.cluster")

CHANNEL = f"{KEY_PREFIX}events"
RECONNECT_DELAY = 0.5
QUEUE = 1024
"""Events waiting to be published (`send_soon`); more are dropped, as they would be while Redis is down."""

Handler = Callable[[JSONObject], Awaitable[None]]


class Events:
    def __init__(self, link: Link, replica_id: str) -> None:
        self._link = link
        self._replica_id = replica_id
        self._handlers: dict[str, Handler] = {}
        self.on_reconnect: Callable[[], Awaitable[None]] | None = None
        self.listening = anyio.Event()
        self._outbox, self._pending = anyio.create_memory_object_stream[tuple[str, dict[str, Any]]](QUEUE)

    def on(self, kind: str, handler: Handler) -> None:
        self._handlers[kind] = handler

    async def publish(self, kind: str, **payload: JSON) -> None:
        message = json.dumps({"from": self._replica_id, "kind": kind, **payload})
        try:
            await self._link.run(self._link.client.publish(CHANNEL, message))
        except RedisDown:
            logger.info("cluster: a %s event could not be sent to the other replicas (Redis is unreachable)", kind)

    def send_soon(self, kind: str, **payload: JSON) -> None:
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

    async def _deliver(self, data: str | bytes) -> None:
        try:
            event = json.loads(data)
        except (TypeError, ValueError):
            return
        if not isinstance(event, dict) or event.get("from") == self._replica_id:
            return
        handler = self._handlers.get(str(event.get("kind")))
        if handler is None:
            return
        try:
            await handler(event)
        except Exception:  # one bad event must not end the listener
            logger.exception("cluster: handling a %s event failed", event.get("kind"))
