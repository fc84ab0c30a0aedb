"""Telling connected clients that their lists changed.

Ownership: the daemon creates one `Notifier` and runs `run()` as one task in its task group. The dispatcher calls
the notifier's listener (synchronously) after every registry swap; `run()` then compares, for each tracked
handshake-era connection, that client's view before and after, and pushes `notifications/*/list_changed` only for
the lists that changed for it. 2026-07-28 clients get the same events through `subscriptions/listen` (the SDK's
subscription bus). A connection is forgotten through its own exit stack when it closes.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable
from typing import Any

import anyio
from mcp.server.subscriptions import (
    InMemorySubscriptionBus,
    ListenHandler,
    PromptsListChanged,
    ResourcesListChanged,
    ResourceUpdated,
    ToolsListChanged,
)
from mcp_types.version import MODERN_PROTOCOL_VERSIONS

from gateway.dispatch import Dispatcher
from gateway.identity import LOCAL, Identity

logger = logging.getLogger("triad.exposer")

RELEASE_TIMEOUT = 5.0
"""How long releasing a closed listen stream's upstream subscriptions may take."""


class Notifier:
    def __init__(self, dispatcher: Dispatcher) -> None:
        self.bus = InMemorySubscriptionBus()
        self._dispatcher = dispatcher
        self._connections: dict[Any, tuple[Identity, tuple[int, int, int]]] = {}
        self._sessions: dict[str, Any] = {}
        """Session id -> the connection of a live handshake-era HTTP session."""
        self._dirty = anyio.Event()
        self._modern_seen = dispatcher.view(LOCAL).fingerprint
        self._subscriptions: dict[Any, dict[str, tuple[str, str]]] = {}
        """Per connection: the exposed URIs it subscribed to -> (upstream, raw URI)."""
        self._updated: list[tuple[str, str]] = []
        """(upstream, raw URI) of subscribed resources that changed, waiting for `run()` to tell their clients."""
        self._listened: dict[tuple[str, str], list[str]] = {}
        """(upstream, raw URI) -> the exposed URIs 2026-07-28 listen streams subscribed to (one entry per stream)."""
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
        if connection.session_id is not None:
            self._sessions[connection.session_id] = connection
            connection.exit_stack.callback(self._sessions.pop, connection.session_id, None)

    def session(self, session_id: str) -> tuple[Any, Identity] | None:
        """The connection of a live handshake-era HTTP session and the identity it was opened with; None for a
        session Triad does not have (never opened, closed, or reaped)."""
        connection = self._sessions.get(session_id)
        found = self._connections.get(connection) if connection is not None else None
        return (connection, found[0]) if found is not None else None

    def _on_registry(self) -> None:
        self._dirty.set()

    # -- resource subscriptions ----------------------------------------------------------------------------------

    def subscribe(self, connection: Any, uri: str, upstream: str, raw: str) -> bool:
        """Remember a connection's subscription; False when it had it already. Its upstream subscriptions are
        released when the connection closes."""
        if connection not in self._subscriptions:
            self._subscriptions[connection] = {}
            connection.exit_stack.push_async_callback(self._release, connection)
        mine = self._subscriptions[connection]
        if uri in mine:
            return False
        mine[uri] = (upstream, raw)
        return True

    def unsubscribe(self, connection: Any, uri: str) -> tuple[str, str] | None:
        return self._subscriptions.get(connection, {}).pop(uri, None)

    async def _release(self, connection: Any) -> None:
        await self._unsubscribe_all(self._subscriptions.pop(connection, {}).values())

    async def _unsubscribe_all(self, subscriptions: Iterable[tuple[str, str]]) -> None:
        """Release (upstream, raw URI) subscriptions of a client that is gone."""
        for upstream, raw in subscriptions:
            try:
                await self._dispatcher.unsubscribe(upstream, raw)
            except Exception as exc:  # the client is gone either way; the upstream may be too
                logger.debug("could not unsubscribe upstream %s: %s", upstream, exc)

    def resource_updated(self, upstream: str, raw: str) -> None:
        """An upstream said a resource changed (called in its owner task); `run()` tells the subscribers."""
        self._updated.append((upstream, raw))
        self._dirty.set()

    def listen_handler(self, identity_of: Any) -> Any:
        """`subscriptions/listen` for 2026-07-28 clients: the SDK's handler on this notifier's bus, with the
        stream's resource subscriptions made at their upstreams while it lasts (`identity_of(ctx)` routes them)."""
        inner = ListenHandler(self.bus)

        async def listen(ctx: Any, params: Any) -> Any:
            held: list[tuple[str, str, str]] = []
            try:
                for uri in params.notifications.resource_subscriptions or ():
                    try:
                        owner, raw = await self._dispatcher.subscribe(identity_of(ctx), {"uri": uri})
                    except Exception as exc:  # that URI gets no updates; the stream still serves
                        logger.info("a listen stream's subscription to a resource was refused: %s", exc)
                        continue
                    held.append((owner, raw, uri))
                    self._listened.setdefault((owner, raw), []).append(uri)
                return await inner(ctx, params)
            finally:
                for owner, raw, uri in held:
                    self._listened[(owner, raw)].remove(uri)
                    if not self._listened[(owner, raw)]:
                        del self._listened[(owner, raw)]
                with anyio.CancelScope(shield=True), anyio.move_on_after(RELEASE_TIMEOUT):
                    await self._unsubscribe_all((owner, raw) for owner, raw, _uri in held)

        return listen

    async def _push_updates(self) -> None:
        updated, self._updated = set(self._updated), []
        for connection, subscribed in list(self._subscriptions.items()):
            for uri, owner in subscribed.items():
                if owner in updated:
                    try:
                        await connection.send_resource_updated(uri)
                    except Exception as exc:  # a client that went away must not stop the others
                        logger.debug("could not notify a session: %s", exc)
        for key in updated:
            for uri in set(self._listened.get(key, ())):
                await self.bus.publish(ResourceUpdated(uri=uri))

    async def run(self) -> None:
        while True:
            await self._dirty.wait()
            self._dirty = anyio.Event()
            if self._updated:
                await self._push_updates()
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
        kinds: tuple[ToolsListChanged | ResourcesListChanged | PromptsListChanged, ...] = (
            ToolsListChanged(), ResourcesListChanged(), PromptsListChanged())
        events = [event for i, event in enumerate(kinds) if after[i] != before[i]]
        for event in events:
            await self.bus.publish(event)
