"""The downstream side of a relay: one downstream request, able to receive the upstream's logs and answer the
upstream's sampling, elicitation and roots requests (see `consumers.relay`).

Messages go on the request's own stream (`related_request_id`), so each client gets only its own. A downstream
that cannot take server->client requests (2026-07-28 or stateless HTTP) gets nothing sent; the upstream gets an
error that says why instead of a hang.
"""

from __future__ import annotations

import warnings
from typing import Any

import mcp_types as types
from mcp.server import ServerRequestContext
from mcp.shared.exceptions import MCPDeprecationWarning, MCPError
from mcp.shared.message import ServerMessageMetadata
from mcp_types.version import MODERN_PROTOCOL_VERSIONS

LOG_LEVEL_STATE_KEY = "triad.log_level"
LOG_LEVEL_META_KEY = "io.modelcontextprotocol/logLevel"
CLIENT_CAPABILITIES_META_KEY = "io.modelcontextprotocol/clientCapabilities"
LEVELS = ("debug", "info", "notice", "warning", "error", "critical", "alert", "emergency")


class RequestRelay:
    def __init__(self, ctx: ServerRequestContext[Any]) -> None:
        self.ctx = ctx
        self._metadata = ServerMessageMetadata(related_request_id=ctx.request_id)
        self.modern = ctx.protocol_version in MODERN_PROTOCOL_VERSIONS

    @property
    def capabilities(self) -> dict[str, Any] | None:
        if self.modern:
            meta = (self.ctx.params or {}).get("_meta")
            declared = meta.get(CLIENT_CAPABILITIES_META_KEY) if isinstance(meta, dict) else None
            return declared if isinstance(declared, dict) else {}
        client = getattr(getattr(self.ctx.session, "_connection", None), "client_params", None)
        if client is None:
            return None
        return client.capabilities.model_dump(by_alias=True, mode="json", exclude_none=True)

    @property
    def log_level(self) -> str | None:
        """2026-07-28: the level this request opted in to (none: no logs). Before: the session's, else all."""
        if self.modern:
            meta = (self.ctx.params or {}).get("_meta")
            level = meta.get(LOG_LEVEL_META_KEY) if isinstance(meta, dict) else None
            return level if level in LEVELS else None
        connection = getattr(self.ctx.session, "_connection", None)
        return (connection.state.get(LOG_LEVEL_STATE_KEY) if connection is not None else None) or LEVELS[0]

    async def log(self, params: types.LoggingMessageNotificationParams) -> None:
        wanted = self.log_level
        if wanted is None or LEVELS.index(params.level) < LEVELS.index(wanted):
            return
        with warnings.catch_warnings():  # logging is deprecated in 2026-07-28, still relayed for older clients
            warnings.simplefilter("ignore", MCPDeprecationWarning)
            await self.ctx.session.send_log_message(params.level, params.data, logger=params.logger,
                                                    related_request_id=self.ctx.request_id)

    async def ask(self, request: Any, result_type: Any) -> Any:
        if self.modern:
            return types.ErrorData(code=types.INVALID_REQUEST, message=(
                f"the client speaks {self.ctx.protocol_version}, which has no server-to-client requests; Triad "
                f"does not translate {request.method} into an input_required result yet"))
        try:
            return await self.ctx.session.send_request(request, result_type, metadata=self._metadata)
        except MCPError as exc:
            return exc.error
