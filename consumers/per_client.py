"""Upstream sessions of one's own for each downstream session (`sessions: per_client`).

Whatever an upstream keeps per session (the client's roots, its log level, its capabilities, sampling and
elicitation, session resources) then belongs to that client alone. A client's session is opened at its first
request routed to the upstream, declares that client's capabilities (sampling, elicitation, roots: only those it
declared to Triad), and relays what the upstream sends on it to that client only: in a call, to the call's
request; outside calls, to the client's session channel (`ClientOrigin.back`). It is closed when the downstream
session ends (or idles out), when the upstream loses it (its next request opens a new one), and when the upstream
is stopped.

What the client sees of the upstream is what its own session lists (`consumers.own_lists.OwnLists`: tool and prompt
names, resources and resource templates, listed when it opens and again when the upstream says one changed on it;
the client is then told, and no one else): an upstream may list tools and prompts by its client's capabilities, and
keeps session resources per session. A client that has no session yet sees what a session that declared the same
capabilities listed (`known_lists`); the gateway narrows the registry's view by these lists
(`gateway.registry.Snapshot.narrowed`).

Ownership: the upstream's owner task starts `ClientSessions.run()` in a task group of its own, for its whole life
(client sessions outlive reconnects of the shared session); each client session is one task in the group `run()`
owns, started by the first request that needs it, which opens it as the shared session is opened
(`consumers._session_open.open_session`: it enters and exits its transport and `ClientSession` itself) and serves
it with the same loop (`consumers._session_loop`). A client session that fails after it started is logged and
forgotten, never raised into the group; the next request of that client opens a new one.
"""

from __future__ import annotations

import json
import logging
import math
import weakref
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field

import anyio
import mcp_types as types
from anyio.abc import TaskGroup, TaskStatus
from mcp import ClientSession

from consumers._errors import describe_failure
from consumers._json import JSON, JSONObject
from consumers._session_loop import Wake, serve_session
from consumers._session_open import Declaration, Handshake, OpenSession, offered, open_session
from consumers._slots import Slot, holders, room_for
from consumers._stand_ins import IDLE_CLOSE, StandIn, StandIns
from consumers.channel import SessionChannel
from consumers.child_process import ChildOutput
from consumers.config import AUTHORIZATION_WAIT, UpstreamConfig
from consumers.errors import UpstreamAuthorizationRequired, UpstreamTimeout, UpstreamUnavailable
from consumers.listing import Catalog
from consumers.log_fields import log_fields
from consumers.oauth import Credentials, CredentialUse, link_asker
from consumers.own_lists import OWN_LISTS, OwnLists, list_own, own_families
from consumers.relay import CURRENT_DOWNSTREAM, ClientOrigin, InFlight, ListsChanged
from consumers.transports import TlsContexts

logger = logging.getLogger("triad.upstream")

LISTEN_WAIT = 2.0
"""How long a new client session over streamable HTTP waits for its GET stream before its first request goes."""
CLOSE_TIMEOUT = 5.0
"""How long closing one client's upstream session may take (an HTTP DELETE, a child's exit)."""
DECLARED = ("sampling", "elicitation", "roots")
"""The client capabilities a client's upstream session declares when that client declared them."""
MAX_LEARNED = 64
"""Distinct capability declarations whose tool lists are kept (clients choose their declarations freely)."""


@dataclass(eq=False)
class ClientLink:
    """One client's upstream session, while its owner task runs."""

    origin: ClientOrigin
    relays: InFlight
    channel: SessionChannel | None = None
    opened: anyio.Event = field(default_factory=anyio.Event)
    closed: anyio.Event = field(default_factory=anyio.Event)
    failure: BaseException | None = None
    opening: anyio.CancelScope | None = None
    asking: bool = False
    """Opening waits for the client's person to authorize (`auth: per_user`), not only for the upstream."""
    lists: OwnLists | None = None
    stale: set[str] = field(default_factory=set)
    """Own lists the upstream said changed on this session (both are re-listed by the owner task)."""
    fresh: anyio.Event = field(default_factory=anyio.Event)
    """Set while `lists` are what the session lists now: unset from a change until its re-list, so that a list
    asked in between (after the `list_changed` a catalog change sends every client) waits for the new lists."""
    wake: Wake = field(default_factory=Wake)
    used: float = 0.0
    """When a request last asked for this session (a stand-in's closes after `IDLE_CLOSE` without one)."""

    def close(self) -> None:
        self.closed.set()
        self.fresh.set()
        self.wake.set()

    def changed(self, family: str) -> None:
        self.stale.add(family)
        if self.fresh.is_set():
            self.fresh = anyio.Event()
        self.wake.set()


class ClientSessions:
    def __init__(self, upstream: str, config: Callable[[], UpstreamConfig], cwd: str | None,
                 on_message: Callable[[object, ClientOrigin | None], Awaitable[None]],
                 on_notification: Callable[[str, JSONObject, ClientOrigin | None], None],
                 tls: TlsContexts | None = None,
                 credentials: Credentials | None = None,
                 shared: Callable[[], ChildOutput] = lambda: ChildOutput("")) -> None:
        self._upstream = upstream
        self._shared = shared
        """The shared session's child record: its mask (the config's secrets) and process group record serve a
        client's own child as they serve the shared one."""
        self._tls = tls
        self._credentials = credentials
        self._on_notification = on_notification
        self._on_message = on_message
        """What the upstream says on a client's session besides logs (list changes, resource updates) concerns
        the upstream as a whole: it goes where the shared session's messages go."""
        self._config = config
        self._cwd = cwd
        self._links: dict[ClientOrigin, ClientLink] = {}
        self._subscribed: weakref.WeakKeyDictionary[ClientOrigin, set[str]] = weakref.WeakKeyDictionary()
        """The raw URIs each client subscribed to on its own session: asked again of a session opened anew (the
        upstream restarted, or a reload replaced its connection settings), as the shared session's are."""
        self._watched: weakref.WeakSet[ClientOrigin] = weakref.WeakSet()
        """Downstream sessions whose end closes their upstream session: told once each, however often their
        upstream session is opened anew."""
        self._task_group: TaskGroup | None = None
        self._stand_ins = StandIns(upstream)
        self._learned: dict[str, OwnLists] = {}
        """Lists by declared capabilities (names, no session resources), as a client session declaring them listed:
        a client with no session yet sees what its own would list without opening one (`catalog_changed` drops
        them)."""

    def __len__(self) -> int:
        return len(self._links)

    async def run(self, *, task_status: TaskStatus[None] = anyio.TASK_STATUS_IGNORED) -> None:
        """Own the client sessions of one upstream; they all end when it is stopped."""
        try:
            async with anyio.create_task_group() as tg:
                self._task_group = tg
                task_status.started()
                await anyio.sleep_forever()
        finally:
            self._task_group = None
            self._links.clear()

    async def channel_for(self, origin: ClientOrigin) -> SessionChannel:
        """The client's upstream session (opened now if it has none)."""
        link = self._links.get(origin)
        if link is not None and link.closed.is_set():  # its transport ended: never send on it
            self.forget(origin)
            link = None
        if link is None:
            config = self._config()
            if self._task_group is None:
                raise UpstreamUnavailable(self._upstream, f"upstream {self._upstream!r} is not connected")
            self._make_room(origin, config.max_sessions)
            # a stand-in's session relays as a shared one does: its caller's requests may be in flight at once
            link = self._links[origin] = ClientLink(origin, InFlight(self._upstream, origin.back))
            if origin not in self._watched:
                self._watched.add(origin)
                origin.on_close(lambda: self._close(origin))
            self._task_group.start_soon(self._own, link, name=f"client-session:{self._upstream}")
        link.used = anyio.current_time()
        timeout = self._config().connect_timeout
        if not link.opened.is_set():  # no cancel scope once open: this runs on every call
            with anyio.move_on_after(timeout):
                await link.opened.wait()
            if not link.opened.is_set() and link.asking:  # a person is authorizing: wait for them
                with anyio.move_on_after(AUTHORIZATION_WAIT):
                    await link.opened.wait()
        if link.channel is None:
            if self._links.get(origin) is link:
                del self._links[origin]
            if not link.opened.is_set():
                link.close()  # its owner task closes it as soon as it opens: nobody else would
                raise UpstreamTimeout(self._upstream, f"upstream {self._upstream!r} did not open a session for "
                                      f"this client within {timeout:g}s")
            reason = describe_failure(link.failure) if link.failure is not None else "it closed"
            raise UpstreamUnavailable(self._upstream, f"upstream {self._upstream!r} refused a session for this "
                                      f"client: {reason}")
        return link.channel

    def _make_room(self, origin: ClientOrigin, most: int) -> None:
        """Close an idle session if `origin`'s new one needs the room (`consumers._slots`)."""
        slots = [Slot(found, link.used, link.opened.is_set() and link.channel is not None and not link.relays.calls)
                 for found, link in self._links.items()]
        victim = room_for(self._upstream, origin, slots, most)
        if victim is not None:
            self.forget(victim)

    def slots(self) -> dict[str, int]:
        """Sessions open by identity class, for metrics (`consumers._slots.holders`)."""
        return holders(self._links)

    def routed(self, modern: bool) -> bool:
        """Each downstream session with a way back gets an upstream session of its own: `sessions: per_client`, on
        an upstream that does not speak 2026-07-28 (`modern`: there every request stands alone)."""
        return self._config().session_mode == "per_client" and not modern

    def route(self, client: ClientOrigin | None, modern: bool) -> ClientOrigin | None:
        """The downstream session whose own upstream session `client`'s requests go on: its own, or for a caller
        with no way back (a 2026-07-28 request) the stand-in bound to who it is and what it declared
        (`consumers._stand_ins`); None: they go on the shared one."""
        if client is None or not self.routed(modern):
            return None
        return client if client.back is not None else self.stand_in(client)

    def stand_in(self, client: ClientOrigin) -> ClientOrigin | None:
        """The stand-in of a caller with no way back (`consumers._stand_ins`); None when it cannot be named."""
        return self._stand_ins.of(client, _declarable(client.declared), lambda stand_in: stand_in in self._links)

    def subscribed(self, origin: ClientOrigin, raw: str, on: bool) -> None:
        """`origin`'s own session holds (`on`) or no longer holds a subscription to `raw`."""
        if on:
            self._subscribed.setdefault(origin, set()).add(raw)
        else:
            self._subscribed.get(origin, set()).discard(raw)

    def adopt_subscriptions(self, old: ClientSessions) -> None:
        for origin, raws in old._subscribed.items():
            self._subscribed.setdefault(origin, set()).update(raws)

    async def _resubscribe(self, origin: ClientOrigin, session: ClientSession) -> None:
        for raw in sorted(self._subscribed.get(origin, ())):
            try:
                await session.subscribe_resource(raw)
            except Exception as exc:  # that subscription only: the session serves the rest
                logger.warning("upstream %s: a client's subscription to %s could not be renewed: %s",
                               self._upstream, raw, describe_failure(exc))

    def forget(self, origin: ClientOrigin) -> None:
        """The client's session is gone (its upstream lost it): the next request opens a new one."""
        link = self._links.pop(origin, None)
        if link is not None:
            link.close()

    def known_lists(self, origin: ClientOrigin) -> OwnLists | None:
        """What the client's own session lists, if known without opening one: its open session's lists, or
        those of a session that declared the same capabilities."""
        link = self._links.get(origin)
        if link is not None and link.lists is not None and not link.closed.is_set():
            return link.lists if link.fresh.is_set() else None
        return self._learned.get(_signature(origin))

    async def lists_for(self, origin: ClientOrigin) -> OwnLists:
        """What the client's own session lists: known, or listed by opening its session now."""
        if (known := self.known_lists(origin)) is not None:
            return known
        link = self._links.get(origin)
        if link is not None and link.lists is not None and not link.closed.is_set():  # being listed again
            with anyio.move_on_after(self._config().timeout):
                await link.fresh.wait()
            return link.lists
        await self.channel_for(origin)
        link = self._links.get(origin)
        if link is None or link.lists is None:
            raise UpstreamUnavailable(self._upstream, f"upstream {self._upstream!r} closed this client's session")
        return link.lists

    def _learn(self, origin: ClientOrigin, lists: OwnLists) -> None:
        if len(self._learned) >= MAX_LEARNED:
            self._learned.clear()
        self._learned[_signature(origin)] = lists.learned()

    def catalog_changed(self, before: Catalog | None, after: Catalog) -> None:
        """The upstream's catalog was listed (again): what sessions listed before may be out of date. Where its
        tools or resources changed, every client's session lists again too: a server may tell only the session
        that made a change of its tools, and each client sees what its own session lists."""
        self._learned.clear()
        if before is None or own_families(before) != own_families(after):
            for link in self._links.values():
                link.changed("tools")

    async def roots_changed(self, origin: ClientOrigin) -> None:
        """The client said its roots changed: tell its own upstream session, if it has one."""
        link = self._links.get(origin)
        if link is not None and link.channel is not None:
            await link.channel.notify(types.RootsListChangedNotification())

    async def _close(self, origin: ClientOrigin) -> None:
        self.forget(origin)

    def _credential(self, config: UpstreamConfig, link: ClientLink) -> CredentialUse:
        """With `auth: per_user`, the session opens with its user's own credential, asked of the user's client."""
        if config.auth is None or config.auth.mode != "per_user":
            return CredentialUse(self._credentials)
        if link.origin.user is None:
            raise UpstreamAuthorizationRequired(self._upstream, f"upstream {self._upstream!r} is per-user, and this "
                                                "session's caller is not known")
        ask = link_asker(link.origin.back)
        if ask is None:
            return CredentialUse(self._credentials, link.origin.user)

        async def patient(url: str) -> None:
            """A person's authorization is not the upstream's slowness: the opening gets their time too."""
            link.asking = True
            if link.opening is not None:
                link.opening.deadline = anyio.current_time() + AUTHORIZATION_WAIT + config.connect_timeout
            await ask(url)

        return CredentialUse(self._credentials, link.origin.user, patient)

    async def _own(self, link: ClientLink) -> None:
        """Open the client's session, serve until closed, close it: all in this one task (`open_session`)."""
        CURRENT_DOWNSTREAM.set(None)  # this task's context was copied from the request that opened it
        config = self._config()
        started = anyio.current_time()

        # A list change on this session re-lists it for this client; it goes on where the shared session's
        # messages go as well, since a server may tell only the session that made a change that concerns all.
        # It carries the client's origin: a task status belongs to a task of this client's own session.
        def on_notification(method: str, params: JSONObject) -> None:
            if method in OWN_LISTS:
                link.changed(OWN_LISTS[method])
            self._on_notification(method, params, link.origin)

        async def on_message(message: object) -> None:
            found = getattr(message, "root", message)
            if isinstance(found, types.Notification) and found.method in OWN_LISTS:
                link.changed(OWN_LISTS[found.method])
            await self._on_message(message, link.origin)
        try:
            link.opening = anyio.CancelScope()
            async with open_session(self._upstream, config, self._cwd, Declaration.of_client(_declared(link.origin)),
                                    self._list_first, relays=link.relays, on_message=on_message,
                                    on_notification=on_notification, auth=self._credential(config, link),
                                    tls=self._tls, opening=link.opening,
                                    output=ChildOutput(self._upstream, self._shared().mask,
                                                       self._shared().groups)) as opened:
                link.lists = opened.lists
                link.fresh.set()
                self._learn(link.origin, link.lists)
                link.channel = opened.channel
                await self._resubscribe(link.origin, opened.channel.session)
                link.opened.set()
                logger.info("upstream %s: a client session opened (%d open)", self._upstream, len(self._links),
                            extra=log_fields(self._upstream, "session_opened", session=link.origin,
                                             seconds=anyio.current_time() - started))
                try:  # the upstream ending it closes the link: the next request opens anew
                    await self._serve(link, opened)
                finally:
                    link.channel = None
        except Exception as exc:  # this client's session only; the upstream and other clients go on
            link.failure = exc
            if link.opened.is_set():
                logger.info("upstream %s: a client session ended: %s", self._upstream, describe_failure(exc),
                            extra=log_fields(self._upstream, "session_ended", session=link.origin,
                                             seconds=anyio.current_time() - started))
        finally:
            link.opened.set()  # a request waiting for a session that failed to open learns it now
            if self._links.get(link.origin) is link:
                del self._links[link.origin]

    async def _list_first(self, channel: SessionChannel, handshake: Handshake) -> OwnLists:
        # A server may tell only the session that made a change (a list_changed after a call): the client's first
        # request waits until that session's own stream is answered.
        with anyio.move_on_after(LISTEN_WAIT):
            await channel.listening()
        return await list_own(self._upstream, channel.session, offered(handshake))

    async def _serve(self, link: ClientLink, opened: OpenSession[OwnLists]) -> None:
        """Serve the client's open session until it is closed, idles out (a stand-in's) or the upstream ends it."""
        idle = IDLE_CLOSE if isinstance(link.origin, StandIn) else math.inf

        async def step(_quiet: bool) -> bool:
            if link.closed.is_set():
                return False
            if anyio.current_time() - link.used >= idle and not link.relays.calls:
                link.close()  # a stand-in nobody used for a while: the next request opens anew
                logger.info("upstream %s: a client session closed after %gs without requests", self._upstream, idle,
                            extra=log_fields(self._upstream, "session_idle", session=link.origin))
                return False
            if link.stale:
                await self._relist(link, opened.channel.session, offered(opened.handshake))
            return True

        await serve_session(opened.channel, link.wake, idle, step, on_eof=link.close)

    async def _relist(self, link: ClientLink, session: ClientSession, offered: Mapping[str, JSON]) -> None:
        """Re-list after the upstream said a list changed on this client's session, and tell that client (only)
        which of its lists changed."""
        link.stale.clear()
        before = link.lists
        try:
            with anyio.fail_after(self._config().timeout):
                now = link.lists = await list_own(self._upstream, session, offered)
        except Exception as exc:  # the old lists stand; the next change tries again
            link.fresh.set()
            logger.warning("upstream %s: re-listing a client session failed: %s", self._upstream,
                           describe_failure(exc),
                           extra=log_fields(self._upstream, "relist_failed", session=link.origin))
            return
        if not link.stale:  # else another change came meanwhile: the next re-list makes them fresh
            link.fresh.set()
        self._learn(link.origin, now)
        back = link.origin.back
        if before is None or not isinstance(back, ListsChanged):
            return
        resources = (before.resources_key, before.templates) != (now.resources_key, now.templates)
        changed = [family for family, differs in (("tools", before.tools != now.tools), ("resources", resources),
                                                   ("prompts", before.prompts != now.prompts)) if differs]
        for family in changed:
            with anyio.move_on_after(CLOSE_TIMEOUT):
                await back.lists_changed(family)


def _declared(origin: ClientOrigin) -> JSONObject:
    """The capabilities a client's own upstream session declares: those of `DECLARED` the client declared."""
    return _declarable(origin.back.capabilities if origin.back is not None else origin.declared)


def _declarable(capabilities: Mapping[str, JSON] | None) -> JSONObject:
    return {name: capabilities[name] for name in DECLARED if name in capabilities} if capabilities else {}


def _signature(origin: ClientOrigin) -> str:
    return json.dumps(_declared(origin), sort_keys=True, default=str)
