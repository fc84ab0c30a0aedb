"""Upstream sessions of one's own for each downstream session (`sessions: per_client`).

Whatever an upstream keeps per session (the client's roots, its log level, its capabilities, sampling and
elicitation, session resources) then belongs to that client alone. A client's session is opened at its first
request routed to the upstream, declares that client's capabilities (sampling, elicitation, roots: only those it
declared to Triad), and relays what the upstream sends on it to that client only: in a call, to the call's
request; outside calls, to the client's session channel (`ClientOrigin.back`). It is closed when the downstream
session ends (or idles out), when the upstream loses it (its next request opens a new one), and when the upstream
is stopped.

Ownership: the upstream's owner task starts `ClientSessions.run()` in a task group of its own, for its whole life
(client sessions outlive reconnects of the shared session); each client session is one task in the group `run()`
owns, started by the first request that needs it, which enters and exits its transport and `ClientSession` itself.
A client session that fails after it started is logged and forgotten, never raised into the group; the next
request of that client opens a new one.
"""

from __future__ import annotations

import logging
import math
import ssl
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import anyio
import mcp_types as types
from anyio.abc import TaskGroup, TaskStatus
from mcp.client.session import MessageHandlerFnT

from consumers._credentials import Credentials, CredentialUse
from consumers._errors import describe_failure
from consumers.channel import SessionChannel, open_channel
from consumers.config import AUTHORIZATION_WAIT, UpstreamConfig
from consumers.errors import UpstreamAuthorizationRequired, UpstreamTimeout, UpstreamUnavailable
from consumers.relay import CURRENT_DOWNSTREAM, ClientOrigin, InFlight

logger = logging.getLogger("triad.upstream")

LISTEN_WAIT = 2.0
"""How long a new client session over streamable HTTP waits for its GET stream before its first request goes."""
CLOSE_TIMEOUT = 5.0
"""How long closing one client's upstream session may take (an HTTP DELETE, a child's exit)."""


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


class ClientSessions:
    def __init__(self, upstream: str, config: Callable[[], UpstreamConfig], cwd: str | None,
                 on_message: MessageHandlerFnT,
                 on_notification: Callable[[str, dict[str, Any]], None],
                 tls: Callable[[], ssl.SSLContext] | None = None,
                 credentials: Credentials | None = None) -> None:
        self._upstream = upstream
        self._tls = tls
        self._credentials = credentials
        self._on_notification = on_notification
        self._on_message = on_message
        """What the upstream says on a client's session besides logs (list changes, resource updates) concerns
        the upstream as a whole: it goes where the shared session's messages go."""
        self._config = config
        self._cwd = cwd
        self._links: dict[ClientOrigin, ClientLink] = {}
        self._task_group: TaskGroup | None = None

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
            if len(self._links) >= config.max_sessions:
                raise UpstreamUnavailable(self._upstream, (
                    f"upstream {self._upstream!r} has {config.max_sessions} client sessions open, its "
                    "max_sessions; one must end before another client can use it"))
            assert origin.back is not None
            link = self._links[origin] = ClientLink(origin, InFlight(self._upstream, origin.back))
            origin.on_close(lambda: self._close(origin))
            self._task_group.start_soon(self._own, link, name=f"client-session:{self._upstream}")
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
                link.closed.set()  # its owner task closes it as soon as it opens: nobody else would
                raise UpstreamTimeout(self._upstream, f"upstream {self._upstream!r} did not open a session for "
                                      f"this client within {timeout:g}s")
            reason = describe_failure(link.failure) if link.failure is not None else "it closed"
            raise UpstreamUnavailable(self._upstream, f"upstream {self._upstream!r} refused a session for this "
                                      f"client: {reason}")
        return link.channel

    def forget(self, origin: ClientOrigin) -> None:
        """The client's session is gone (its upstream lost it): the next request opens a new one."""
        link = self._links.pop(origin, None)
        if link is not None:
            link.closed.set()

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
        from consumers.oauth_client import link_asker  # the SDK's OAuth client: OAuth upstreams only

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
        """Enter the client's transport and session, serve until closed, exit both: all in this one task."""
        CURRENT_DOWNSTREAM.set(None)  # this task's context was copied from the request that opened it
        config = self._config()
        capabilities = (link.origin.back.capabilities if link.origin.back is not None else None) or {}
        try:
            with anyio.CancelScope() as opening:
                opening.deadline = anyio.current_time() + config.connect_timeout
                link.opening = opening
                async with open_channel(self._upstream, config, self._cwd, link.relays, self._on_message,
                                        declare=capabilities.keys(), tls=self._tls,
                                        on_notification=self._on_notification,
                                        auth=self._credential(config, link)) as channel:
                    await channel.session.initialize()
                    channel.use_hop(channel.session.protocol_version or "", self._on_notification)
                    # A server may tell only the session that made a change (a list_changed after a call): the
                    # client's first request waits until that session's own stream is answered.
                    with anyio.move_on_after(LISTEN_WAIT):
                        await channel.listening()
                    channel.watch.on_eof = link.closed.set  # the upstream ended it: the next request opens anew
                    opening.deadline = math.inf
                    link.channel = channel
                    link.opened.set()
                    logger.info("upstream %s: a client session opened (%d open)", self._upstream, len(self._links))
                    try:
                        await link.closed.wait()
                    finally:
                        link.channel = None
            if opening.cancelled_caught:
                link.failure = TimeoutError(f"no answer to initialize within {config.connect_timeout:g}s")
        except Exception as exc:  # this client's session only; the upstream and other clients go on
            link.failure = exc
            if link.opened.is_set():
                logger.info("upstream %s: a client session ended: %s", self._upstream, describe_failure(exc))
        finally:
            link.opened.set()  # a request waiting for a session that failed to open learns it now
            if self._links.get(link.origin) is link:
                del self._links[link.origin]
