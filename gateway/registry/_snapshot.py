"""One registry version and every cache computed from it: the per-client views, the normalised input schemas, the
parsed URI templates.

A `Snapshot` is built whole for each registry version and swapped in by one assignment (`Dispatcher`), so no cache
can outlive its version or be invalidated on its own; an old snapshot still in use by a request in flight stays
consistent until that request ends. Caches are bounded: views of identities the config names (`MAX_CACHED_VIEWS`)
and views narrowed by run-level lists, which clients choose freely (`MAX_CACHED_RUN_LIST_VIEWS`, least recently
used first, never pushing a client's own view out).
"""

from __future__ import annotations

import dataclasses
import logging
from collections import OrderedDict
from collections.abc import Callable, Mapping, Sequence
from typing import Literal

from mcp.shared.inbound import x_mcp_header_map
from mcp.shared.uri_template import UriTemplate

from consumers import JSONObject, OwnLists
from gateway.config import ToolsMode
from gateway.identity import Identity
from gateway.registry._descriptors import Registry
from gateway.registry._views import ClientView, SessionLists, build_view, narrow_by_run_list, narrow_view
from policy import Pipeline

logger = logging.getLogger("triad.dispatch")

MAX_CACHED_VIEWS = 1024
"""Views of identities without run-level lists, which the config bounds; past this many, the cache starts over."""
MAX_CACHED_RUN_LIST_VIEWS = 64
"""Views narrowed by run-level lists, which clients choose freely: the least recently used goes first, and they
never push a client's own view out of the cache above."""
MAX_CACHED_SESSION_VIEWS = 256
"""Views narrowed by what sessions' own upstream sessions list (`sessions: per_client`): equal lists share one, the
least recently used goes first."""


ListedKind = Literal["tool", "resource", "template", "prompt"]
"""The kinds of entry of an upstream's catalog."""
ListedMask = Callable[[ListedKind, JSONObject], JSONObject | None]
"""A catalog entry (of its kind) as clients may see it; None: withheld (`gateway.hooks.HookChain.listed`)."""


def _unmasked(kind: ListedKind, item: JSONObject) -> JSONObject:
    return item


class Snapshot:
    def __init__(self, registry: Registry, pipeline: Pipeline, listed: ListedMask = _unmasked) -> None:
        self.registry = registry
        self._listed = listed
        """What a session's own resources (`narrowed`) pass on their way to lists, as the catalogs did."""
        self.pipeline = pipeline
        """The policy the views of this snapshot were computed with (a reload makes a new snapshot)."""
        self._views: dict[Identity, ClientView] = {}
        self._run_list_views: OrderedDict[Identity, ClientView] = OrderedDict()
        self._session_views: OrderedDict[tuple[Identity, str | None, SessionLists], ClientView] = OrderedDict()
        self.schemas: dict[tuple[str, str], JSONObject] = {}
        """Normalised input schemas by (profile, tool)."""
        self._templates: list[tuple[str, UriTemplate]] | None = None
        self._param_headers: dict[str, bool] = {}

    @property
    def cached_views(self) -> int:
        return len(self._views) + len(self._run_list_views)

    def view(self, identity: Identity, profile: str | None, mode: ToolsMode = "all", always_list: Sequence[str] = (),
             tool_groups: Mapping[str, Sequence[str]] | None = None) -> ClientView:
        """What `identity` may see of this version, computed once (per identity) and cached; `mode`,
        `always_list` and `tool_groups` come from the config of this snapshot's version."""
        narrowed = bool(identity.run_lists)
        cache = self._run_list_views if narrowed else self._views
        view = cache.get(identity)
        if view is not None:
            if narrowed:
                self._run_list_views.move_to_end(identity)
            return _for(view, identity)
        if not narrowed and len(self._views) >= MAX_CACHED_VIEWS:
            self._views = {}
        if narrowed:  # the view without its last list, narrowed by it (`narrow_by_run_list`)
            fewer = dataclasses.replace(identity, run_lists=identity.run_lists[:-1])
            view = narrow_by_run_list(self.view(fewer, profile, mode, always_list, tool_groups), identity,
                                      self.registry, self.pipeline)
        else:
            view = build_view(self.registry, identity, self.pipeline, profile, self.schemas, mode, always_list,
                              tool_groups)
        if narrowed:
            self._run_list_views[identity] = view
            if len(self._run_list_views) > MAX_CACHED_RUN_LIST_VIEWS:
                self._run_list_views.popitem(last=False)
        else:
            self._views[identity] = view
        return view

    def narrowed(self, view: ClientView, own: SessionLists) -> ClientView:
        """`view` narrowed by a session's own lists (`gateway.registry.narrow_view`), cached per distinct lists."""
        if not own:
            return view
        key = (view.identity, view.profile, own)
        found = self._session_views.get(key)
        if found is not None:
            self._session_views.move_to_end(key)
            return _for(found, view.identity)
        found = self._session_views[key] = narrow_view(view, self.registry, self._shown(own))
        if len(self._session_views) > MAX_CACHED_SESSION_VIEWS:
            self._session_views.popitem(last=False)
        return found

    def _shown(self, own: SessionLists) -> SessionLists:
        """A session's own lists with its own resources as clients may see them (masked once per distinct lists)."""
        def shown(lists: OwnLists | None) -> OwnLists | None:
            if lists is None or not lists.resources:
                return lists
            kept = tuple(found for item in lists.resources if (found := self._listed("resource", item)) is not None)
            return dataclasses.replace(lists, resources=kept)
        return tuple((name, shown(lists)) for name, lists in own)

    def declares_param_headers(self, name: str) -> bool:
        """Whether the tool exposed as `name` maps arguments to `Mcp-Param-*` headers (`x-mcp-header` in its input
        schema, 2026-07-28): only then must a call's headers be compared with its arguments. Walked once per
        version: the walk costs more than the rest of a call's checks."""
        found = self._param_headers.get(name)
        if found is None:
            descriptor = self.registry.tools.get(name)
            if descriptor is None:  # not kept: names are the client's choice, tools are not
                return False
            found = self._param_headers[name] = bool(x_mcp_header_map(descriptor.input_schema))
        return found

    def templates(self) -> list[tuple[str, UriTemplate]]:
        """The registry's resource templates, parsed once (for routing reads when URIs are not namespaced)."""
        if self._templates is None:
            parsed = []
            for entry in self.registry.templates:
                try:
                    parsed.append((entry.upstream, UriTemplate.parse(entry.raw)))
                except ValueError:
                    logger.warning("upstream %s offers an invalid URI template; it cannot route reads", entry.upstream)
            self._templates = parsed
        return self._templates


def _for(view: ClientView, identity: Identity) -> ClientView:
    """A cached view as `identity`'s own: the caches key on identities, whose equality leaves out the OAuth
    principal, so a view cached for one subject of a client carries that subject until it is replaced here (the
    audit log and whatever else reads `view.identity` must see the caller's own)."""
    return view if view.identity.principal == identity.principal else dataclasses.replace(view, identity=identity)
