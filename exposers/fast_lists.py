"""List pages for handshake-era sessions, serialised once per registry version (see `exposers.fast_path`).

The SDK's server validates and re-serialises every result it sends, tool by tool; for a list of hundreds of tools
that is most of the cost of a `tools/list`. A list page depends only on the caller's view, the protocol version
and the cursor, all fixed for a registry version, so Triad serialises each page once (through the SDK's own
per-version serialiser, so the bytes are what the SDK would send) and answers later requests with those bytes.
"""

from __future__ import annotations

import json
from typing import Any

from mcp_types.methods import serialize_server_result

from gateway.dispatch import Dispatcher
from gateway.errors import TriadError
from gateway.identity import Identity

MAX_CACHED_PAGES = 4096


class ListPages:
    def __init__(self, dispatcher: Dispatcher) -> None:
        self._dispatcher = dispatcher
        self.listers = {"tools/list": dispatcher.list_tools, "resources/list": dispatcher.list_resources,
                        "resources/templates/list": dispatcher.list_resource_templates,
                        "prompts/list": dispatcher.list_prompts}
        """The list methods served here: method -> the dispatcher's lister."""
        self._pages: dict[tuple[Identity, str, str, str | None], bytes] = {}
        self._version = -1

    async def reply(self, identity: Identity, version: str, message: dict[str, Any]) -> bytes | None:
        """The whole JSON-RPC response to a plain list request (at most a cursor and a progress token), or None
        when it is not one (a run-level list in `_meta`, a stale or foreign cursor: the SDK path says so)."""
        params = message.get("params") or {}
        if not isinstance(params, dict) or set(params) - {"cursor", "_meta"}:
            return None
        cursor, meta = params.get("cursor"), params.get("_meta")
        if (cursor is not None and not isinstance(cursor, str)) or (meta is not None and meta != {}
                                                                    and set(meta) != {"progressToken"}):
            return None
        await self._dispatcher.settled()
        if self._version != self._dispatcher.registry.version or len(self._pages) > MAX_CACHED_PAGES:
            self._pages, self._version = {}, self._dispatcher.registry.version
        method = message["method"]
        key = (identity, version, method, cursor)
        result = self._pages.get(key)
        if result is None:
            try:
                page = self.listers[method](identity, cursor)
            except TriadError:
                return None
            result = self._pages[key] = json.dumps(serialize_server_result(method, version, page),
                                                   separators=(",", ":")).encode()
        return b'{"jsonrpc":"2.0","id":' + json.dumps(message["id"]).encode() + b',"result":' + result + b"}"
