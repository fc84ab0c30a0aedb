"""The SDK `Server` Triad exposes, built from the dispatcher's methods (no module-level server).

SDK workarounds (mcp 2.3.0), by overriding public methods (private SDK parts are reached only through
`exposers`):
- `create_initialization_options` is overridden so `listChanged` is advertised over HTTP too (the session manager
  calls it without `NotificationOptions`);
- `get_capabilities` advertises only the families the upstreams offer (tools always).

A session belongs to the identity that opened it: its first request (`initialize`, or the GET that opened a
legacy SSE stream, or the stdio process) fixes the session's identity, kept on its `DownstreamSession`
(`exposers.sessions`, the notifier's directory, which stdio and legacy SSE sessions are in too); every later
request of the session acts as that identity, narrowed by the request's own run-level lists and never widened.
The HTTP edge refuses another identity's requests for the session before they get here (`exposers.http`).
Errors are rendered here, once: a `TriadError` becomes a JSON-RPC error with its code; anything else is logged
with its traceback and becomes INTERNAL_ERROR without details.
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Awaitable, Callable, Mapping
from typing import Any

import anyio
import mcp_types as types
from mcp.server import NotificationOptions, Server, ServerRequestContext
from mcp.server.caching import CACHEABLE_METHODS, CacheHint
from mcp.server.context import CallNext, HandlerResult
from mcp.shared.exceptions import MCPError
from mcp_types import SERVER_INFO_META_KEY
from mcp_types.version import MODERN_PROTOCOL_VERSIONS
from starlette.requests import Request
from starlette.types import Receive

from consumers import JSON, JSONObject, SecretMask
from exposers._sdk import connection_of, drop_idle_tracing
from exposers.input_rounds import InputRounds
from exposers.notify import Notifier
from exposers.raw_results import RawResults
from exposers.relay import RequestRelay, envelope_capabilities
from exposers.request import ClientRequest, acting_identity, caller_session, serve
from exposers.sessions import DownstreamSession
from gateway.calls import LEGACY_TASKS, SUBSCRIBE, Dispatcher
from gateway.errors import TriadError, UpstreamRefused
from gateway.hooks import Session
from gateway.identity import Identity, narrowed
from gateway.observe import tracing_enabled
from gateway.registry import SessionLists
from gateway.tasks import (
    EXTENSION,
    LEGACY_METHODS,
    METHODS,
    MODERN_METHODS,
    TaskRequestParams,
    declares_extension,
    missing_extension_data,
)

logger = logging.getLogger("triad.exposer")

CACHE_HINT = CacheHint(ttl_ms=0, scope="private")
"""2026-07-28 list and read results carry cache hints. What a client sees depends on who it is and on the registry
of the moment, so nothing Triad serves is marked fresh or shareable."""
LEGACY_TASKS_CAPABILITY: JSONObject = {"list": {}, "cancel": {}, "requests": {"tools": {"call": {}}}}
"""What Triad relays of 2025-11-25 tasks: `tools/call` as a task, `tasks/list` (the caller's own) and cancel."""
IDENTITY_SCOPE_KEY = "triad.identity"
"""Where the HTTP auth middleware leaves the caller's identity in the ASGI scope."""


@dataclasses.dataclass(frozen=True)
class SessionOrigin:
    """The identity a transport opened a connection for (a legacy SSE stream's GET, a stdio process), handed to
    the SDK's serving loop as its lifespan state so the connection's first request can adopt it."""

    identity: Identity

Handler = Callable[[ServerRequestContext, Any], Awaitable[Any]]


class GatewayServer(Server[Any]):
    """The SDK's server with Triad's capabilities; its overrides pass the SDK's own arguments through unchanged
    (`*args: Any`), so that a new keyword of the SDK needs no change here."""

    def __init__(self, *args: Any, dispatcher: Dispatcher, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._dispatcher = dispatcher

    def create_initialization_options(self, notification_options: NotificationOptions | None = None,
                                      *args: Any, **kwargs: Any) -> Any:
        options = notification_options or NotificationOptions(True, True, True)
        return super().create_initialization_options(options, *args, **kwargs)

    def get_capabilities(self, *args: Any, **kwargs: Any) -> types.ServerCapabilities:
        caps = super().get_capabilities(*args, **kwargs)
        offered = self._dispatcher.offered()
        resources = caps.resources
        if resources is not None:
            resources = resources.model_copy(update={"subscribe": SUBSCRIBE in offered or None})
        return caps.model_copy(update={
            "resources": resources if "resources" in offered else None,
            "prompts": caps.prompts if "prompts" in offered else None,
            "completions": caps.completions if "completions" in offered else None,
            # each era's tasks, as far as an upstream of that era runs them (the SDK keeps each for its era)
            "tasks": types.ServerTasksCapability.model_validate(LEGACY_TASKS_CAPABILITY)
            if LEGACY_TASKS in offered else None,
            "extensions": {**(caps.extensions or {}), EXTENSION: {}} if EXTENSION in offered else caps.extensions,
        })


def build_server(dispatcher: Dispatcher, notifier: Notifier, default_identity: Identity,
                 rounds: InputRounds | None = None) -> GatewayServer:
    sessions = notifier.sessions

    def downstream(ctx: ServerRequestContext) -> DownstreamSession | None:
        """The downstream session a request belongs to; None for one the SDK gives no connection."""
        connection = connection_of(ctx)
        return sessions.of(connection) if connection is not None else None

    def session_of(ctx: ServerRequestContext) -> Session:
        """The hook state of a request's session (a fresh one when it has none)."""
        found = downstream(ctx)
        return found.hook if found is not None else Session()

    def identity_of(ctx: ServerRequestContext) -> Identity:
        """Who sends this request (`exposers.request.acting_identity`); a session's first request fixes the
        session's identity."""
        origin = ctx.lifespan_context.identity if isinstance(ctx.lifespan_context, SessionOrigin) else None
        scope = getattr(ctx.request, "scope", None)
        found = scope.get(IDENTITY_SCOPE_KEY) if scope is not None else None
        caller = found if isinstance(found, Identity) else origin or default_identity
        if origin is not None:  # a legacy SSE stream: its GET's identity holds for the messages posted to it
            caller = narrowed(origin, caller)
        found = downstream(ctx)
        session = found.bind(caller, dispatcher.config) if found is not None and not found.modern else None
        return acting_identity(dispatcher.config, caller, session, client_name(ctx, found),
                               found.takes_tasks if found is not None and session is not None else True)

    results = RawResults()

    def raw(ctx: ServerRequestContext) -> JSONObject:
        return dict(ctx.params or {})

    def cursor_of(ctx: ServerRequestContext) -> str | None:
        cursor = (ctx.params or {}).get("cursor")
        return cursor if isinstance(cursor, str) else None

    def lister(method: Callable[[Identity, str | None, Mapping[str, JSON] | None, SessionLists], JSONObject]
               ) -> Handler:
        """A list, as the session's own upstream sessions list it (`sessions: per_client`)."""
        async def handle(ctx: ServerRequestContext, _params: object) -> JSONObject:
            await dispatcher.settled()
            identity = identity_of(ctx)
            own = await dispatcher.own_lists(caller_session(dispatcher.config, session_of(ctx), identity,
                                                            ctx.params))
            return results.keep(ctx, complete(method(identity, cursor_of(ctx), ctx.params, own)))
        return handle

    async def forwarded(ctx: ServerRequestContext, _params: object) -> JSONObject:
        """`tools/call`, `resources/read`, `prompts/get`: served by the one runner, with this request's stream as
        the relay back to its client."""
        return results.keep(ctx, complete(await run(ctx)))

    async def run(ctx: ServerRequestContext) -> JSONObject:
        request = ClientRequest(ctx.method, raw(ctx), identity_of(ctx), RequestRelay(ctx, downstream(ctx)),
                                session_of(ctx))
        connection = connection_of(ctx)
        post = ctx.request if isinstance(ctx.request, Request) else None
        if post is not None and connection is not None and connection.session_id is not None:
            # A streamable HTTP session's POST: Triad keeps no event store, so a reply whose connection is gone
            # could never be resumed; the call is cancelled with it, as on the direct path.
            result = await unless_gone(post.receive, lambda: serve(dispatcher, rounds, request))
        else:
            result = await serve(dispatcher, rounds, request)
        assert result is not None  # without `answer_first`, serve always has the result
        return result

    async def task_method(ctx: ServerRequestContext, _params: object) -> JSONObject:
        """`tasks/*`, after the gates of the request's era (`gateway.tasks`): a method of the other era does not
        exist; at 2026-07-28 the request must declare the extension and name its task in `Mcp-Name` too."""
        modern = ctx.protocol_version in MODERN_PROTOCOL_VERSIONS
        if ctx.method not in (MODERN_METHODS if modern else LEGACY_METHODS):
            raise MCPError(types.METHOD_NOT_FOUND, "Method not found", data=ctx.method)
        if modern:
            if not declares_extension(envelope_capabilities(ctx.params)):
                raise MCPError(types.MISSING_REQUIRED_CLIENT_CAPABILITY, f"{ctx.method} needs the {EXTENSION} "
                               "extension declared in the request's client capabilities",
                               data=missing_extension_data())
            headers = ctx.request.headers if isinstance(ctx.request, Request) else None
            named = headers.get("mcp-name") if headers is not None else None
            if named is not None and named.strip() != (ctx.params or {}).get("taskId"):
                raise MCPError(types.HEADER_MISMATCH, "the Mcp-Name header does not match params.taskId")
        return await run(ctx)

    async def set_logging_level(ctx: ServerRequestContext, params: types.SetLevelRequestParams) -> JSONObject:
        found = downstream(ctx)
        if found is not None:
            found.set_log_level(params.level)
        return {}

    async def subscribe(ctx: ServerRequestContext, _params: object) -> JSONObject:
        uri = str((ctx.params or {}).get("uri"))
        found = downstream(ctx)
        # the place is taken before the upstream is asked: subscriptions sent at once stay within the bound
        reserved = found if found is not None and notifier.reserve(found, uri) else None
        try:
            owner, raw_uri = await dispatcher.subscribe(identity_of(ctx), raw(ctx), session_of(ctx))
        except BaseException:
            if reserved is not None:
                reserved.unreserve(uri)
            raise
        if reserved is None or not reserved.subscribe(uri, owner, raw_uri):
            await dispatcher.unsubscribe(owner, raw_uri, session_of(ctx))  # already subscribed: one per connection
        return {}

    async def unsubscribe(ctx: ServerRequestContext, _params: object) -> JSONObject:
        session = downstream(ctx)
        found = session.unsubscribe(str((ctx.params or {}).get("uri"))) if session is not None else None
        if found is not None:
            await dispatcher.unsubscribe(*found, session_of(ctx))
        return {}

    async def completion(ctx: ServerRequestContext, _params: object) -> JSONObject:
        identity = identity_of(ctx)
        session = caller_session(dispatcher.config, session_of(ctx), identity, ctx.params)
        return results.keep(ctx, complete(await dispatcher.complete(identity, raw(ctx), session)))

    async def roots_changed(ctx: ServerRequestContext, _params: object) -> None:
        """The client's roots changed: its own upstream sessions are told (`sessions: per_client`)."""
        found = downstream(ctx)
        if found is not None and not found.modern:
            await dispatcher.roots_changed(found.hook)

    server = GatewayServer(
        "triad",
        version="0.1.0",
        dispatcher=dispatcher,
        cache_hints=dict.fromkeys(CACHEABLE_METHODS, CACHE_HINT),
        # The 2026-07-28 HTTP path checks Mcp-Param-* headers against a tool's schema before any handler runs.
        get_tool_input_schema=lambda name: tool_input_schema(dispatcher, name),
        on_list_tools=lister(dispatcher.list_tools),
        on_call_tool=forwarded,
        on_list_resources=lister(dispatcher.list_resources),
        on_list_resource_templates=lister(dispatcher.list_resource_templates),
        on_read_resource=forwarded,
        on_list_prompts=lister(dispatcher.list_prompts),
        on_get_prompt=forwarded,
        on_completion=completion,
        on_subscribe_resource=subscribe,
        on_unsubscribe_resource=unsubscribe,
        on_subscriptions_listen=notifier.listen_handler(identity_of),
    )
    server.add_request_handler("logging/setLevel", types.SetLevelRequestParams, set_logging_level)
    for method in sorted(METHODS):
        server.add_request_handler(method, TaskRequestParams, task_method)
    server.add_notification_handler("notifications/roots/list_changed", types.NotificationParams, roots_changed)

    async def track_and_render(ctx: ServerRequestContext, call_next: CallNext) -> HandlerResult:
        found = downstream(ctx)
        if ctx.method == "notifications/cancelled" and found is not None:
            found.keep_cancellation(ctx.params)
        if found is not None and found.told is None:
            notifier.track(found, identity_of(ctx))
        try:
            if ctx.method == "tools/call" and "task" in (ctx.params or {}) and found is not None \
                    and not found.modern:
                # 2025-11-25: a call as a task is answered with a `CreateTaskResult`, which the SDK's check of
                # `tools/call` results refuses; the upstream's answer goes to the client as it is
                return await run(ctx)
            # checked and shaped by the SDK, then sent as Triad has it (`exposers.raw_results`)
            return results.restore(ctx, await call_next(ctx))
        except TriadError as exc:
            raise MCPError.from_error_data(error_data(ctx.method, exc, dispatcher.config.secret_mask())) from None
        finally:
            results.drop(ctx)

    if not tracing_enabled():
        # The SDK pre-installs a span per request; with no tracer provider it only costs CPU on the hot path.
        # The client's trace context still passes through (`forwardable_meta` keeps `traceparent`).
        drop_idle_tracing(server)
    server.middleware.append(track_and_render)
    return server


async def unless_gone(receive: Receive, run: Callable[[], Awaitable[JSONObject | None]]) -> JSONObject | None:
    """`run()`, cancelled if the client's HTTP connection closes first (then an error nobody will read). What
`run()` raises is raised as it is, not inside an exception group."""
    outcome: list[JSONObject | None] = []
    failure: list[Exception] = []
    async with anyio.create_task_group() as tg:

        async def watch() -> None:
            while (await receive())["type"] != "http.disconnect":
                pass
            tg.cancel_scope.cancel()

        tg.start_soon(watch)
        try:
            outcome.append(await run())
        except Exception as exc:
            failure.append(exc)
        tg.cancel_scope.cancel()
    if failure:
        raise failure[0]
    if not outcome:
        raise MCPError(types.INTERNAL_ERROR, "the client closed the connection; the call was cancelled")
    return outcome[0]


def client_name(ctx: ServerRequestContext, session: DownstreamSession | None) -> str | None:
    """The client's self-declared name: from the handshake, or from a 2026-07-28 request's envelope."""
    if session is not None and (name := session.client_name) is not None:
        return name
    meta = (ctx.params or {}).get("_meta")
    info = meta.get("io.modelcontextprotocol/clientInfo") if isinstance(meta, dict) else None
    return info.get("name") if isinstance(info, dict) else None


def error_data(method: str, exc: Exception, mask: SecretMask) -> types.ErrorData:
    """The one rendering of a failed request: a `TriadError` keeps its code; anything else is logged with its
    traceback and becomes INTERNAL_ERROR without details. `mask`: the config's secrets (`consumers.SecretMask`),
    hidden in what an upstream's error or an upstream's reason quotes."""
    if isinstance(exc, TriadError):
        if not isinstance(exc, UpstreamRefused):
            logger.info("%s failed: %s", method, mask(exc.message))
        return types.ErrorData(code=exc.code, message=mask(exc.message), data=mask.json(exc.data))
    if isinstance(exc, MCPError):
        return types.ErrorData(code=exc.error.code, message=mask(exc.error.message), data=mask.json(exc.error.data))
    logger.exception("%s failed", method)
    return types.ErrorData(code=types.INTERNAL_ERROR, message="Internal error")


def stamp_server_info(result: JSONObject, server_info: Mapping[str, JSON]) -> JSONObject:
    """Triad's `serverInfo` in a 2026-07-28 result's `_meta`, as the SDK stamps its own results (a value already
    there, an upstream's, stays: the SDK's rule)."""
    meta = result.get("_meta")
    if meta is None:
        result["_meta"] = {SERVER_INFO_META_KEY: dict(server_info)}
    elif isinstance(meta, dict) and meta.get(SERVER_INFO_META_KEY) is None:
        result["_meta"] = {**meta, SERVER_INFO_META_KEY: dict(server_info)}
    return result


def complete(result: JSONObject) -> JSONObject:
    """`resultType` is required on 2026-07-28 (the SDK drops it for older versions); an upstream's own wins."""
    result.setdefault("resultType", "complete")
    return result


def tool_input_schema(dispatcher: Dispatcher, name: str) -> JSONObject | None:
    """The input schema of an exposed tool, for the 2026-07-28 `Mcp-Param-*` header checks."""
    descriptor = dispatcher.registry.tools.get(name)
    return dict(descriptor.input_schema) if descriptor is not None else None
