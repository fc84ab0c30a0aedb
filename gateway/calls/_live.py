"""The call path's state of the moment: the config, the policy pipeline and hook chain built from it, the search
indexes, and the registry snapshot with its per-client views.

Ownership: the dispatcher creates one `Live` and applies each reload to it (`apply`); the registry is marked stale
on every change (`invalidate`) and rebuilt whole, once, by the first reader after it (`current`), then swapped in by
one assignment (`Snapshot`). It is built from the catalogs as the hook chain lets clients see them
(`HookChain.catalog`: `redact` masks them there), each masked once per catalog and chain. Every collaborator of the
call path reads it: tool calls, resources, and the task relay through the read-only `gateway.tasks` `Current`.
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Callable, Mapping

from consumers import JSON, Catalog, UpstreamPool
from gateway.calls._core_tools import settings_for
from gateway.calls._pin_gate import PinGate
from gateway.config import TriadConfig
from gateway.errors import InvalidRequest
from gateway.hooks import HookChain
from gateway.identity import Identity, bounded_run_list, run_list
from gateway.registry import (
    CORE_NAMES,
    EMPTY_REGISTRY,
    RUN_LIST_META_KEY,
    ClientView,
    Registry,
    RegistryDiagnostic,
    SessionLists,
    Snapshot,
    UpstreamSnapshot,
    build_registry,
    build_upstream_sources,
    core_source,
    narrow_to_name,
    schema_profile,
)
from gateway.search import SearchIndexes, load_ranker
from gateway.state import NameLedger
from policy import Pipeline

logger = logging.getLogger("triad.names")


def _pipeline(config: TriadConfig, remote: bool) -> Pipeline:
    return Pipeline(config.policy, {cid: c.tools for cid, c in config.clients.items()}, remote=remote)


class Live:
    def __init__(self, config: TriadConfig, pool: UpstreamPool, hooks: HookChain, *, remote: bool,
                 names: NameLedger, record_pins: bool = False, on_stale: Callable[[], None] | None = None) -> None:
        """`on_stale`: told when first listings were recorded (the registry must be rebuilt, listeners told)."""
        self.config = config
        self.hooks = hooks
        self.pipeline = _pipeline(config, remote)
        self.search = SearchIndexes(load_ranker(config.search.ranker))
        self._pool = pool
        self._names = names
        self._warned: set[str] = set()
        self._remote = remote
        self._on_stale = on_stale if on_stale is not None else self.invalidate
        self._pins = PinGate(record=record_pins)
        """What `pin_definitions` lets clients see of each tool, and the first listings it records."""
        self._snapshot = Snapshot(EMPTY_REGISTRY, self.pipeline)
        """The registry of the moment and its caches: replaced whole, by one assignment."""
        self._stale = True
        self._settled = False
        self._masked: dict[str, tuple[Catalog, HookChain, Catalog]] = {}
        """Per upstream: (its catalog, the chain, the catalog as that chain lets clients see it)."""

    def apply(self, config: TriadConfig, hooks: HookChain) -> None:
        """A reload: policy, naming, clients, hooks and page size apply to the next request."""
        if config.search.ranker != self.config.search.ranker:
            self.search = SearchIndexes(load_ranker(config.search.ranker))
        self.config, self.pipeline, self.hooks = config, _pipeline(config, self._remote), hooks
        self._stale = True

    def invalidate(self) -> None:
        self._stale = True

    def current(self) -> Snapshot:
        if self._stale:
            self._stale = False
            snapshots = {name: UpstreamSnapshot(self._shown(name, up.catalog), up.state.value, up.reason)
                         for name, up in self._pool.upstreams.items()}
            # the core tools' names are never an upstream tool's, whatever mode a client is in: a name stays the
            # same for every client, and a search-mode client's `search_tools` is always Triad's.
            built = build_upstream_sources(self.config, snapshots, reserved=CORE_NAMES, names=self._names)
            sources = self._pins.apply(self.hooks, built.sources)
            registry = build_registry(self._snapshot.registry.version + 1, [core_source(self.config), *sources],
                                      built.context, built.uri_owners)
            for warning in {*built.warnings, *built.definitions} - self._warned:  # once each, not per rebuild
                logger.warning("%s", warning)
            self._warned = {*built.warnings, *built.definitions}
            registry = dataclasses.replace(registry, diagnostics=(
                *registry.diagnostics, *(RegistryDiagnostic("naming", "", w) for w in built.warnings),
                *(RegistryDiagnostic("definition", "", note) for note in built.definitions)))
            self._snapshot = Snapshot(registry, self.pipeline, self.hooks.listed)
        return self._snapshot

    def _shown(self, upstream: str, catalog: Catalog | None) -> Catalog | None:
        """`catalog` as clients may see it; masked again only when it or the chain changed."""
        if catalog is None:
            self._masked.pop(upstream, None)
            return None
        found = self._masked.get(upstream)
        if found is None or found[0] is not catalog or found[1] is not self.hooks:
            found = self._masked[upstream] = (catalog, self.hooks, self.hooks.catalog(catalog))
        return found[2]

    @property
    def registry(self) -> Registry:
        return self.current().registry

    @property
    def page_size(self) -> int:
        return self.config.page_size

    def uri_part(self, upstream: str) -> str | None:
        return self.current().registry.uri_parts.get(upstream)

    async def settled(self) -> None:
        """Lists, calls, reads and gets wait, once, for every upstream's first connection attempt (each bounded by
        its timeout): a client that lists or calls right after Triad starts (a stdio client answered `initialize`
        at once) sees every tool, not a partial list or an `Unknown tool` for a tool that is still starting."""
        if not self._settled:
            await self._pool.wait_settled()
            self.current()
            await self.record_pins()
            self._settled = True

    @property
    def pins_busy(self) -> bool:
        return self._pins.busy

    async def record_pins(self) -> None:
        """Record the first definitions the last rebuild withheld for it (`PinGate`), then rebuild to list them."""
        if await self._pins.record_pending():
            self._on_stale()

    def view(self, identity: Identity, own: SessionLists = ()) -> ClientView:
        """What `identity` may see; `own`: narrowed by what its session's own upstream sessions list."""
        client = self.config.clients.get(identity.client_id)
        profile = schema_profile(client.schema_profile if client else None, identity.provider)
        mode, always_list = settings_for(self.config, identity.client_id)
        snapshot = self.current()
        return snapshot.narrowed(snapshot.view(identity, profile, mode, always_list, self.config.policy.tool_groups),
                                 own)

    def request_view(self, identity: Identity, params: Mapping[str, JSON] | None, own: SessionLists = (), *,
                     only: str | None = None) -> ClientView:
        """The view for one request: the caller's, narrowed by the request's own run-level list if it has one.
        `only`: the request touches that one tool and nothing else (a call), so the run-level lists it carries
        (its session's header and its own `_meta`) are decided for that name alone (`narrow_to_name`): a list a
        client picks per request then costs one match, not one per tool."""
        meta = params.get("_meta") if params else None
        if isinstance(meta, Mapping) and RUN_LIST_META_KEY in meta:
            patterns, source = meta[RUN_LIST_META_KEY], f"_meta[{RUN_LIST_META_KEY!r}]"
            if isinstance(patterns, str):
                patterns = run_list(patterns, source)
            if not isinstance(patterns, list | tuple) or not all(isinstance(p, str) for p in patterns):
                raise InvalidRequest(f"{source} must be a list of tool patterns")
            identity = dataclasses.replace(identity, run_lists=(*identity.run_lists,
                                                                bounded_run_list(patterns, source)))
        if only is None or not identity.run_lists:
            return self.view(identity, own)
        unlisted = self.view(dataclasses.replace(identity, run_lists=()), own)
        return narrow_to_name(unlisted, identity, self.current().pipeline, only)
