"""An upstream's side of `sessions: per_client`: which upstream session a client's requests go on, what a client's
own session lists, the roots a session declares, and telling a client's own session its roots changed.

`OwnSessions` is mixed into `consumers.upstream.Upstream`; the sessions themselves are `consumers.per_client`'s.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import mcp_types as types
from mcp.client.session import ClientRequestContext

from consumers.channel import SessionChannel
from consumers.config import UpstreamConfig
from consumers.own_lists import OwnLists
from consumers.per_client import ClientSessions
from consumers.relay import ClientOrigin


class OwnSessions:
    """The per-client part of `Upstream` (`_clients`: each downstream session's own upstream session)."""

    config: UpstreamConfig
    _clients: ClientSessions
    _channel: SessionChannel | None

    if TYPE_CHECKING:  # supplied by `Upstream`
        @property
        def modern(self) -> bool: ...

    @property
    def _declares_roots(self) -> bool:
        """A shared session declares roots only with `roots:` configured. With `per_client` the catalog session
        declares them too (its roots are the configured ones, or none): it lists what a client that has roots would
        see, and each client's own session narrows that to what it lists for that client."""
        return self.config.roots is not None or self.config.session_mode == "per_client"

    async def _configured_roots(self, context: ClientRequestContext) -> types.ListRootsResult | types.ErrorData:
        """A shared session's roots are the upstream's own `roots:`, never a client's."""
        return types.ListRootsResult.model_validate({"roots": [{"uri": uri} for uri in self.config.roots or ()]})

    async def roots_changed(self, client: ClientOrigin) -> None:
        """A client's roots changed: its own upstream session is told (a shared one never had them)."""
        await self._clients.roots_changed(client)

    def known_lists(self, client: ClientOrigin) -> OwnLists | None:
        """What `client`'s own session lists (`sessions: per_client`), if known without opening one."""
        return self._clients.known_lists(self.own_session(client) or client)

    async def own_lists(self, client: ClientOrigin) -> OwnLists:
        """What `client`'s own session lists, opening it if need be; an `UpstreamError` if it cannot be opened."""
        return await self._clients.lists_for(self.own_session(client) or client)

    @property
    def client_sessions(self) -> int:
        """How many per-client upstream sessions are open."""
        return len(self._clients)

    def own_session(self, client: ClientOrigin | None) -> ClientOrigin | None:
        """The downstream session whose own upstream session `client`'s requests go on (`sessions: per_client`):
        its own, or for a caller with no way back (a 2026-07-28 request) the stand-in bound to who it is and what
        it declared (`consumers`); None: they go on the shared one."""
        if client is None or not self.per_client:
            return None
        return client if client.back is not None else self._clients.stand_in(client)

    @property
    def per_client(self) -> bool:
        """Each downstream session with a way back gets an upstream session of its own (`sessions: per_client`)."""
        return self.config.session_mode == "per_client" and not self.modern

    async def _channel_for(self, client: ClientOrigin | None) -> SessionChannel | None:
        """The client's own upstream session, or the shared one."""
        if client is None:
            return self._channel
        return await self._clients.channel_for(client)
