"""The dispatcher: the registry snapshot, the per-client views, and the call path.

Ownership: the daemon creates one `Dispatcher` with the pool. Upstream state or catalog changes call
`invalidate()`; `run()` (a task of the daemon's) then builds a new registry whole, once per burst of changes, and
swaps it in by one assignment (`Snapshot`); listeners (the exposer's notifier) are told.

Every request goes: identity -> that identity's view (cached per registry version) -> lookup of the exposed name
(unknown and hidden look the same; with `sessions: per_client`, also what the caller's own upstream session
lists) -> policy and hooks (`HookChain.run` around `call_visible_tool`'s `send`) -> `_forward` to the upstream
that owns the name -> the raw result.
Requests about resources (reads, completions, subscriptions) and URI routing: `gateway.calls`.
Nothing on the call path scans the registry or awaits anything but the upstream.
"""

from __future__ import annotations

import dataclasses
import logging
import time
import weakref
from collections.abc import Callable, Mapping
from typing import Any

import anyio
import anyio.lowlevel
import mcp_types as types

from consumers import OwnLists, ProgressFn, Upstream, UpstreamPool, UpstreamRequest, UpstreamState
from gateway.calls._core_tools import CALL_THROUGH, inner_call, run_core, settings_for, tool_error
from gateway.calls._resources import ResourceRequests, subscribable
from gateway.config import TriadConfig
from gateway.errors import InvalidRequest, UnknownName, UpstreamError, UpstreamTimeout, UpstreamUnavailable
from gateway.hooks import CallContext, HookChain, Session, build_chain
from gateway.identity import Identity, bounded_run_list, run_list
from gateway.observe import Metrics, log_call, log_denied
from gateway.registry import (
    CORE_NAMES,
    EMPTY_REGISTRY,
    RUN_LIST_META_KEY,
    SERVING,
    ClientView,
    Registry,
    SessionLists,
    Snapshot,
    ToolDescriptor,
    UpstreamSnapshot,
    build_registry,
    build_upstream_sources,
    clean_result,
    core_source,
    expose_links,
    forwardable_meta,
    input_round,
    paginate,
    schema_profile,
    tool_wire,
    with_page_meta,
)
from gateway.search import SearchIndexes, load_ranker
from gateway.state import NameLedger, SharedState
from gateway.tasks import EXTENSION, Era, TaskBook, TaskRelay, offers_extension, offers_legacy_tasks
from policy import Pipeline

logger = logging.getLogger("triad.dispatch")

SUBSCRIBE = "resources/subscribe"
"""In `Dispatcher.offered()`: some upstream lets clients subscribe to its resources."""
LEGACY_TASKS = "tasks"
"""In `Dispatcher.offered()`: some handshake-era upstream runs `tools/call` as a task (2025-11-25); `EXTENSION`:
some upstream's tasks can be offered to 2026-07-28 clients (its own extension, or translated legacy tasks)."""


def _arguments(params: Mapping[str, Any]) -> dict[str, Any]:
    arguments = params.get("arguments")
    return dict(arguments) if isinstance(arguments, Mapping) else {}


def _pipeline(config: TriadConfig, remote: bool) -> Pipeline:
    return Pipeline(config.policy, {cid: c.tools for cid, c in config.clients.items()}, remote=remote)


class Dispatcher(ResourceRequests):
    def __init__(self, config: TriadConfig, pool: UpstreamPool, *, remote: bool = False,
                 names: NameLedger | None = None, shared: SharedState | None = None) -> None:
        self.config = config
        self.shared = shared
        """With `cluster:`, the state hooks share with the other replicas (each chain a reload builds gets it)."""
        self.names = names if names is not None else NameLedger()
        self.pool = pool
        self._remote = remote
        self.pipeline = _pipeline(config, remote)
        self.hooks: HookChain = build_chain(config.hooks, shared)
        self._snapshot = Snapshot(EMPTY_REGISTRY, self.pipeline)
        """The registry of the moment and its caches: replaced whole, by one assignment."""
        self.search = SearchIndexes(load_ranker(config.search.ranker))
        self._stale = True
        self._changed = anyio.Event()
        self.metrics = Metrics()
        if self.hooks:
            self.hooks.on_block = self.metrics.blocked
        self._listeners: list[Callable[[], None]] = []
        self._settled = False
        self._states: weakref.WeakKeyDictionary[Upstream, UpstreamState] = weakref.WeakKeyDictionary()
        """Each upstream's last state seen, to count its restarts (down, then ready again)."""
        replica = config.cluster.replica_id if config.cluster is not None else None
        self.tasks = TaskRelay(TaskBook(replica=replica), self._forward, self._upstream,
                               lambda upstream: self.registry.uri_parts.get(upstream), lambda: self.hooks,
                               lambda: self.config.page_size)
        """The tasks upstreams created for clients, and the `tasks/*` requests about them."""

    # -- registry path -------------------------------------------------------------------------------------------

    def add_listener(self, listener: Callable[[], None]) -> None:
        """`listener()` is called (synchronously) whenever the registry goes stale."""
        self._listeners.append(listener)

    def on_upstream_change(self, upstream: Upstream) -> None:
        if upstream.state is UpstreamState.READY and self._states.get(upstream) is UpstreamState.DOWN:
            self.metrics.restarts.labels(upstream.name).inc()
        self._states[upstream] = upstream.state
        self.invalidate()

    def apply_config(self, config: TriadConfig, hooks: HookChain) -> None:
        """A reload: policy, naming, clients, hooks and page size apply to the next request."""
        if config.search.ranker != self.config.search.ranker:
            self.search = SearchIndexes(load_ranker(config.search.ranker))
        self.config, self.pipeline, self.hooks = config, _pipeline(config, self._remote), hooks
        if hooks:
            hooks.on_block = self.metrics.blocked
        self.invalidate()

    def invalidate(self) -> None:
        """Many upstreams change at once (at start, on reload): the registry is marked stale here and rebuilt once
        per burst by `run()`, off the call path (a reader that comes first builds it itself)."""
        self._stale = True
        self._changed.set()
        for listener in self._listeners:
            listener()

    async def run(self) -> None:
        """Rebuild the registry eagerly after each burst of changes; one task in the daemon's task group."""
        while True:
            await self._changed.wait()
            self._changed = anyio.Event()
            await anyio.lowlevel.checkpoint()  # changes made in the same moment (a reload, a start) build once
            self._current()

    def _current(self) -> Snapshot:
        if self._stale:
            self._stale = False
            snapshots = {name: UpstreamSnapshot(up.catalog, up.state.value, up.reason)
                         for name, up in self.pool.upstreams.items()}
            # the core tools' names are never an upstream tool's, whatever mode a client is in: a name stays the
            # same for every client, and a search-mode client's `search_tools` is always Triad's.
            built = build_upstream_sources(self.config, snapshots, reserved=CORE_NAMES, names=self.names)
            registry = build_registry(self._snapshot.registry.version + 1, [core_source(self.config), *built.sources],
                                      built.context, built.uri_owners)
            self._snapshot = Snapshot(registry, self.pipeline)
        return self._snapshot

    @property
    def registry(self) -> Registry:
        return self._current().registry

    def view(self, identity: Identity, own: SessionLists = ()) -> ClientView:
        """What `identity` may see; `own`: narrowed by what its session's own upstream sessions list."""
        client = self.config.clients.get(identity.client_id)
        profile = schema_profile(client.schema_profile if client else None, identity.provider)
        mode, always_list = settings_for(self.config, identity.client_id)
        snapshot = self._current()
        return snapshot.narrowed(snapshot.view(identity, profile, mode, always_list, self.config.policy.tool_groups),
                                 own)

    async def own_lists(self, session: Session | None) -> SessionLists:
        """What a session's own upstream sessions list, of each serving `per_client` upstream: where an upstream
        lists tools by its client's capabilities (or keeps session resources), the client sees what its own
        session lists. Known lists cost nothing; an upstream that has no session of this client's yet, nor one
        that declared the same capabilities, gets one now (all such upstreams at once)."""
        if session is None:
            return ()
        found: dict[str, OwnLists | None] = {}
        missing: list[Upstream] = []
        for name, upstream in self.pool.upstreams.items():
            if not upstream.per_client or upstream.state.value not in SERVING:
                continue
            try:  # a 2026-07-28 caller's own session is its stand-in's (`consumers`)
                own = upstream.own_session(session)
            except UpstreamError as exc:  # too many of this caller's: that upstream is hidden from it (fail closed)
                found[name] = None
                logger.info("upstream %s: no session for this client: %s", upstream.name, exc.message)
                continue
            if own is not None:
                if (known := upstream.known_lists(session)) is not None:
                    found[name] = known
                else:
                    missing.append(upstream)

        async def open_session(upstream: Upstream) -> None:
            try:
                found[upstream.name] = await upstream.own_lists(session)
            except UpstreamError as exc:  # its tools are hidden from this client until it opens: fail closed
                found[upstream.name] = None
                logger.info("upstream %s: no session for this client, so none of its tools are listed to it: %s",
                            upstream.name, exc.message)

        if missing:
            async with anyio.create_task_group() as tg:
                for upstream in missing:
                    tg.start_soon(open_session, upstream)
        return tuple(sorted(found.items(), key=lambda item: item[0]))

    def _request_view(self, identity: Identity, params: Mapping[str, Any], own: SessionLists = ()) -> ClientView:
        """The view for one request: the caller's, narrowed by the request's own run-level list if it has one."""
        meta = params.get("_meta")
        if isinstance(meta, Mapping) and RUN_LIST_META_KEY in meta:
            patterns, source = meta[RUN_LIST_META_KEY], f"_meta[{RUN_LIST_META_KEY!r}]"
            if isinstance(patterns, str):
                patterns = run_list(patterns, source)
            if not isinstance(patterns, list | tuple) or not all(isinstance(p, str) for p in patterns):
                raise InvalidRequest(f"{source} must be a list of tool patterns")
            identity = dataclasses.replace(identity, run_lists=(*identity.run_lists,
                                                                bounded_run_list(patterns, source)))
        return self.view(identity, own)

    async def _refuse_tool(self, view: ClientView, name: Any, params: Mapping[str, Any],
                           session: Session | None) -> UnknownName:
        """Hidden and unknown names get the same answer; a policy denial is counted, logged and audited."""
        for descriptor, decision in view.denied:
            if descriptor.name == name and (step := decision.denied_by) is not None:
                self.metrics.deny(step.layer)
                log_denied(view.identity.client_id, name, session, step)
                if self.hooks:
                    executor = descriptor.executor
                    ctx = CallContext("tool", view.identity.client_id, session or Session(), name,
                                      executor.id if executor else "", executor.tool if executor else "",
                                      _arguments(params))
                    await self.hooks.denied(ctx, step.layer, step.pattern, step.detail)
                break
        return UnknownName(f"Unknown tool: {name}")

    @property
    def upstreams(self) -> Mapping[str, Upstream]:
        """Every configured upstream by name (for health and readiness views)."""
        return self.pool.upstreams

    @property
    def all_modern(self) -> bool:
        """Every upstream speaks 2026-07-28: none can ask a client anything mid-call (no input rounds needed)."""
        return self.pool.all_modern

    async def settled(self) -> None:
        """Lists, calls, reads and gets wait, once, for every upstream's first connection attempt (each bounded by
        its timeout): a client that lists or calls right after Triad starts (a stdio client answered `initialize`
        at once) sees every tool, not a partial list or an `Unknown tool` for a tool that is still starting."""
        if not self._settled:
            await self.pool.wait_settled()
            self._settled = True

    def offered(self) -> set[str]:
        """Capability families to advertise: what connected upstreams offer, plus everything while one is still
        unknown (a client must not be told "no prompts" just because the upstream that has them is slow)."""
        families = {"tools"}
        for upstream in self.pool.upstreams.values():
            if upstream.catalog is None:
                return {"tools", "resources", "prompts", "completions", SUBSCRIBE, LEGACY_TASKS, EXTENSION}
            families |= set(upstream.catalog.capabilities) & {"resources", "prompts", "completions"}
            if subscribable(upstream):
                families.add(SUBSCRIBE)
            if offers_legacy_tasks(upstream.catalog.capabilities) and not upstream.modern:
                families |= {LEGACY_TASKS, EXTENSION}  # Triad translates its tasks for 2026-07-28 clients
            if offers_extension(upstream.catalog.capabilities) and upstream.modern:
                families.add(EXTENSION)
        return families

    # -- lists ---------------------------------------------------------------------------------------------------

    def list_tools(self, identity: Identity, cursor: str | None, params: Mapping[str, Any] | None = None,
                   own: SessionLists = ()) -> dict[str, Any]:
        view = self._request_view(identity, params, own) if params else self.view(identity, own)
        return self._page(view, view.tools_wire, "tools", cursor)

    def list_resources(self, identity: Identity, cursor: str | None, params: Mapping[str, Any] | None = None,
                       own: SessionLists = ()) -> dict[str, Any]:
        view = self._request_view(identity, params, own) if params else self.view(identity, own)
        return self._page(view, view.resources_wire, "resources", cursor)

    def list_resource_templates(self, identity: Identity, cursor: str | None, params: Mapping[str, Any] | None = None,
                                own: SessionLists = ()) -> dict[str, Any]:
        view = self._request_view(identity, params, own) if params else self.view(identity, own)
        return self._page(view, view.templates_wire, "resourceTemplates", cursor)

    def list_prompts(self, identity: Identity, cursor: str | None, params: Mapping[str, Any] | None = None,
                     own: SessionLists = ()) -> dict[str, Any]:
        view = self._request_view(identity, params, own) if params else self.view(identity, own)
        return self._page(view, view.prompts_wire, "prompts", cursor)

    def _page(self, view: ClientView, items: tuple[dict[str, Any], ...], key: str, cursor: str | None
              ) -> dict[str, Any]:
        page = paginate(items, key, cursor, view.version, self.config.page_size)
        return with_page_meta(page, key, (self.pool.get(name) for name in sorted(view.visible_upstreams)))

    # -- call path -----------------------------------------------------------------------------------------------

    async def call_tool(self, identity: Identity, params: Mapping[str, Any], progress: ProgressFn | None = None,
                        session: Session | None = None, era: Era = "2025-11-25") -> dict[str, Any]:
        """`era`: the client's (a 2026-07-28 client's task on a handshake-era upstream is translated)."""
        if not self._settled:  # right after start, a name is unknown only once its upstream has had its chance
            await self.settled()
        return await self.call_visible_tool(self._request_view(identity, params), params, progress, session, era)

    def declares_param_headers(self, name: str) -> bool:
        """Whether the tool exposed as `name` maps arguments to `Mcp-Param-*` headers (`Snapshot`)."""
        return self._current().declares_param_headers(name)

    def tool_wire(self, view: ClientView, descriptor: ToolDescriptor) -> dict[str, Any]:
        """A tool as `view`'s caller sees it (its schema after the caller's profile, cached per version)."""
        return tool_wire(descriptor, view.profile, self._current().schemas)

    async def call_visible_tool(self, view: ClientView, params: Mapping[str, Any], progress: ProgressFn | None = None,
                                session: Session | None = None, era: Era = "2025-11-25", *,
                                inner: bool = False) -> dict[str, Any]:
        """A call of a tool by its exposed name, in `view`: what `tools/call` does, and `call_tool` after it."""
        identity, name = view.identity, params.get("name")
        entry = view.tools.get(name) if isinstance(name, str) else None
        if entry is None or (inner and entry.executor.kind == "core"):  # `call_tool` calls no core tool
            raise await self._refuse_tool(view, name, params, session)
        if entry.executor.kind == "core":
            # a core tool finds and calls only what this session may call (its own upstream sessions' lists)
            view = self.view(identity, await self.own_lists(session))
            if entry.executor.id == CALL_THROUGH:
                called = inner_call(params)
                if isinstance(called, str):
                    return tool_error(called)
                return await self.call_visible_tool(view, called, progress, session, era, inner=True)
            return await self._run_core(view, entry.descriptor, params, session)
        upstream = self._upstream(entry.executor.id)
        if session is not None and upstream.own_session(session) is not None \
                and entry.executor.tool not in (await upstream.own_lists(session)).tools:
            raise UnknownName(f"Unknown tool: {name}")  # its own session does not list it: as if it did not exist
        meta = forwardable_meta(params.get("_meta"))
        notes = entry.descriptor.annotations or {}
        safe = notes.get("readOnlyHint") is True or notes.get("idempotentHint") is True

        async def send(ctx: CallContext | None) -> dict[str, Any]:
            arguments = ctx.arguments if ctx is not None else params.get("arguments")
            if shape := entry.descriptor.arguments:  # hidden and fixed by a tool override, whatever was sent
                arguments = shape.apply(arguments)
            task = self.tasks.task_param(upstream, entry.descriptor.wire, params, entry.descriptor.name, era)
            request = types.CallToolRequest(params=types.CallToolRequestParams.model_validate(
                {"name": entry.executor.tool, "arguments": arguments, "_meta": meta, **input_round(params),
                 **({"task": task} if task is not None else {})}, by_name=False))
            limits = (ctx.timeout, ctx.max_time) if ctx is not None else (None, None)
            relayed = self.hooks.progress(ctx, progress) if ctx is not None else progress
            result = await self._forward(upstream, "tool", request, progress=relayed, retry_safe=safe, client=session,
                                         call_limits=limits, caller=(identity.client_id, entry.descriptor.name))
            result = self.tasks.adopt(result, upstream, identity, session, ctx, era)
            return expose_links(result, self.registry.uri_parts.get(upstream.name))

        if not self.hooks:
            return await send(None)
        ctx = CallContext("tool", identity.client_id, session or Session(), entry.descriptor.name, upstream.name,
                          entry.executor.tool, _arguments(params), notes, entry.descriptor.input_schema,
                          entry.descriptor.wire)
        return await self.hooks.run(ctx, send)

    async def _run_core(self, view: ClientView, descriptor: ToolDescriptor, params: Mapping[str, Any],
                        session: Session | None) -> dict[str, Any]:
        """A core tool that runs here (`search_tools`): inside the hook chain like any tool, with no upstream."""
        snapshot, indexes = self._current(), self.search

        async def run(ctx: CallContext | None) -> dict[str, Any]:
            arguments = ctx.arguments if ctx is not None else _arguments(params)
            return await run_core(descriptor.executor.id if descriptor.executor else "", indexes, view, arguments,
                                  snapshot.schemas)

        if not self.hooks:
            return await run(None)
        ctx = CallContext("tool", view.identity.client_id, session or Session(), descriptor.name, "", descriptor.name,
                          _arguments(params), descriptor.annotations or {}, descriptor.input_schema)
        return await self.hooks.run(ctx, run)

    async def get_prompt(self, identity: Identity, params: Mapping[str, Any],
                         session: Session | None = None) -> dict[str, Any]:
        if not self._settled:
            await self.settled()
        name = params.get("name")
        # a prompt its own upstream session does not list (`sessions: per_client`) is as if it did not exist
        view = self._request_view(identity, params, await self.own_lists(session)) if isinstance(name, str) else None
        entry = view.prompts.get(name) if view is not None and isinstance(name, str) else None
        if entry is None:
            raise UnknownName(f"Unknown prompt: {name}")
        meta = forwardable_meta(params.get("_meta"))

        async def send(ctx: CallContext | None) -> dict[str, Any]:
            arguments = ctx.arguments if ctx is not None else params.get("arguments")
            request = types.GetPromptRequest(params=types.GetPromptRequestParams.model_validate(
                {"name": entry.raw, "arguments": arguments or None, "_meta": meta, **input_round(params)},
                by_name=False))
            result = await self._forward(self._upstream(entry.upstream), "prompt", request, retry_safe=True,
                                         client=session, caller=(identity.client_id, entry.exposed))
            return expose_links(result, self.registry.uri_parts.get(entry.upstream), "messages")

        if not self.hooks:
            return await send(None)
        ctx = CallContext("prompt", identity.client_id, session or Session(), entry.exposed, entry.upstream,
                          entry.raw, _arguments(params))
        return await self.hooks.run(ctx, send)

    async def roots_changed(self, session: Session) -> None:
        """A client said its roots changed: each upstream session of its own is told (shared ones never had them)."""
        for upstream in list(self.pool.upstreams.values()):
            await upstream.roots_changed(session)

    async def _forward(self, upstream: Upstream, kind: str, request: UpstreamRequest, *,
                       caller: tuple[str, str] = ("", ""), **options: Any) -> dict[str, Any]:
        """The one place a request leaves for an upstream: timed, counted and logged (`caller`: client, name)."""
        start, outcome = time.perf_counter(), "error"
        record = self.metrics.call_log.start(upstream.name, kind, request, options.get("client"))
        try:
            result = clean_result(await upstream.request(request, **options))
            outcome = "tool_error" if result.get("isError") is True else "ok"
            return result
        except UpstreamTimeout:
            outcome = "timeout"
            raise
        finally:
            elapsed = time.perf_counter() - start
            self.metrics.call_log.end(record, outcome, elapsed)
            self.metrics.observe(upstream.name, kind, outcome, elapsed)
            log_call(kind, upstream.name, request, outcome, elapsed, caller, options.get("client"))

    def _upstream(self, name: str) -> Upstream:
        upstream = self.pool.get(name)
        if upstream is None:
            raise UpstreamUnavailable(name, f"upstream {name!r} is not configured any more")
        return upstream
