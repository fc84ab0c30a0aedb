"""One upstream MCP server: its owner task, its state, its catalog, and the requests sent to it.

Ownership: the pool creates an `Upstream` and runs `Upstream.run()` as one task in the daemon's task group. That
task alone opens and closes the shared session (`consumers._session_open.open_session`; anyio requires the entering
task to exit), reconnects with exponential backoff and jitter after a failure, and re-lists the catalog when the
upstream says a list changed. Other tasks only call `request()`, which uses the live session (or the client's own,
`consumers.per_client`, picked by `ClientSessions.route`) and maps every failure to an `UpstreamError` naming the
upstream (one request under its deadline: `consumers._deadline`). Its states and calls in flight:
`consumers.lifecycle`.
"""

from __future__ import annotations

import logging
from collections.abc import Callable

import anyio
import mcp_types as types
from anyio.abc import TaskGroup, TaskStatus
from mcp import ClientSession
from mcp_types.version import MODERN_PROTOCOL_VERSIONS

from consumers._breaker import CircuitBreaker
from consumers._deadline import send_within_deadline
from consumers._errors import UpstreamConnectionFailed, UpstreamSessionGone, describe_failure
from consumers._health import probe
from consumers._json import JSONObject
from consumers._session_loop import Wake, serve_session
from consumers._session_open import Declaration, Handshake, open_session
from consumers.channel import TASK_STATUS, SessionChannel
from consumers.child_groups import ChildGroups
from consumers.child_process import ChildOutput
from consumers.config import UpstreamConfig
from consumers.errors import UpstreamAuthorizationRequired, UpstreamRefused, UpstreamUnavailable
from consumers.lifecycle import CallsInFlight, Reconnects, UpstreamState, check_transition
from consumers.listing import Catalog, list_catalog
from consumers.log_fields import log_fields
from consumers.masking import SecretMask
from consumers.modern import ModernLink
from consumers.oauth import Credentials, CredentialUse
from consumers.own_lists import OwnLists
from consumers.per_client import ClientSessions
from consumers.relay import ClientOrigin, InFlight, ProgressFn, UpstreamRequest
from consumers.subscriptions import Subscriptions
from consumers.transports import TlsContext, TlsContexts

logger = logging.getLogger("triad.upstream")

PING_TIMEOUT = 10.0


class Upstream:
    def __init__(self, name: str, config: UpstreamConfig, cwd: str | None,
                 on_change: Callable[[Upstream], None],
                 on_updated: Callable[[str, str], None] = lambda _upstream, _uri: None,
                 tls: TlsContexts | None = None, mask: SecretMask | None = None,
                 groups: ChildGroups | None = None) -> None:
        self.name = name
        self.tls = tls or TlsContext()
        """The TLS contexts for HTTPS (the pool shares them among its upstreams)."""
        self.credentials = Credentials(name)
        """OAuth token sources (`auth`), shared by every connection to this upstream, client sessions included."""
        self.config = config
        """Replaced in place by a reload that keeps the connection (timeouts, tool filters)."""
        self.cwd = cwd
        self._on_change = on_change
        self.state = UpstreamState.STARTING
        self.reason = "connecting"
        self.catalog: Catalog | None = None
        """The last catalog listed; kept while down so names stay stable and tools can be shown as hidden."""
        self.child = ChildOutput(name, mask, groups)
        """A stdio child's last stderr lines and exit code, shown with the state (empty for HTTP upstreams)."""
        self.settled = anyio.Event()
        """Set once the first connection attempt has succeeded or failed (what `triad plan` waits for)."""
        self._channel: SessionChannel | None = None
        """The live shared session."""
        self._wake = Wake()
        self._reconnects = Reconnects()
        self._relist = False
        self._suspect = False
        self._stopping = False
        self._calls = CallsInFlight(name)
        self._new_session = anyio.Event()
        """Set (and replaced) whenever the session changes, so a retried call can wait for the next one."""
        self._breaker = CircuitBreaker(config.circuit_breaker.failures, config.circuit_breaker.cooldown)
        self._relays = InFlight(name)
        self._on_updated = on_updated
        """Told (upstream name, raw URI) when a subscribed resource changed."""
        self.on_task_status: Callable[[str, JSONObject, ClientOrigin | None], None] = \
            lambda _upstream, _params, _origin: None
        """Told (upstream, params) of each `notifications/tasks/status` the upstream pushes on any of its sessions
        (2025-11-25 tasks; the pool sets it)."""
        self.on_own_updated: Callable[[str, str, ClientOrigin], None] = lambda _upstream, _uri, _origin: None
        """Told (upstream, raw URI, the client) when a client's own upstream session (`sessions: per_client`) says
        a resource changed: that client's subscription, nobody else's (the pool sets it)."""
        self._clients = ClientSessions(name, lambda: self.config, cwd, self._on_message,
                                       self._on_notification, self.tls, self.credentials, lambda: self.child)
        """With `sessions: per_client`: each downstream session's own upstream session."""
        self._modern = ModernLink(name, self.request_relist, on_updated, lambda: self.subscriptions.uris())
        self.subscriptions = Subscriptions(name, self.request, lambda: self.modern, self._modern)

    def __repr__(self) -> str:
        return f"Upstream({self.name!r}, {self.config.kind}, {self.state.value})"

    # -- owner task ---------------------------------------------------------------------------------------------

    async def run(self, *, task_status: TaskStatus[None] = anyio.TASK_STATUS_IGNORED) -> None:
        """Connect, serve, reconnect; until `stop()` or cancellation. Never raises for an upstream failure.
        Per-client upstream sessions live in a task group of this task, across reconnects of the shared one.
        Started (`task_status`) once it takes requests: they fail as "not connected" until the first connection."""
        async with anyio.create_task_group() as tg:
            await tg.start(self._clients.run)
            task_status.started()
            await self._keep_connected()
            tg.cancel_scope.cancel()

    async def _keep_connected(self) -> None:
        while not self._stopping:
            try:
                await self._connect_and_serve()
                self._reconnects.served()
            except Exception as exc:  # one upstream's failure must never reach the daemon's task group
                reason = describe_failure(exc)
                if self.config.kind == "stdio" and reason == "Connection closed":
                    reason = "the process exited before it finished starting"
                self._set_state(UpstreamState.DOWN, self.child.explain(reason))
                logger.warning("upstream %s is down: %s", self.name, self.reason, extra=log_fields(self.name, "down"))
            finally:
                self._set_channel(None)
            self.settled.set()
            if self._stopping:
                break
            if self.state is UpstreamState.READY:
                self._set_state(UpstreamState.DOWN, self.child.explain("connection closed"))
                logger.warning("upstream %s closed its connection; reconnecting: %s", self.name, self.reason,
                               extra=log_fields(self.name, "closed"))
            await self._reconnects.wait(self._wake.wait_for)

    def stop(self) -> None:
        self._stopping = True
        self._wake.set()

    async def retire(self, reason: str, grace: float) -> None:
        """Take no new calls, let in-flight ones finish (at most `grace` seconds), answer the rest with an error
        naming `reason`, then close.

        Called by the pool, in a task of its own, when a reload removes or replaces this upstream, or when Triad
        shuts down."""
        await self._calls.retire(reason, grace)
        self.stop()

    def _set_channel(self, channel: SessionChannel | None) -> None:
        self._channel = channel
        if channel is not None:
            self._breaker.record(True, anyio.current_time())  # a new connection starts with a closed circuit
        self._new_session.set()
        self._new_session = anyio.Event()

    def _suspect_connection(self) -> None:
        self._suspect = True
        self._wake.set()

    def request_relist(self) -> None:
        self._relist = True
        self._wake.set()

    async def _connect_and_serve(self) -> None:
        discover = self._modern.stamp_for_callers if self.config.protocol == "auto" else None
        async with open_session(self.name, self.config, self.cwd, Declaration.shared(self.config), self._list_first,
                                relays=self._relays, on_message=self._on_message,
                                on_notification=self._on_notification, auth=CredentialUse(self.credentials),
                                tls=self.tls, output=self.child, discover=discover) as opened:
            channel, catalog = opened.channel, opened.lists
            self._clients.catalog_changed(self.catalog, catalog)
            self.catalog = catalog
            self._set_channel(channel)
            self._set_state(UpstreamState.READY, "")
            self.settled.set()
            logger.info("upstream %s ready: %d tools, %d resources, %d prompts (%s)", self.name,
                        len(catalog.tools), len(catalog.resources), len(catalog.prompts), catalog.protocol_version,
                        extra=log_fields(self.name, "ready", seconds=anyio.current_time() - opened.started))
            async with anyio.create_task_group() as tg:
                if self.modern:
                    tg.start_soon(self._modern.listen, channel.session, catalog.capabilities)
                elif self.subscriptions.uris():
                    tg.start_soon(self.subscriptions.renew, channel.session)
                await self._serve(channel)
                tg.cancel_scope.cancel()

    async def _list_first(self, channel: SessionChannel, handshake: Handshake) -> Catalog:
        return await list_catalog(self.name, channel.session, handshake, None, self._modern.checked_tools)

    @property
    def modern(self) -> bool:
        """The live connection speaks 2026-07-28 (no handshake, no server->client requests, `input_required`)."""
        return self.catalog is not None and self.catalog.protocol_version in MODERN_PROTOCOL_VERSIONS

    # -- resource subscriptions (of downstream clients, one upstream subscription per URI) ----------------------

    def take_subscriptions(self, old: Upstream, task_group: TaskGroup) -> None:
        """This connection replaces `old` (a reload): its clients' resource subscriptions come along, those made on
        clients' own sessions too (asked of each as it opens on the new connection)."""
        self._clients.adopt_subscriptions(old._clients)
        if self.subscriptions.adopt(old.subscriptions) and self._channel is not None:
            task_group.start_soon(self.subscriptions.renew, self._channel.session, name=f"renew:{self.name}")

    async def _serve(self, channel: SessionChannel) -> None:
        """Wait for work: a re-list, a suspected connection, a stop, the stream's end, or a quiet interval."""
        session = channel.session

        async def step(quiet: bool) -> bool:
            if self._stopping:
                return False
            if quiet or self._suspect:
                self._suspect = False
                await self._ping(session)
            if self._relist:
                self._relist = False
                assert self.catalog is not None
                before = self.catalog
                with anyio.fail_after(self.config.connect_timeout):
                    self.catalog = await list_catalog(self.name, session, None, self.catalog,
                                                      self._modern.checked_tools)
                self._clients.catalog_changed(before, self.catalog)
                logger.info("upstream %s re-listed: %d tools", self.name, len(self.catalog.tools),
                            extra=log_fields(self.name, "relisted"))
                self._on_change(self)
            return True

        if not self._stopping:
            await serve_session(channel, self._wake, self.config.ping_interval, step)

    async def _ping(self, session: ClientSession) -> None:
        version = self.catalog.protocol_version if self.modern and self.catalog is not None else None
        await probe(self.name, session, version, min(self.config.timeout, PING_TIMEOUT))

    def _on_notification(self, method: str, params: JSONObject, origin: ClientOrigin | None = None) -> None:
        """A notification not about a call in flight, from the SDK's session or a direct-path reply (`origin`: the
        downstream session whose own upstream session it came on; None: the shared one)."""
        if method == TASK_STATUS:
            self.on_task_status(self.name, params, origin)
        elif method in ("notifications/tools/list_changed", "notifications/resources/list_changed",
                      "notifications/prompts/list_changed"):
            self.request_relist()
        elif method == "notifications/resources/updated" and isinstance(params.get("uri"), str):
            if origin is not None and self.own_session(origin) is not None:  # not a shared mode's stand-in
                self.on_own_updated(self.name, params["uri"], origin)
            else:
                self._on_updated(self.name, params["uri"])

    async def _on_message(self, message: object, origin: ClientOrigin | None = None) -> None:
        message = getattr(message, "root", message)
        if isinstance(message, types.Notification):
            params = message.params.model_dump(by_alias=True, mode="json", exclude_none=True) if message.params else {}
            self._on_notification(message.method, params, origin)
        elif isinstance(message, Exception):
            logger.warning("upstream %s transport error: %s", self.name, describe_failure(message))

    def down(self) -> UpstreamUnavailable:
        """The error for a call while this upstream is not connected: that it is down, why, and its next try."""
        return self._reconnects.down(self.name, self.state, self.reason)

    def _set_state(self, state: UpstreamState, reason: str) -> None:
        check_transition(self.name, self.state, state)
        reason = self.child.mask(reason)  # what /readyz, the log and `triad plan` show: never a secret
        changed = (state, reason) != (self.state, self.reason)
        self.state, self.reason = state, reason
        if changed:
            self._on_change(self)

    # -- per-client sessions (`consumers.per_client`, composed: `_clients`) --------------------------------------

    @property
    def per_client(self) -> bool:
        """Each downstream session with a way back gets an upstream session of its own (`sessions: per_client`)."""
        return self._clients.routed(self.modern)

    def own_subscribed(self, client: ClientOrigin, raw: str, on: bool) -> None:
        """`client`'s own session now holds (`on`) or no longer holds a subscription to `raw` (renewed with it)."""
        if (own := self.own_session(client)) is not None:
            self._clients.subscribed(own, raw, on)

    def own_session(self, client: ClientOrigin | None) -> ClientOrigin | None:
        """The downstream session whose own upstream session `client`'s requests go on (`ClientSessions.route`)."""
        return self._clients.route(client, self.modern)

    def known_lists(self, client: ClientOrigin) -> OwnLists | None:
        """What `client`'s own session lists (`sessions: per_client`), if known without opening one."""
        return self._clients.known_lists(self.own_session(client) or client)

    async def own_lists(self, client: ClientOrigin) -> OwnLists:
        """What `client`'s own session lists, opening it if need be; an `UpstreamError` if it cannot be opened."""
        return await self._clients.lists_for(self.own_session(client) or client)

    async def roots_changed(self, client: ClientOrigin) -> None:
        """A client's roots changed: its own upstream session is told (a shared one never had them)."""
        await self._clients.roots_changed(client)

    @property
    def client_sessions(self) -> int:
        """How many per-client upstream sessions are open."""
        return len(self._clients)

    def client_slots(self) -> dict[str, int]:
        """Per-client upstream sessions open, by identity class (metrics: `limits.upstream_slots` in use)."""
        return self._clients.slots()

    # -- calls from other tasks ----------------------------------------------------------------------------------

    async def request(self, request: UpstreamRequest, *, progress: ProgressFn | None = None, retry_safe: bool = False,
                      call_limits: tuple[float | None, float | None] = (None, None),
                      client: ClientOrigin | None = None) -> JSONObject:
        """Send one request on the live session and return the raw result dict (no output-schema check).

        The deadline is the upstream's `timeout`, pushed back by each progress notification up to
        `max_call_time`; on expiry the request is cancelled upstream (the SDK sends `notifications/cancelled`).
        When the upstream says the session is gone (an HTTP upstream that restarted), the session is opened anew,
        and a request that is safe to repeat (`retry_safe`), or that the upstream provably never received (it
        answered 404 for the session, or refused the connection), is sent once more on the new session. `call_limits`
        (timeout, max call time) override the upstream's own for this request (the `timeout` hook sets them).
        `client` is the downstream session the request comes from: with `sessions: per_client` the request goes
        on that client's own upstream session (opened at its first request)."""
        wait = self._breaker.admit(anyio.current_time())
        if wait is not None:
            raise UpstreamUnavailable(self.name, f"upstream {self.name!r} is failing: {self._breaker.failures} calls "
                                      f"in a row failed to reach it; the next try is in {wait:.0f}s (circuit breaker)")
        own = self.own_session(client)
        if own is not None and own is not client and isinstance(request, types.CallToolRequest) \
                and request.params.task is not None:
            # A task of a caller with no way back (its stand-in's) is created on the shared session: its later
            # requests (get, result, cancel) and status go there (`gateway.tasks`), and task ids stay unique.
            own = None
        if own is None and self.config.auth is not None and self.config.auth.mode == "per_user":
            raise UpstreamAuthorizationRequired(self.name, f"upstream {self.name!r} is per-user: a request without a "
                                                "session of its own would go out with Triad's credential")
        reached: bool | None = None  # what the outcome says of the connection (None: nothing, as for a timeout)
        channel: SessionChannel | None = None
        try:
            channel = self._channel if own is None else await self._clients.channel_for(own)
            try:
                result = await self._send(channel, request, progress, call_limits)
            except UpstreamSessionGone as exc:
                if not (retry_safe or exc.unsent):
                    raise
                self._count_loss(channel, own)  # the retry's outcome is the verdict on the connection
                if own is not None:
                    self._clients.forget(own)
                else:
                    with anyio.move_on_after(self.config.connect_timeout):
                        while self._channel is channel or self._channel is None:
                            await self._new_session.wait()
                logger.info("upstream %s: retrying %s on a new session%s", self.name, request.method,
                            "" if retry_safe else " (the upstream never received it)",
                            extra=log_fields(self.name, "retry", session=own))
                channel = self._channel if own is None else await self._clients.channel_for(own)
                result = await self._send(channel, request, progress, call_limits)
            reached = True
            return result
        except UpstreamRefused:
            reached = True  # the upstream is alive and answered; the error is its answer
            raise
        except UpstreamSessionGone:
            reached = False if self._count_loss(channel, own) else None
            raise
        except UpstreamConnectionFailed:
            reached = False
            raise
        finally:
            self._record(reached)

    def _count_loss(self, channel: SessionChannel | None, own: ClientOrigin | None) -> bool:
        """Whether a call failing because `channel` went away is a breaker failure: the first such call of that
        session is; the other calls in flight on it are the same event (a crash with five calls in flight is
        one failure, not five), and once a newer shared session is live the restart has answered for the
        connection (its success closed the circuit)."""
        if channel is None or channel.loss_counted:
            return False
        channel.loss_counted = True
        return own is not None or self._channel is None or self._channel is channel

    def _record(self, reached: bool | None) -> None:
        """Tell the breaker what a call's outcome says of the connection (None: nothing, e.g. a timeout)."""
        if reached is None:
            self._breaker.release()
            return
        was_open = self._breaker.is_open
        self._breaker.record(reached, anyio.current_time())
        if self._breaker.is_open and not was_open and self.state is UpstreamState.READY:
            # only a connected upstream becomes degraded; one that is down stays down (and its tools hidden)
            logger.warning("upstream %s: circuit open after %d failed calls; calls fail fast for %gs", self.name,
                           self._breaker.failures, self._breaker.cooldown, extra=log_fields(self.name, "circuit_open"))
            self._set_state(UpstreamState.DEGRADED, f"circuit open after {self._breaker.failures} failed calls")
        elif was_open and not self._breaker.is_open and self.state is UpstreamState.DEGRADED:
            self._set_state(UpstreamState.READY, "")

    async def _send(self, channel: SessionChannel | None, request: UpstreamRequest, progress: ProgressFn | None,
                    call_limits: tuple[float | None, float | None] = (None, None)) -> JSONObject:
        retired = self._calls.retired
        if retired is not None:
            raise UpstreamUnavailable(self.name, f"upstream {self.name!r} was {retired}")
        if channel is None or (channel is self._channel
                               and self.state not in (UpstreamState.READY, UpstreamState.DEGRADED)):
            raise self.down()
        try:
            limits = (call_limits[0] or self.config.timeout, call_limits[1] or self.config.max_call_time)
            return await send_within_deadline(self.name, channel, request, progress, self._calls, limits,
                                              modern=self.modern, http=self.config.kind == "streamable-http")
        except UpstreamConnectionFailed:
            if channel is self._channel:
                self._suspect_connection()  # a client's own session going wrong says nothing of the shared one
            raise
