"""Telling connected clients that their lists changed.

Ownership: the daemon creates one `Notifier` and runs `run()` as one task in its task group. The dispatcher calls
the notifier's listener (synchronously) after every registry swap; `run()` then compares, for each tracked
handshake-era connection, that client's view before and after, and pushes `notifications/*/list_changed` only for
the lists that changed for it. 2026-07-28 clients get the same events through `subscriptions/listen` (the SDK's
subscription bus). A connection is forgotten through its own exit stack when it closes.
"""

from __future__ import annotations

import logging
from typing import Any

import anyio
from mcp.server.subscriptions import (
    InMemorySubscriptionBus,
    PromptsListChanged,
    ResourcesListChanged,
    ToolsListChanged,
)
from mcp_types.version import MODERN_PROTOCOL_VERSIONS

from gateway.dispatch import Dispatcher
from gateway.identity import LOCAL, Identity

logger = logging.getLogger("triad.exposer")


class Notifier:
    def __init__(self, dispatcher: Dispatcher) -> None:
        self.bus = InMemorySubscriptionBus()
        self._dispatcher = dispatcher
        self._connections: dict[Any, tuple[Identity, tuple[int, int, int]]] = {}
        self._dirty = anyio.Event()
        self._modern_seen = dispatcher.view(LOCAL).fingerprint
        dispatcher.add_listener(self._on_registry)

    @property
    def open_sessions(self) -> int:
        return len(self._connections)

    def is_tracked(self, connection: Any) -> bool:
        return connection in self._connections

    def track(self, connection: Any, identity: Identity) -> None:
        if connection in self._connections or connection.protocol_version in MODERN_PROTOCOL_VERSIONS:
            return
        self._connections[connection] = (identity, self._dispatcher.view(identity).fingerprint)
        connection.exit_stack.callback(self._connections.pop, connection, None)

    def _on_registry(self) -> None:
        self._dirty.set()

    async def run(self) -> None:
        while True:
            await self._dirty.wait()
            self._dirty = anyio.Event()
            await self._push()

    async def _push(self) -> None:
        for connection, (identity, before) in list(self._connections.items()):
            after = self._dispatcher.view(identity).fingerprint
            if after == before:
                continue
            self._connections[connection] = (identity, after)
            try:
                if after[0] != before[0]:
                    await connection.send_tool_list_changed()
                if after[1] != before[1]:
                    await connection.send_resource_list_changed()
                if after[2] != before[2]:
                    await connection.send_prompt_list_changed()
            except Exception as exc:  # a client that went away must not stop the others' notifications
                logger.debug("could not notify a session: %s", exc)
        after = self._dispatcher.view(LOCAL).fingerprint
        before, self._modern_seen = self._modern_seen, after
        events = [event for changed, event in zip((after[i] != before[i] for i in range(3)),
                  (ToolsListChanged(), ResourcesListChanged(), PromptsListChanged()), strict=True) if changed]
        for event in events:
            await self.bus.publish(event)
