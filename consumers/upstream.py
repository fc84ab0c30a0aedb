"""One upstream MCP server: its owner task, its state, its catalog, and the requests sent to it.

Ownership: the pool creates an `Upstream` and runs `Upstream.run()` as one task in the daemon's task group. That
task alone enters and exits the transport and the `ClientSession` (anyio requires the entering task to exit),
reconnects with exponential backoff and jitter after a failure, and re-lists the catalog when the upstream says
a list changed. Other tasks only call `request()`, which uses the live session and maps every failure to an
`UpstreamError` naming the upstream.
"""

from __future__ import annotations

import enum
import logging
import math
import random
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

import aiohttp
import anyio
import mcp_types as types
from mcp import ClientSession
from mcp.client.subscriptions import ResourcesListChanged, ResourceUpdated, listen
from mcp.shared.exceptions import MCPError
from mcp.shared.inbound import find_invalid_x_mcp_header, mcp_param_headers, x_mcp_header_map
from mcp_types.version import MODERN_PROTOCOL_VERSIONS
from pydantic import TypeAdapter

from consumers._breaker import CircuitBreaker
from consumers._errors import UpstreamSessionGone, describe_failure, map_mcp_error, session_gone
from consumers._streams import EOFWatch
from consumers.http_hop import HttpHop, SessionGone
from consumers.relay import CURRENT_DOWNSTREAM, Downstream, answer_input_requests
from consumers.transports import open_transport
from gateway.config import UpstreamConfig
from gateway.errors import UpstreamError, UpstreamRefused, UpstreamTimeout, UpstreamUnavailable

logger = logging.getLogger("triad.upstream")

RAW = TypeAdapter(dict[str, Any])
CLIENT_INFO = types.Implementation(name="triad", version="0.1.0")
BACKOFF_START = 0.5
BACKOFF_MAX = 30.0
PING_TIMEOUT = 10.0
MAX_LIST_PAGES = 1000
"""A bound on pages per list, in case an upstream invents a new cursor forever."""
MAX_INPUT_ROUNDS = 10
"""A bound on `input_required` rounds Triad answers for a handshake-era client, in case an upstream asks forever."""
LOG_LEVEL_META_KEY = "io.modelcontextprotocol/logLevel"
CLIENT_CAPABILITIES_META_KEY = "io.modelcontextprotocol/clientCapabilities"

ProgressFn = Callable[[float, float | None, str | None], Awaitable[None]]


class UpstreamState(enum.StrEnum):
    STARTING = "starting"
    READY = "ready"
    DEGRADED = "degraded"
    DOWN = "down"


@dataclass(frozen=True)
class Catalog:
    """What an upstream offers, as raw wire dicts (icons, `_meta`, annotations intact)."""

    tools: tuple[dict[str, Any], ...] = ()
    resources: tuple[dict[str, Any], ...] = ()
    templates: tuple[dict[str, Any], ...] = ()
    prompts: tuple[dict[str, Any], ...] = ()
    capabilities: dict[str, Any] = field(default_factory=dict)
    server_info: dict[str, Any] = field(default_factory=dict)
    protocol_version: str = ""


class Upstream:
    def __init__(self, name: str, config: UpstreamConfig, cwd: str | None,
                 on_change: Callable[[Upstream], None],
                 on_updated: Callable[[str, str], None] = lambda _upstream, _uri: None) -> None:
        self.name = name
        self.config = config
        """Replaced in place by a reload that keeps the connection (timeouts, tool filters)."""
        self.cwd = cwd
        self._on_change = on_change
        self.state = UpstreamState.STARTING
        self.reason = "connecting"
        self.catalog: Catalog | None = None
        """The last catalog listed; kept while down so names stay stable and tools can be shown as hidden."""
        self.settled = anyio.Event()
        """Set once the first connection attempt has succeeded or failed (what `triad plan` waits for)."""
        self._session: ClientSession | None = None
        self._hop: HttpHop | None = None
        """The lean request path of a handshake-era HTTP upstream, on the live session's connection."""
        self._wake = anyio.Event()
        self._relist = False
        self._suspect = False
        self._stopping = False
        self._retired: str | None = None
        self._new_session = anyio.Event()
        """Set (and replaced) whenever the session changes, so a retried call can wait for the next one."""
        self._breaker = CircuitBreaker(config.circuit_breaker.failures, config.circuit_breaker.cooldown)
        self._in_flight = 0
        self._downstreams: dict[int, Downstream] = {}
        """The downstream of each call in flight, for relaying what a stdio or SSE upstream sends back."""
        self._idle = anyio.Event()
        self._idle.set()
        self._on_updated = on_updated
        """Told (upstream name, raw URI) when a subscribed resource changed."""
        self._subscriptions: dict[str, int] = {}
        """Raw URIs clients subscribed to, with how many subscribers each: the upstream is asked once per URI."""
        self._listen_changed = anyio.Event()
        self._header_maps: dict[Any, dict[tuple[str, ...], str]] = {}
        """2026-07-28: per raw tool name, the arguments a `tools/call` mirrors into `Mcp-Param-*` headers."""

    def __repr__(self) -> str:
        return f"Upstream({self.name!r}, {self.config.kind}, {self.state.value})"

    # -- owner task ---------------------------------------------------------------------------------------------

    async def run(self) -> None:
        """Connect, serve, reconnect; until `stop()` or cancellation. Never raises for an upstream failure."""
        backoff = BACKOFF_START
        while not self._stopping:
            try:
                await self._connect_and_serve()
                backoff = BACKOFF_START
            except Exception as exc:  # one upstream's failure must never reach the daemon's task group
                reason = describe_failure(exc)
                if self.config.kind == "stdio" and reason == "Connection closed":
                    reason = "the process exited before it finished starting (its stderr is in Triad's log)"
                self._set_state(UpstreamState.DOWN, reason)
                logger.warning("upstream %s is down: %s", self.name, self.reason)
            finally:
                self._set_session(None)
            self.settled.set()
            if self._stopping:
                break
            if self.state is UpstreamState.READY:
                self._set_state(UpstreamState.DOWN, "connection closed")
                logger.warning("upstream %s closed its connection; reconnecting", self.name)
            with anyio.move_on_after(backoff * (1 + random.random() / 2)):
                await self._wait_wake()
            backoff = min(backoff * 2, BACKOFF_MAX)

    def stop(self) -> None:
        self._stopping = True
        self._wake.set()

    async def retire(self, reason: str, grace: float) -> None:
        """Take no new calls, let in-flight ones finish (at most `grace` seconds), then close.

        Called by the pool, in a task of its own, when a reload removes or replaces this upstream."""
        self._retired = reason
        with anyio.move_on_after(grace):
            await self._idle.wait()
        if self._in_flight:
            logger.warning("upstream %s: %d call(s) still running after the %gs grace period; closing", self.name,
                           self._in_flight, grace)
        self.stop()

    def _set_session(self, session: ClientSession | None) -> None:
        self._session = session
        if session is None:
            self._hop = None
        if session is not None:
            self._breaker.record(True, anyio.current_time())  # a new connection starts with a closed circuit
        self._new_session.set()
        self._new_session = anyio.Event()

    def _suspect_connection(self) -> None:
        self._suspect = True
        self._wake.set()

    def request_relist(self) -> None:
        self._relist = True
        self._wake.set()

    async def _wait_wake(self) -> None:
        await self._wake.wait()
        self._wake = anyio.Event()

    async def _connect_and_serve(self) -> None:
        with anyio.CancelScope() as connect_scope:
            connect_scope.deadline = anyio.current_time() + self.config.timeout
            async with open_transport(self.name, self.config, self.cwd) as (read, write, link):
                watch = EOFWatch(read)
                async with ClientSession(watch, write, client_info=CLIENT_INFO, message_handler=self._on_message,
                                         logging_callback=self._on_log, sampling_callback=self._on_sampling,
                                         elicitation_callback=self._on_elicitation,
                                         list_roots_callback=self._on_list_roots) as session:
                    init = await self._negotiate(session)
                    catalog = await self._list_catalog(session, init)
                    connect_scope.deadline = math.inf  # connected: from here on only calls have deadlines
                    self.catalog = catalog
                    self._hop = HttpHop(link, catalog.protocol_version, self._on_wire_notification) \
                        if link is not None and not self.modern else None
                    self._set_session(session)
                    self._set_state(UpstreamState.READY, "")
                    self.settled.set()
                    logger.info("upstream %s ready: %d tools, %d resources, %d prompts (%s)", self.name,
                                len(catalog.tools), len(catalog.resources), len(catalog.prompts),
                                catalog.protocol_version)
                    async with anyio.create_task_group() as tg:
                        if self.modern:
                            tg.start_soon(self._listen, session, catalog.capabilities)
                        elif self._subscriptions:
                            tg.start_soon(self._resubscribe, session)
                        await self._serve(session, watch)
                        tg.cancel_scope.cancel()
        if connect_scope.cancelled_caught:
            raise UpstreamTimeout(self.name, f"did not finish initialize and listing within {self.config.timeout:g}s")

    @property
    def modern(self) -> bool:
        """The live connection speaks 2026-07-28 (no handshake, no server->client requests, `input_required`)."""
        return self.catalog is not None and self.catalog.protocol_version in MODERN_PROTOCOL_VERSIONS

    async def _negotiate(self, session: ClientSession) -> types.InitializeResult | types.DiscoverResult:
        """`initialize`; or with `protocol: auto`, `server/discover` first, and `initialize` where it is refused."""
        if self.config.protocol == "auto":
            try:
                found = await session.discover()
            except MCPError as exc:
                logger.debug("upstream %s: server/discover refused (%s); using initialize", self.name, exc)
            else:
                self._stamp_for_callers(session)
                return found
        return await session.initialize()

    def _stamp_for_callers(self, session: ClientSession) -> None:
        """On 2026-07-28 every request declares the client's capabilities, and a `tools/call` mirrors arguments
        marked `x-mcp-header` into `Mcp-Param-*` headers. Triad can only relay what the client it forwards for can
        do, so that client's declaration replaces Triad's (Triad's own requests, such as lists, keep Triad's); and
        it mirrors headers from the schemas it listed (the SDK learns them only through its typed `list_tools`).
        The SDK (pinned to 2.3.x) stamps requests in `_stamp`, set by `discover()`, with no public hook: this
        wraps it."""
        stamp = session._stamp

        def stamp_for_caller(data: dict[str, Any], options: Any) -> None:
            stamp(data, options)
            params = data.get("params") or {}
            downstream = CURRENT_DOWNSTREAM.get()
            if downstream is not None and downstream.capabilities is not None:
                params["_meta"][CLIENT_CAPABILITIES_META_KEY] = downstream.capabilities
            header_map = self._header_maps.get(params.get("name")) if data["method"] == "tools/call" else None
            if header_map:
                options.setdefault("headers", {}).update(mcp_param_headers(header_map, params.get("arguments") or {}))

        session._stamp = stamp_for_caller

    def _checked_tools(self, tools: tuple[dict[str, Any], ...], version: str) -> tuple[dict[str, Any], ...]:
        """2026-07-28: a tool whose `x-mcp-header` marks are invalid is dropped (clients MUST), the others' marks
        are remembered for `tools/call` headers."""
        if version not in MODERN_PROTOCOL_VERSIONS:
            return tools
        kept, maps = [], {}
        for tool in tools:
            schema = tool.get("inputSchema")
            if (reason := find_invalid_x_mcp_header(schema)) is not None:
                logger.warning("upstream %s: tool %r dropped: invalid x-mcp-header (%s)", self.name,
                               tool.get("name"), reason)
                continue
            if header_map := x_mcp_header_map(schema):
                maps[tool.get("name")] = header_map
            kept.append(tool)
        self._header_maps = maps
        return tuple(kept)

    async def _listen(self, session: ClientSession, capabilities: dict[str, Any]) -> None:
        """A 2026-07-28 upstream announces changes only on a `subscriptions/listen` stream; it is opened again
        whenever the set of subscribed resources changes."""
        while True:
            changed = self._listen_changed = anyio.Event()
            async with anyio.create_task_group() as tg:
                tg.start_soon(self._listen_once, session, capabilities, tuple(self._subscriptions))
                await changed.wait()
                tg.cancel_scope.cancel()

    async def _listen_once(self, session: ClientSession, capabilities: dict[str, Any], uris: tuple[str, ...]) -> None:
        wanted = {f"{family}_list_changed": bool((capabilities.get(family) or {}).get("listChanged"))
                  for family in ("tools", "prompts", "resources")}
        if not any(wanted.values()) and not uris:
            return
        try:
            async with listen(session, **wanted, resource_subscriptions=uris) as subscription:
                async for event in subscription:
                    if isinstance(event, ResourceUpdated):
                        self._on_updated(self.name, event.uri)
                    elif not isinstance(event, ResourcesListChanged) or wanted["resources_list_changed"]:
                        self.request_relist()
        except Exception as exc:  # the upstream still serves calls; only its change notices are lost
            logger.warning("upstream %s: its subscriptions/listen stream failed (%s); changes will not be seen "
                           "until it reconnects or a subscription changes", self.name, describe_failure(exc))

    # -- resource subscriptions (of downstream clients, one upstream subscription per URI) ----------------------

    async def subscribe(self, uri: str) -> None:
        count = self._subscriptions.get(uri, 0)
        self._subscriptions[uri] = count + 1
        if count:
            return
        try:
            await self._subscription_changed(uri, subscribe=True)
        except BaseException:
            self._release(uri)
            raise

    async def unsubscribe(self, uri: str) -> None:
        if self._release(uri):
            await self._subscription_changed(uri, subscribe=False)

    def _release(self, uri: str) -> bool:
        """One subscriber fewer; True when it was the last one."""
        count = self._subscriptions.pop(uri, 0)
        if count > 1:
            self._subscriptions[uri] = count - 1
        return count == 1

    async def _subscription_changed(self, uri: str, *, subscribe: bool) -> None:
        if self.modern:  # subscriptions are part of the listen stream's filter
            self._listen_changed.set()
            return
        params = types.SubscribeRequestParams(uri=uri)
        await self.request(types.SubscribeRequest(params=params) if subscribe
                           else types.UnsubscribeRequest(params=types.UnsubscribeRequestParams(uri=uri)))

    async def _resubscribe(self, session: ClientSession) -> None:
        """A new handshake-era connection knows nothing of earlier subscriptions: ask again for each."""
        for uri in list(self._subscriptions):
            try:
                await session.send_request(types.SubscribeRequest(params=types.SubscribeRequestParams(uri=uri)), RAW)
            except Exception as exc:  # one refused URI must not stop the others
                logger.warning("upstream %s: could not subscribe again to a resource: %s", self.name,
                               describe_failure(exc))

    async def _serve(self, session: ClientSession, watch: EOFWatch) -> None:
        """Wait for work: a re-list, a suspected connection, a stop, the stream's end, or a quiet interval."""
        watch.on_eof = lambda: self._wake.set()  # the event is replaced after each wake-up
        while not self._stopping and not watch.closed:
            with anyio.move_on_after(self.config.ping_interval) as quiet:
                await self._wait_wake()
            if self._stopping or watch.closed:
                break
            if quiet.cancelled_caught or self._suspect:
                self._suspect = False
                await self._ping(session)
            if self._relist:
                self._relist = False
                assert self.catalog is not None
                with anyio.fail_after(self.config.timeout):
                    self.catalog = await self._list_catalog(session, None)
                logger.info("upstream %s re-listed: %d tools", self.name, len(self.catalog.tools))
                self._on_change(self)

    async def _ping(self, session: ClientSession) -> None:
        """An HTTP upstream that went away leaves no trace on an idle session; a ping finds out."""
        try:
            with anyio.fail_after(min(self.config.timeout, PING_TIMEOUT)):
                if self.modern:  # 2026-07-28 has no ping; discovery is as cheap
                    await session.send_discover(self.catalog.protocol_version)  # type: ignore[union-attr]
                else:
                    await session.send_ping()
        except Exception as exc:  # any failure of the ping means the connection is not usable
            raise UpstreamUnavailable(self.name, f"did not answer ping ({describe_failure(exc)})") from None

    async def _list_catalog(self, session: ClientSession,
                            init: types.InitializeResult | types.DiscoverResult | None) -> Catalog:
        if init is None:
            assert self.catalog is not None
            caps, info, version = self.catalog.capabilities, self.catalog.server_info, self.catalog.protocol_version
        else:
            caps = init.capabilities.model_dump(by_alias=True, mode="json", exclude_none=True)
            server_info = session.server_info if isinstance(init, types.DiscoverResult) else init.server_info
            info = server_info.model_dump(by_alias=True, mode="json", exclude_none=True) if server_info else {}
            version = session.protocol_version or ""
        tools = await self._list_all(session, types.ListToolsRequest, "tools") if "tools" in caps else ()
        tools = self._checked_tools(tools, version)
        resources = templates = prompts = ()
        if "resources" in caps:
            resources = await self._list_all(session, types.ListResourcesRequest, "resources")
            templates = await self._list_all(session, types.ListResourceTemplatesRequest, "resourceTemplates")
        if "prompts" in caps:
            prompts = await self._list_all(session, types.ListPromptsRequest, "prompts")
        return Catalog(tools, resources, templates, prompts, caps, info, version)

    async def _list_all(self, session: ClientSession, request_type: Any, key: str) -> tuple[dict[str, Any], ...]:
        """Follow `nextCursor` to the end; a cursor seen before is an error, never an endless loop."""
        items: list[dict[str, Any]] = []
        seen: set[str] = set()
        cursor: str | None = None
        for _ in range(MAX_LIST_PAGES):
            params = types.PaginatedRequestParams(cursor=cursor) if cursor is not None else None
            page = await session.send_request(request_type(params=params), RAW)
            items.extend(page.get(key) or ())
            cursor = page.get("nextCursor")
            if cursor is None:
                return tuple(items)
            if cursor in seen:
                raise UpstreamError(self.name, f"{request_type.model_fields['method'].default}: the upstream "
                                    "repeated a pagination cursor")
            seen.add(cursor)
        raise UpstreamError(self.name, f"more than {MAX_LIST_PAGES} pages of {key}")

    def _on_wire_notification(self, method: str, params: dict[str, Any]) -> None:
        """A notification on a lean-path reply that is not about the call itself."""
        if method in ("notifications/tools/list_changed", "notifications/resources/list_changed",
                      "notifications/prompts/list_changed"):
            self.request_relist()
        elif method == "notifications/resources/updated" and isinstance(params.get("uri"), str):
            self._on_updated(self.name, params["uri"])

    async def _on_message(self, message: Any) -> None:
        if isinstance(message, types.ServerNotification):
            message = message.root if hasattr(message, "root") else message
        if isinstance(message, types.ToolListChangedNotification | types.ResourceListChangedNotification
                      | types.PromptListChangedNotification):
            self.request_relist()
        elif isinstance(message, types.ResourceUpdatedNotification):
            self._on_updated(self.name, str(message.params.uri))
        elif isinstance(message, Exception):
            logger.warning("upstream %s transport error: %s", self.name, describe_failure(message))

    # -- relays to the downstream that caused them (see consumers.relay) --------------------------------------

    def _downstream(self) -> Downstream | None:
        found = CURRENT_DOWNSTREAM.get()
        if found is None and len(self._downstreams) == 1:
            [found] = self._downstreams.values()
        return found

    async def _on_log(self, params: types.LoggingMessageNotificationParams) -> None:
        downstream = self._downstream()
        if downstream is not None:
            await downstream.log(params)

    async def _ask(self, what: str, request: Any, result_type: Any) -> Any:
        downstream = self._downstream()
        if downstream is None:
            why = ("several calls are in flight on it, and its transport does not say which one this is for"
                   if self._downstreams else "no call of a client is in flight on it")
            return types.ErrorData(code=types.INVALID_REQUEST,
                                   message=f"Triad cannot relay {what} from upstream {self.name!r}: {why}")
        return await downstream.ask(request, result_type)

    async def _on_sampling(self, _ctx: Any, params: types.CreateMessageRequestParams) -> Any:
        return await self._ask("sampling/createMessage", types.CreateMessageRequest(params=params),
                               types.CreateMessageResult)

    async def _on_elicitation(self, _ctx: Any, params: Any) -> Any:
        return await self._ask("elicitation/create", types.ElicitRequest(params=params), types.ElicitResult)

    async def _on_list_roots(self, _ctx: Any) -> Any:
        return await self._ask("roots/list", types.ListRootsRequest(), types.ListRootsResult)

    def _set_state(self, state: UpstreamState, reason: str) -> None:
        changed = (state, reason) != (self.state, self.reason)
        self.state, self.reason = state, reason
        if changed:
            self._on_change(self)

    # -- calls from other tasks ----------------------------------------------------------------------------------

    async def request(self, request: Any, *, progress: ProgressFn | None = None, retry_safe: bool = False,
                      call_limits: tuple[float | None, float | None] = (None, None)) -> dict[str, Any]:
        """Send one request on the live session and return the raw result dict (no output-schema check).

        The deadline is the upstream's `timeout`, pushed back by each progress notification up to
        `max_call_time`; on expiry the request is cancelled upstream (the SDK sends `notifications/cancelled`).
        When the upstream says the session is gone (an HTTP upstream that restarted), the session is opened anew,
        and a request that is safe to repeat (`retry_safe`) is sent once more on the new session. `call_limits`
        (timeout, max call time) override the upstream's own for this request (the `timeout` hook sets them)."""
        session = self._session
        wait = self._breaker.admit(anyio.current_time())
        if wait is not None:
            raise UpstreamUnavailable(self.name, f"upstream {self.name!r} is failing: {self._breaker.failures} calls "
                                      f"in a row failed; the next try is in {wait:.0f}s (circuit breaker)")
        try:
            try:
                result = await self._send(session, request, progress, call_limits)
            except UpstreamSessionGone:
                if not retry_safe:
                    raise
                with anyio.move_on_after(self.config.timeout):
                    while self._session is session or self._session is None:
                        await self._new_session.wait()
                logger.info("upstream %s: retrying %s on a new session", self.name, request.method)
                result = await self._send(self._session, request, progress, call_limits)
        except UpstreamRefused:
            self._record(True)  # the upstream is alive and answered; the error is its answer
            raise
        except UpstreamError:
            self._record(False)
            raise
        self._record(True)
        return result

    async def _exchange(self, session: ClientSession, request: Any, on_progress: ProgressFn,
                        downstream: Downstream | None) -> dict[str, Any]:
        """One request and its answer. A 2026-07-28 upstream may answer `input_required`: for a client of the
        handshake era Triad asks it each input request and sends the retry; a 2026-07-28 client gets the
        result and retries itself."""
        if self._hop is not None and session is self._session:
            return await self._hop.request(request, on_progress, downstream)
        result = await session.send_request(request, RAW, progress_callback=on_progress)
        for _ in range(MAX_INPUT_ROUNDS):
            if result.get("resultType") != "input_required" or downstream is None or downstream.modern:
                return result
            answers = await answer_input_requests(self.name, downstream, result.get("inputRequests"))
            request = _with_params(request, {"inputResponses": answers, "requestState": result.get("requestState")})
            result = await session.send_request(request, RAW, progress_callback=on_progress)
        raise UpstreamError(self.name, f"upstream {self.name!r} asked for input more than {MAX_INPUT_ROUNDS} times "
                            f"in one {request.method}")

    def _record(self, ok: bool) -> None:
        was_open = self._breaker.is_open
        self._breaker.record(ok, anyio.current_time())
        if self._breaker.is_open and not was_open and self.state is UpstreamState.READY:
            # only a connected upstream becomes degraded; one that is down stays down (and its tools hidden)
            logger.warning("upstream %s: circuit open after %d failed calls; calls fail fast for %gs", self.name,
                           self._breaker.failures, self._breaker.cooldown)
            self._set_state(UpstreamState.DEGRADED, f"circuit open after {self._breaker.failures} failed calls")
        elif was_open and not self._breaker.is_open and self.state is UpstreamState.DEGRADED:
            self._set_state(UpstreamState.READY, "")

    async def _send(self, session: ClientSession | None, request: Any, progress: ProgressFn | None,
                    call_limits: tuple[float | None, float | None] = (None, None)) -> dict[str, Any]:
        method = request.method
        if self._retired is not None:
            raise UpstreamUnavailable(self.name, f"upstream {self.name!r} was {self._retired}")
        if session is None or self.state not in (UpstreamState.READY, UpstreamState.DEGRADED):
            raise UpstreamUnavailable(self.name, f"upstream {self.name!r} is not connected ({self.reason})")
        timeout = call_limits[0] or self.config.timeout
        cap = call_limits[1] or self.config.max_call_time
        start = anyio.current_time()

        async def on_progress(value: float, total: float | None, message: str | None) -> None:
            scope.deadline = min(anyio.current_time() + timeout, start + max(cap, timeout))
            if progress is not None:
                await progress(value, total, message)

        self._in_flight += 1
        self._idle = anyio.Event() if self._in_flight == 1 else self._idle
        call_key = id(scope := anyio.CancelScope(deadline=start + timeout))
        if (downstream := CURRENT_DOWNSTREAM.get()) is not None:
            self._downstreams[call_key] = downstream
            if self.modern and downstream.log_level is not None:  # 2026-07-28 logs only on a request's opt-in
                request = _with_params(request, {"_meta": {**(request.params.meta or {}),
                                                           LOG_LEVEL_META_KEY: downstream.log_level}})
        try:
            with scope:
                return await self._exchange(session, request, on_progress, downstream)
            raise UpstreamTimeout(self.name, f"upstream {self.name!r} did not answer {method} within "
                                  + (f"{timeout:g}s" if scope.deadline - start <= timeout else
                                     f"{timeout:g}s of its last progress (after {anyio.current_time() - start:.3g}s)"))
        except MCPError as exc:
            if session_gone(exc) and self.config.kind == "streamable-http":
                self._suspect_connection()
                raise UpstreamSessionGone(self.name, f"upstream {self.name!r} lost its session (it restarted?) "
                                          f"during {method}; reconnecting") from None
            if exc.error.code == types.CONNECTION_CLOSED:
                self._suspect_connection()
                if self._retired is not None:
                    raise UpstreamUnavailable(self.name, f"upstream {self.name!r} was {self._retired} and its "
                                              f"grace period ran out during {method}") from None
                raise UpstreamSessionGone(self.name, f"upstream {self.name!r} closed the connection during "
                                          f"{method}") from None
            raise map_mcp_error(self.name, exc) from None
        except aiohttp.ClientError as exc:  # the lean path's connection broke, or the upstream restarted
            self._suspect_connection()
            what = "could not connect" if isinstance(exc, aiohttp.ClientConnectorError) else "the connection broke"
            raise UpstreamSessionGone(self.name, f"upstream {self.name!r} connection failed during {method} "
                                      f"({what})") from None
        except SessionGone:
            self._suspect_connection()
            raise UpstreamSessionGone(self.name, f"upstream {self.name!r} lost its session (it restarted?) "
                                      f"during {method}; reconnecting") from None
        except ValueError:  # pydantic's ValidationError, or JSON that is not a JSON-RPC response
            raise UpstreamError(self.name, f"upstream {self.name!r} sent a malformed {method} result") from None
        except (OSError, anyio.BrokenResourceError, anyio.ClosedResourceError, anyio.EndOfStream) as exc:
            self._suspect_connection()
            raise UpstreamUnavailable(self.name, f"upstream {self.name!r} connection failed during {method}: "
                                      f"{type(exc).__name__}") from None
        finally:
            self._downstreams.pop(call_key, None)
            self._in_flight -= 1
            if not self._in_flight:
                self._idle.set()


def _with_params(request: Any, update: dict[str, Any]) -> Any:
    """The request with wire-spelled params replaced (validated again, so the SDK serialises them as usual)."""
    params = request.params.model_dump(by_alias=True, mode="json", exclude_none=True) if request.params else {}
    return type(request).model_validate({"method": request.method, "params": {**params, **update}}, by_name=False)


def _with_params(request: Any, update: dict[str, Any]) -> Any:
    """The request with wire-spelled params replaced (validated again, so the SDK serialises them as usual)."""
    params = request.params.model_dump(by_alias=True, mode="json", exclude_none=True) if request.params else {}
    return type(request).model_validate({"method": request.method, "params": {**params, **update}}, by_name=False)


def _declare_callers_capabilities(session: ClientSession) -> None:
    """On 2026-07-28 each request declares the client's capabilities. Triad can only relay what the client it
    forwards for can do, so that client's own declaration replaces Triad's (requests of Triad's own, such as
    lists, keep Triad's). The SDK (pinned to 2.3.x) stamps its session-wide declaration in `_stamp`, after
    `discover()`, with no public hook; this wraps it."""
    stamp = session._stamp

    def stamp_for_caller(data: dict[str, Any], options: Any) -> None:
        stamp(data, options)
        downstream = CURRENT_DOWNSTREAM.get()
        if downstream is not None and downstream.capabilities is not None:
            data["params"]["_meta"][CLIENT_CAPABILITIES_META_KEY] = downstream.capabilities

    session._stamp = stamp_for_caller
