"""Clients' resource subscriptions at one upstream: asked of the upstream once per URI, however many subscribe.

Handshake era: `resources/subscribe` and `resources/unsubscribe`, asked again on each new connection. 2026-07-28:
the URIs are part of the `subscriptions/listen` filter, so a change reopens the stream (`ModernLink`). The
`Upstream` owns one `Subscriptions`; updates come back through its notification handlers.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable

import mcp_types as types
from mcp import ClientSession

from consumers._errors import describe_failure
from consumers._sdk import send_raw
from consumers.modern import ModernLink
from consumers.relay import UpstreamRequest

logger = logging.getLogger("triad.upstream")


class Subscriptions:
    def __init__(self, upstream: str, request: Callable[[UpstreamRequest], Awaitable[object]],
                 modern: Callable[[], bool], link: ModernLink) -> None:
        self._upstream = upstream
        self._request = request
        self._modern = modern
        self._link = link
        self._counts: dict[str, int] = {}
        """Raw URI -> how many clients subscribed to it."""

    def uris(self) -> tuple[str, ...]:
        return tuple(self._counts)

    def adopt(self, other: Subscriptions) -> bool:
        """Take over the subscribers of the connection this one replaces (after a reload); True when there are
        any, for the caller to ask the upstream (`renew`, or a new listen stream)."""
        for uri, count in other._counts.items():
            self._counts[uri] = self._counts.get(uri, 0) + count
        return bool(other._counts)

    async def add(self, uri: str) -> None:
        count = self._counts.get(uri, 0)
        self._counts[uri] = count + 1
        if count:
            return
        try:
            await self._changed(uri, subscribe=True)
        except BaseException:
            self._release(uri)
            raise

    async def remove(self, uri: str) -> None:
        if self._release(uri):
            await self._changed(uri, subscribe=False)

    def _release(self, uri: str) -> bool:
        """One subscriber fewer; True when it was the last one."""
        count = self._counts.pop(uri, 0)
        if count > 1:
            self._counts[uri] = count - 1
        return count == 1

    async def _changed(self, uri: str, *, subscribe: bool) -> None:
        if self._modern():
            self._link.subscriptions_changed()
            return
        await self._request(types.SubscribeRequest(params=types.SubscribeRequestParams(uri=uri)) if subscribe
                            else types.UnsubscribeRequest(params=types.UnsubscribeRequestParams(uri=uri)))

    async def renew(self, session: ClientSession) -> None:
        """A new connection knows nothing of earlier subscriptions: ask again for each (2026-07-28: a new listen
        stream names them all)."""
        if self._modern():
            self._link.subscriptions_changed()
            return
        for uri in self.uris():
            try:
                await send_raw(session, types.SubscribeRequest(params=types.SubscribeRequestParams(uri=uri)))
            except Exception as exc:  # one refused URI must not stop the others
                logger.warning("upstream %s: could not subscribe again to a resource: %s", self._upstream,
                               describe_failure(exc))
