"""What an upstream offers: its catalog, listed page by page as raw wire dicts."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

import mcp_types as types
from mcp import ClientSession
from mcp.shared.exceptions import MCPError

from consumers._json import JSONObject
from consumers._sdk import send_raw
from consumers.definitions import usable_tools
from consumers.errors import UpstreamError

ERA_META_PREFIX = "io.modelcontextprotocol/"
"""The 2026-07-28 per-request envelope and result stamp (`serverInfo`): an upstream's own, never passed on as
Triad's, and never forwarded across the hop (an upstream of the other era rejects it)."""
MAX_LIST_PAGES = 1000
"""A bound on pages per list, in case an upstream invents a new cursor forever."""

Tools = tuple[JSONObject, ...]
ListRequest = types.ListToolsRequest | types.ListResourcesRequest | types.ListResourceTemplatesRequest \
    | types.ListPromptsRequest
"""The paginated list requests `list_all` follows."""


@dataclass(frozen=True)
class Catalog:
    """What an upstream offers, as raw wire dicts (icons, `_meta`, annotations intact)."""

    tools: Tools = ()
    resources: tuple[JSONObject, ...] = ()
    templates: tuple[JSONObject, ...] = ()
    prompts: tuple[JSONObject, ...] = ()
    capabilities: JSONObject = field(default_factory=dict)
    server_info: JSONObject = field(default_factory=dict)
    protocol_version: str = ""
    page_meta: dict[str, JSONObject] = field(default_factory=dict)
    """Each list's result-level `_meta` (by list key: `tools`, `resources`...), the keys of all its pages merged
    (the first page that has a key gives its value), without the 2026-07-28 era keys."""
    notes: tuple[str, ...] = ()
    """What was repaired or dropped of the upstream's tool definitions (`consumers.definitions`)."""


async def list_catalog(name: str, session: ClientSession, init: types.InitializeResult | types.DiscoverResult | None,
                       previous: Catalog | None, check_tools: Callable[[Tools, str], Tools]) -> Catalog:
    """Every page of every family the upstream offers. `init` is the handshake or discovery result of a new
    connection; None re-lists on the same one (`previous` keeps its capabilities)."""
    if init is None:
        assert previous is not None
        caps, info, version = previous.capabilities, previous.server_info, previous.protocol_version
    else:
        caps = init.capabilities.model_dump(by_alias=True, mode="json", exclude_none=True)
        server_info = session.server_info if isinstance(init, types.DiscoverResult) else init.server_info
        info = server_info.model_dump(by_alias=True, mode="json", exclude_none=True) if server_info else {}
        version = session.protocol_version or ""
    meta: dict[str, JSONObject] = {}
    tools: Tools = ()
    notes: tuple[str, ...] = ()
    if "tools" in caps:
        usable, notes = usable_tools(name, await list_all(name, session, types.ListToolsRequest, "tools", meta))
        tools = check_tools(usable, version)
    resources: Tools = ()
    templates: Tools = ()
    prompts: Tools = ()
    if "resources" in caps:
        resources = await list_all(name, session, types.ListResourcesRequest, "resources", meta)
        templates = await list_templates(name, session, meta)
    if "prompts" in caps:
        prompts = await list_all(name, session, types.ListPromptsRequest, "prompts", meta)
    return Catalog(tools, resources, templates, prompts, caps, info, version, meta, notes)


async def list_templates(name: str, session: ClientSession, meta: dict[str, JSONObject] | None = None
                         ) -> tuple[JSONObject, ...]:
    """Every resource template, of an upstream that offers resources."""
    try:
        return await list_all(name, session, types.ListResourceTemplatesRequest, "resourceTemplates", meta)
    except MCPError as exc:  # templates are optional within `resources`: "no such method" means none
        if exc.error.code != types.METHOD_NOT_FOUND:
            raise
        return ()


async def list_all(name: str, session: ClientSession, request_type: type[ListRequest], key: str,
                   meta: dict[str, JSONObject] | None = None) -> tuple[JSONObject, ...]:
    """Follow `nextCursor` to the end; a cursor seen before is an error, never an endless loop. The pages'
    result-level `_meta` goes to `meta[key]` (`Catalog.page_meta`)."""
    items: list[JSONObject] = []
    seen: set[str] = set()
    cursor: str | None = None
    for _ in range(MAX_LIST_PAGES):
        params = types.PaginatedRequestParams(cursor=cursor) if cursor is not None else None
        page = await send_raw(session, request_type(params=params))
        listed = page.get(key)
        if listed is not None and not isinstance(listed, list):  # items are judged one by one; the page is not
            raise UpstreamError(name, f"{request_type.model_fields['method'].default}: the upstream's `{key}` is "
                                f"not a list but {type(listed).__name__}")
        # tools are judged one by one with a note (`consumers.definitions`); any other item that is not even an
        # object is nothing a client could use
        items.extend(item for item in listed or () if key == "tools" or isinstance(item, dict))
        page_meta = page.get("_meta")
        if meta is not None and isinstance(page_meta, dict):
            kept = meta.setdefault(key, {})
            for meta_key, value in page_meta.items():
                if not meta_key.startswith(ERA_META_PREFIX):
                    kept.setdefault(meta_key, value)
        cursor = page.get("nextCursor")
        if cursor is None:
            return tuple(items)
        if not isinstance(cursor, str):
            raise UpstreamError(name, f"{request_type.model_fields['method'].default}: the upstream's `nextCursor` "
                                "is not a string")
        if cursor in seen:
            raise UpstreamError(name, f"{request_type.model_fields['method'].default}: the upstream "
                                "repeated a pagination cursor")
        seen.add(cursor)
    raise UpstreamError(name, f"more than {MAX_LIST_PAGES} pages of {key}")
