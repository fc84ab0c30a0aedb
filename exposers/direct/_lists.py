"""List pages serialised once per registry version (see `exposers.direct`), for clients of both eras.

The SDK's server validates and re-serialises every result it sends, tool by tool; for a list of hundreds of tools
that is most of the cost of a `tools/list`. A list page depends only on the caller's view, the protocol version
and the cursor, all fixed for a registry version, so Triad serialises each page once and answers later requests
with those bytes. The SDK's own per-version serialiser checks each page, and adds for 2026-07-28 the cache hint,
`resultType` and `serverInfo` stamp, while the items stay as their upstreams sent them (`exposers.raw_results`).
"""

from __future__ import annotations

from collections.abc import Mapping

from mcp_types import CLIENT_CAPABILITIES_META_KEY, CLIENT_INFO_META_KEY, LOG_LEVEL_META_KEY, PROTOCOL_VERSION_META_KEY
from mcp_types.methods import serialize_server_result
from mcp_types.version import MODERN_PROTOCOL_VERSIONS
from pydantic import ValidationError

from consumers import JSON, JSONObject, dumps
from exposers.raw_results import unsieved
from exposers.request import caller_session
from exposers.server import CACHE_HINT, complete, stamp_server_info
from gateway.calls import Dispatcher
from gateway.errors import TriadError
from gateway.hooks import Session
from gateway.identity import Identity
from gateway.registry import SessionLists

MAX_CACHED_PAGES = 4096


ENVELOPE_KEYS = frozenset({PROTOCOL_VERSION_META_KEY, CLIENT_INFO_META_KEY, CLIENT_CAPABILITIES_META_KEY,
                           LOG_LEVEL_META_KEY})
"""What a 2026-07-28 request's `_meta` carries about its client, besides a progress token."""


class ListPages:
    def __init__(self, dispatcher: Dispatcher, server_info: Mapping[str, JSON]) -> None:
        self._dispatcher = dispatcher
        self._server_info = server_info
        self.listers = {"tools/list": dispatcher.list_tools, "resources/list": dispatcher.list_resources,
                        "resources/templates/list": dispatcher.list_resource_templates,
                        "prompts/list": dispatcher.list_prompts}
        """The list methods served here: method -> the dispatcher's lister."""
        self._pages: dict[tuple[Identity, str, str, str | None, SessionLists], bytes] = {}
        self._version = -1

    async def reply(self, identity: Identity, version: str, message: JSONObject, session: Session | None = None
                    ) -> bytes | None:
        """The whole JSON-RPC response to a plain list request (at most a cursor, a progress token and a 2026-07-28
        envelope), or None when it is not one (a run-level list in `_meta`, a stale or foreign cursor: the SDK
        path says so)."""
        params = message.get("params") or {}
        if not isinstance(params, dict) or set(params) - {"cursor", "_meta"}:
            return None
        modern = version in MODERN_PROTOCOL_VERSIONS
        cursor, meta = params.get("cursor"), params.get("_meta") or {}
        if (cursor is not None and not isinstance(cursor, str)) or not isinstance(meta, dict) or (
                set(meta) - {"progressToken"} - (ENVELOPE_KEYS if modern else frozenset())):
            return None
        await self._dispatcher.settled()
        if self._version != self._dispatcher.registry.version or len(self._pages) > MAX_CACHED_PAGES:
            self._pages, self._version = {}, self._dispatcher.registry.version
        method = message["method"]
        # every list shows what the session's own upstream sessions list (`sessions: per_client`): pages are cached
        # per distinct such lists, never shared between sessions whose upstream sessions list differently
        if session is None and modern:  # a 2026-07-28 request's session is its own
            session = Session()
        config = self._dispatcher.config
        own = await self._dispatcher.own_lists(caller_session(config, session, identity, params) if session else None)
        key = (identity, version, method, cursor, own)
        result = self._pages.get(key)
        if result is None:
            try:
                page = self.listers[method](identity, cursor, None, own)
            except TriadError:
                return None
            if modern:  # as the SDK shapes a 2026-07-28 result: the hint, resultType, the sieve, the stamp
                page = complete({"ttlMs": CACHE_HINT.ttl_ms, "cacheScope": CACHE_HINT.scope, **page})
            try:
                shaped = unsieved(page, serialize_server_result(method, version, page), version)
            except ValidationError:  # the SDK's path logs it and answers its error
                return None
            if modern:
                shaped = stamp_server_info(shaped, self._server_info)
            result = self._pages[key] = dumps(shaped)
        return b'{"jsonrpc":"2.0","id":' + dumps(message["id"]) + b',"result":' + result + b"}"
