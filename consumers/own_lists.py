"""What a client's own upstream session lists (`sessions: per_client`), of what may differ from one session to
another: an upstream may list tools and prompts by its client's capabilities, and keeps session resources (and
their templates) per session. `consumers.per_client` lists them when a client's session opens and again when the
upstream says one changed on it; `gateway.registry.Snapshot.narrowed` narrows the client's view by them.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field

import mcp_types as types
from mcp import ClientSession

from consumers._json import JSON, JSONObject
from consumers.definitions import usable_tools
from consumers.listing import Catalog, list_all, list_templates

OWN_LISTS = {"notifications/tools/list_changed": "tools", "notifications/resources/list_changed": "resources",
             "notifications/prompts/list_changed": "prompts"}
"""Lists a client's own session keeps for that client (an upstream may list tools and prompts by the client's
capabilities, and keeps session resources per session; resource templates change with resources): a change on that
session re-lists them for that client only."""


@dataclass(frozen=True)
class OwnLists:
    """What one client's upstream session lists, of what may differ per session: its tool and prompt names, its
    resources and resource templates. Equal for equal lists, so list pages can be cached per distinct lists rather
    than per client."""

    tools: frozenset[str]
    resources: tuple[JSONObject, ...] | None = field(default=None, compare=False, hash=False)
    """The session's own resources; None when learned from another session with the same capabilities (no
    session of this client's yet, so no session resources: the catalog's resources stand)."""
    resources_key: str | None = None
    prompts: frozenset[str] | None = None
    """The names of the prompts the session lists; None where the upstream offers no prompts."""
    templates: frozenset[str] | None = None
    """The URI templates the session lists (as the upstream writes them); None where it offers no resources."""

    @classmethod
    def of(cls, tools: frozenset[str], resources: tuple[JSONObject, ...] | None,
           prompts: frozenset[str] | None = None, templates: frozenset[str] | None = None) -> OwnLists:
        key = json.dumps(resources, sort_keys=True, default=str) if resources is not None else None
        return cls(tools, resources, key, prompts, templates)

    def learned(self) -> OwnLists:
        """What another client declaring the same capabilities would see before its own session opens: the same
        names, not this session's own resources."""
        return OwnLists(self.tools, None, None, self.prompts, self.templates)


def own_families(catalog: Catalog) -> tuple[tuple[JSONObject, ...], ...]:
    """What of a catalog a client's own session may list otherwise: a change in it re-lists every client's."""
    return catalog.tools, catalog.resources, catalog.templates, catalog.prompts


async def list_own(upstream: str, session: ClientSession, offered: Mapping[str, JSON]) -> OwnLists:
    """What a client's session lists (of the families the upstream offers)."""
    # the catalog's notes say what was repaired or dropped: a client's session lists the same definitions
    tools = usable_tools(upstream, await list_all(upstream, session, types.ListToolsRequest, "tools"))[0] \
        if "tools" in offered else ()
    resources = await list_all(upstream, session, types.ListResourcesRequest, "resources") \
        if "resources" in offered else ()
    templates = await list_templates(upstream, session) if "resources" in offered else None
    prompts = await list_all(upstream, session, types.ListPromptsRequest, "prompts") if "prompts" in offered else None
    return OwnLists.of(_names(tools, "name") or frozenset(), resources,
                       _names(prompts, "name"), _names(templates, "uriTemplate"))


def _names(items: tuple[JSONObject, ...] | None, key: str) -> frozenset[str] | None:
    return frozenset(item[key] for item in items if isinstance(item.get(key), str)) if items is not None else None
