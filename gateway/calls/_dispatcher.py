"""The dispatcher: the registry snapshot, the per-client views, and the call path.

Ownership: the daemon creates one `Dispatcher` with the pool. Upstream state or catalog changes call
`invalidate()`; `run()` (a task of the daemon's) then builds a new registry whole, once per burst of changes, and
swaps it in by one assignment (`Snapshot`); listeners (the exposer's notifier) are told.

The dispatcher is the face the exposers call; it is composed of small collaborators, each given what it needs at
construction (none gets the dispatcher): `Live` (config, policy, hooks, search, the registry snapshot and its
views), `Forwarder` (the one place a request leaves for an upstream), `ToolCalls` (tool calls and prompt gets, the
core tools' executors among them), `Resources` (reads, completions, subscriptions, URI routing) and the task relay.
Nothing on the call path scans the registry or awaits anything but the upstream.
"""

from __future__ import annotations

import logging
import weakref
from collections.abc import Callable, Mapping

import anyio
import anyio.lowlevel

from consumers import JSON, JSONObject, Upstream, UpstreamPool, UpstreamState
from gateway.approval import ApprovalGate
from gateway.calls._forwarder import Forwarder
from gateway.calls._live import Live
from gateway.calls._own_lists import own_lists
from gateway.calls._resources import Resources, subscribable
from gateway.calls._tool_calls import ToolCalls
from gateway.config import TriadConfig
from gateway.hooks import HookChain, Session, build_chain
from gateway.identity import Identity
from gateway.observe import Metrics
from gateway.quotas import Quotas
from gateway.registry import ClientView, Registry, SessionLists, paginate, with_page_meta
from gateway.search import SearchIndexes
from gateway.state import LocalApprovals, NameLedger, SharedState
from gateway.tasks import EXTENSION, TaskBook, TaskRelay, offers_extension, offers_legacy_tasks
from policy import Pipeline

logger = logging.getLogger("triad.dispatch")

SUBSCRIBE = "resources/subscribe"
"""In `Dispatcher.offered()`: some upstream lets clients subscribe to its resources."""
LEGACY_TASKS = "tasks"
"""In `Dispatcher.offered()`: some handshake-era upstream runs `tools/call` as a task (2025-11-25); `EXTENSION`:
some upstream's tasks can be offered to 2026-07-28 clients (its own extension, or translated legacy tasks)."""


class Dispatcher:
    def __init__(self, config: TriadConfig, pool: UpstreamPool, *, remote: bool = False,
                 names: NameLedger | None = None, shared: SharedState | None = None, record_pins: bool = False) -> None:
        """`record_pins`: a daemon's (serve, stdio): the first definition listed of each pinned tool is recorded."""
        self.shared = shared
        """With `cluster:`, the state hooks share with the other replicas (each chain a reload builds gets it)."""
        self.names = names if names is not None else NameLedger()
        self.pool = pool
        self.metrics = Metrics()
        self.quotas = Quotas()
        """Each identity's sessions, streams and calls in flight (`gateway.quotas`): the exposers take and give back."""
        hooks = build_chain(config.hooks, shared, on_block=self.metrics.blocked, resolve=config.resolve_path)
        self.live = Live(config, pool, hooks, remote=remote, names=self.names, record_pins=record_pins,
                         on_stale=self.invalidate)
        """The config, policy, hooks, search indexes and registry of the moment."""
        self._changed = anyio.Event()
        self._listeners: list[Callable[[], None]] = []
        self._states: weakref.WeakKeyDictionary[Upstream, UpstreamState] = weakref.WeakKeyDictionary()
        """Each upstream's last state seen, to count its restarts (down, then ready again)."""
        forwarder = Forwarder(pool, self.metrics)
        replica = config.cluster.replica_id if config.cluster is not None else None
        self.tasks = TaskRelay(TaskBook(replica=replica), forwarder, self.live)
        """The tasks upstreams created for clients, and the `tasks/*` requests about them."""
        self.approvals = shared.approvals() if shared is not None else LocalApprovals()
        """Calls waiting for an approver in the console (`approval:`); with `cluster:`, every replica's; it outlives
        reloads."""
        self.approval = ApprovalGate(self.metrics, self.approvals)
        self._tools = ToolCalls(self.live, pool, forwarder, self.tasks, self.metrics, self.approval)
        self._resources = Resources(self.live, pool, forwarder)
        self.read_resource = self._resources.read_resource
        self.complete = self._resources.complete
        self.subscribe = self._resources.subscribe
        self.unsubscribe = self._resources.unsubscribe
        self.call_tool = self._tools.call_tool
        self.get_prompt = self._tools.get_prompt
        self.settled = self.live.settled
        self.view = self.live.view

    @property
    def config(self) -> TriadConfig:
        return self.live.config

    @property
    def hooks(self) -> HookChain:
        return self.live.hooks

    @property
    def pipeline(self) -> Pipeline:
        return self.live.pipeline

    @property
    def search(self) -> SearchIndexes:
        return self.live.search

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
        """A reload: policy, naming, clients, hooks (built with `on_block=metrics.blocked`) and page size apply to
        the next request."""
        self.live.apply(config, hooks)
        self.invalidate()

    def invalidate(self) -> None:
        """Many upstreams change at once (at start, on reload): the registry is marked stale here and rebuilt once
        per burst by `run()`, off the call path (a reader that comes first builds it itself)."""
        self.live.invalidate()
        self._changed.set()
        for listener in self._listeners:
            listener()

    async def run(self) -> None:
        """Rebuild the registry eagerly after each burst of changes; one task in the daemon's task group."""
        while True:
            await self._changed.wait()
            self._changed = anyio.Event()
            await anyio.lowlevel.checkpoint()  # changes made in the same moment (a reload, a start) build once
            self.live.current()
            await self.live.record_pins()  # first listings recorded: rebuilt again, listeners told

    @property
    def registry(self) -> Registry:
        return self.live.registry

    async def own_lists(self, session: Session | None) -> SessionLists:
        """What a session's own upstream sessions list, of each serving `per_client` upstream (`own_lists`)."""
        return await own_lists(self.pool, session)

    @property
    def upstreams(self) -> Mapping[str, Upstream]:
        """Every configured upstream by name (for health and readiness views)."""
        return self.pool.upstreams

    @property
    def asks_approval(self) -> bool:
        """Some call may wait for a person's yes: a 2026-07-28 caller is then asked in `input_required` rounds."""
        return bool(self.config.approval.rules)

    @property
    def all_modern(self) -> bool:
        """Every upstream speaks 2026-07-28: none can ask a client anything mid-call (no input rounds needed)."""
        return self.pool.all_modern

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

    def list_tools(self, identity: Identity, cursor: str | None, params: Mapping[str, JSON] | None = None,
                   own: SessionLists = ()) -> JSONObject:
        view = self.live.request_view(identity, params, own)
        return self._page(view, view.tools_wire, "tools", cursor)

    def list_resources(self, identity: Identity, cursor: str | None, params: Mapping[str, JSON] | None = None,
                       own: SessionLists = ()) -> JSONObject:
        view = self.live.request_view(identity, params, own)
        return self._page(view, view.resources_wire, "resources", cursor)

    def list_resource_templates(self, identity: Identity, cursor: str | None, params: Mapping[str, JSON] | None = None,
                                own: SessionLists = ()) -> JSONObject:
        view = self.live.request_view(identity, params, own)
        return self._page(view, view.templates_wire, "resourceTemplates", cursor)

    def list_prompts(self, identity: Identity, cursor: str | None, params: Mapping[str, JSON] | None = None,
                     own: SessionLists = ()) -> JSONObject:
        view = self.live.request_view(identity, params, own)
        return self._page(view, view.prompts_wire, "prompts", cursor)

    def _page(self, view: ClientView, items: tuple[JSONObject, ...], key: str, cursor: str | None
              ) -> JSONObject:
        page = paginate(items, key, cursor, self.config.page_size)
        return with_page_meta(page, key, (self.pool.get(name) for name in sorted(view.visible_upstreams)))

    def declares_param_headers(self, name: str) -> bool:
        """Whether the tool exposed as `name` maps arguments to `Mcp-Param-*` headers (`Snapshot`)."""
        return self.live.current().declares_param_headers(name)

    async def roots_changed(self, session: Session) -> None:
        """A client said its roots changed: each upstream session of its own is told (shared ones never had them)."""
        for upstream in list(self.pool.upstreams.values()):
            await upstream.roots_changed(session)
