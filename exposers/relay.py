"""The downstream side of a relay: one downstream request, able to receive the upstream's logs and progress and to
answer the upstream's sampling, elicitation and roots requests (see `consumers.relay`).

Messages go on the request's own stream (`related_request_id`), so each client gets only its own. A 2026-07-28
client takes no server->client requests: a handshake-era upstream's questions reach it as `input_required`
rounds (`exposers.input_rounds`); without those, the upstream gets an error that says why instead of a hang.
"""

from __future__ import annotations

import warnings
from typing import Protocol

import mcp_types as types
from mcp.server import ServerRequestContext
from mcp.shared.exceptions import MCPDeprecationWarning, MCPError
from mcp.shared.message import ServerMessageMetadata
from mcp_types import CLIENT_CAPABILITIES_META_KEY, LOG_LEVEL_META_KEY
from mcp_types.version import MODERN_PROTOCOL_VERSIONS

from consumers import JSON, Answer, Downstream, JSONObject
from exposers._sdk import request_channel
from exposers.sessions import LEVELS, DownstreamSession, wants_log


class Relay(Downstream, Protocol):
    """The way back to the client of one request: what an upstream sends about the request (logs, progress, its
    own questions) goes there. One per request, whatever transport carried it."""

    async def progress(self, params: JSONObject) -> None:
        """An upstream's progress notification params (`consumers.ProgressFn`), sent with the client's own token."""
        ...


class RequestRelay:
    """One request served by the SDK's handlers; `session`: the downstream session it belongs to (None for a
    request the SDK gives no connection)."""

    def __init__(self, ctx: ServerRequestContext, session: DownstreamSession | None) -> None:
        self.ctx = ctx
        self.session = session
        self.modern = self.era_2026
        """Takes `input_required` results (a 2026-07-28 client), not server->client requests."""

    @property
    def cancellation(self) -> JSONObject | None:
        """What the client said when it cancelled this request (`DownstreamSession.keep_cancellation`)."""
        return self.session.cancellation(self.ctx.request_id) if self.session is not None else None

    @property
    def era_2026(self) -> bool:
        return self.ctx.protocol_version in MODERN_PROTOCOL_VERSIONS

    @property
    def capabilities(self) -> JSONObject | None:
        if self.era_2026:
            return envelope_capabilities(self.ctx.params)
        return self.session.capabilities if self.session is not None else None

    @property
    def log_level(self) -> str | None:
        """2026-07-28: the level this request opted in to (none: no logs). Before: the session's, else all."""
        if self.era_2026:
            return envelope_log_level(self.ctx.params)
        return self.session.log_level if self.session is not None else LEVELS[0]

    async def log(self, params: types.LoggingMessageNotificationParams) -> None:
        if not wants_log(params.level, self.log_level):
            return
        with warnings.catch_warnings():  # logging is deprecated in 2026-07-28, still relayed for older clients
            warnings.simplefilter("ignore", MCPDeprecationWarning)
            dumped = params.model_dump(by_alias=True, mode="json", exclude_none=True)
        # as the upstream sent it: the SDK's `send_log_message` knows no `_meta`
        await request_channel(self.ctx).notify("notifications/message", dumped)

    async def progress(self, params: JSONObject) -> None:
        token = progress_token(self.ctx.params)
        if token is not None:  # as the upstream sent them: the SDK's `report_progress` knows no `_meta`
            await request_channel(self.ctx).notify("notifications/progress", {**params, "progressToken": token})

    async def ask(self, request: types.ServerRequest, result_type: type[Answer]) -> Answer | types.ErrorData:
        if self.era_2026:
            return cannot_ask(request.method, self.ctx.protocol_version)
        try:
            metadata = ServerMessageMetadata(related_request_id=self.ctx.request_id)
            return await self.ctx.session.send_request(request, result_type, metadata=metadata)
        except MCPError as exc:
            return exc.error


def cannot_ask(method: str, version: str) -> types.ErrorData:
    """What an upstream is told when it asks a 2026-07-28 client something outside input rounds."""
    return types.ErrorData(code=types.INVALID_REQUEST, message=(
        f"the client speaks {version}, which has no server-to-client requests, and this request was not "
        f"forwarded in input_required rounds; Triad cannot relay {method}"))


def progress_token(params: JSON) -> str | int | None:
    """The progress token a request carries (`_meta.progressToken`); None when it wants no progress."""
    meta = (params or {}).get("_meta")
    token = meta.get("progressToken") if isinstance(meta, dict) else None
    return token if isinstance(token, str | int) and not isinstance(token, bool) else None


def envelope_capabilities(params: JSON) -> JSONObject:
    """What a 2026-07-28 request says its client can do (`_meta`); nothing when it says nothing."""
    meta = (params or {}).get("_meta")
    declared = meta.get(CLIENT_CAPABILITIES_META_KEY) if isinstance(meta, dict) else None
    return declared if isinstance(declared, dict) else {}


def envelope_log_level(params: JSON) -> str | None:
    """The log level a 2026-07-28 request opted in to (`_meta`); None: it wants no logs."""
    meta = (params or {}).get("_meta")
    level = meta.get(LOG_LEVEL_META_KEY) if isinstance(meta, dict) else None
    return level if level in LEVELS else None
