"""What speaking 2026-07-28 to an upstream takes beyond the handshake era: one `ModernLink` per upstream.

- Every request declares the client's capabilities in its `_meta`. Triad can only relay what the client it forwards
  for can do, so that client's own declaration replaces Triad's (Triad's own requests, such as lists, keep Triad's).
- A `tools/call` mirrors the arguments marked `x-mcp-header` into `Mcp-Param-*` headers; a tool whose marks are
  invalid is dropped (clients MUST).
- Changes are announced only on a `subscriptions/listen` stream, opened again whenever the set of subscribed
  resources changes.

Ownership: the `Upstream` creates its `ModernLink`; its owner task runs `listen()` while a 2026-07-28 connection
lasts (cancelled with it).
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

import anyio
from mcp import ClientSession
from mcp.client.subscriptions import ResourcesListChanged, ResourceUpdated, listen
from mcp.shared.dispatcher import CallOptions
from mcp.shared.inbound import find_invalid_x_mcp_header, mcp_param_headers, x_mcp_header_map
from mcp_types import CLIENT_CAPABILITIES_META_KEY
from mcp_types.version import MODERN_PROTOCOL_VERSIONS

from consumers._errors import describe_failure
from consumers._json import JSONObject
from consumers._sdk import Stamp, wrap_stamp
from consumers.listing import Tools
from consumers.relay import CURRENT_DOWNSTREAM

logger = logging.getLogger("triad.upstream")



class ModernLink:
    def __init__(self, name: str, on_relist: Callable[[], None], on_updated: Callable[[str, str], None],
                 subscriptions: Callable[[], tuple[str, ...]]) -> None:
        self._name = name
        self._on_relist = on_relist
        self._on_updated = on_updated
        self._subscriptions = subscriptions
        self._header_maps: dict[Any, dict[tuple[str, ...], str]] = {}
        """Per raw tool name, the arguments a `tools/call` mirrors into `Mcp-Param-*` headers."""
        self._changed = anyio.Event()

    def stamp_for_callers(self, session: ClientSession) -> None:
        """The SDK stamps each request's envelope and headers with no public hook (`consumers._sdk.wrap_stamp`):
        this adds the caller's capabilities and the `Mcp-Param-*` headers (the SDK learns those only through its
        typed `list_tools`, which Triad does not use)."""

        def for_caller(stamp: Stamp) -> Stamp:
            def stamp_for_caller(data: JSONObject, options: CallOptions) -> None:
                stamp(data, options)
                params = data.get("params") or {}
                downstream = CURRENT_DOWNSTREAM.get()
                if downstream is not None and downstream.capabilities is not None:
                    params["_meta"][CLIENT_CAPABILITIES_META_KEY] = downstream.capabilities
                header_map = self._header_maps.get(params.get("name")) if data["method"] == "tools/call" else None
                if header_map:
                    arguments = params.get("arguments") or {}
                    options.setdefault("headers", {}).update(mcp_param_headers(header_map, arguments))

            return stamp_for_caller

        wrap_stamp(session, for_caller)

    def checked_tools(self, tools: Tools, version: str) -> Tools:
        """Tools with invalid `x-mcp-header` marks dropped, the others' marks remembered (2026-07-28 only)."""
        if version not in MODERN_PROTOCOL_VERSIONS:
            return tools
        kept, maps = [], {}
        for tool in tools:
            schema = tool.get("inputSchema")
            if (reason := find_invalid_x_mcp_header(schema)) is not None:
                logger.warning("upstream %s: tool %r dropped: invalid x-mcp-header (%s)", self._name,
                               tool.get("name"), reason)
                continue
            if header_map := x_mcp_header_map(schema):
                maps[tool.get("name")] = header_map
            kept.append(tool)
        self._header_maps = maps
        return tuple(kept)

    def subscriptions_changed(self) -> None:
        self._changed.set()

    async def listen(self, session: ClientSession, capabilities: JSONObject) -> None:
        while True:
            changed = self._changed = anyio.Event()
            async with anyio.create_task_group() as tg:
                tg.start_soon(self._listen_once, session, capabilities, self._subscriptions())
                await changed.wait()
                tg.cancel_scope.cancel()

    async def _listen_once(self, session: ClientSession, capabilities: JSONObject, uris: tuple[str, ...]) -> None:
        tools, prompts, resources = (bool((capabilities.get(family) or {}).get("listChanged"))
                                     for family in ("tools", "prompts", "resources"))
        if not (tools or prompts or resources or uris):
            return
        try:
            async with listen(session, tools_list_changed=tools, prompts_list_changed=prompts,
                              resources_list_changed=resources, resource_subscriptions=uris) as subscription:
                async for event in subscription:
                    if isinstance(event, ResourceUpdated):
                        self._on_updated(self._name, event.uri)
                    elif not isinstance(event, ResourcesListChanged) or resources:
                        self._on_relist()
        except Exception as exc:  # the upstream still serves calls; only its change notices are lost
            logger.warning("upstream %s: its subscriptions/listen stream failed (%s); changes will not be seen "
                           "until it reconnects or a subscription changes", self._name, describe_failure(exc))
