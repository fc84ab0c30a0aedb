"""The downstream side of a relay: one downstream request, able to receive the upstream's logs and progress and to
answer the upstream's sampling, elicitation and roots requests (see `consumers.relay`).

Messages go on the request's own stream (`related_request_id`), so each client gets only its own. A 2026-07-28
client takes no server->client requests: a handshake-era upstream's questions reach it as `input_required`
rounds (`exposers.input_rounds`); without those, the upstream gets an error that says why instead of a hang.
"""

from __future__ import annotations

import warnings
from typing import Any, Protocol

import anyio
import mcp_types as types
from mcp.server import ServerRequestContext
from mcp.server.connection import Connection
from mcp.shared.exceptions import MCPDeprecationWarning, MCPError
from mcp.shared.message import ServerMessageMetadata
from mcp_types import CLIENT_CAPABILITIES_META_KEY, LOG_LEVEL_META_KEY
from mcp_types.version import MODERN_PROTOCOL_VERSIONS

from consumers import Downstream
from exposers._sdk import connection_of, request_channel


class Relay(Downstream, Protocol):
    """The way back to the client of one request: what an upstream sends about the request (logs, progress, its
    own questions) goes there. One per request, whatever transport carried it."""

    async def progress(self, params: dict[str, Any]) -> None:
        """An upstream's progress notification params (`consumers.ProgressFn`), sent with the client's own token."""
        ...


LOG_LEVEL_STATE_KEY = "triad.log_level"
CANCEL_REASONS_STATE_KEY = "triad.cancel_reasons"
MAX_CANCEL_REASONS = 64
"""Reasons of a session's cancellations kept for its requests' upstream cancellations (the latest ones: a reason
is read within moments of its notification, or never)."""
LEVELS = ("debug", "info", "notice", "warning", "error", "critical", "alert", "emergency")


class RequestRelay:
    def __init__(self, ctx: ServerRequestContext[Any]) -> None:
        self.ctx = ctx
        self.modern = self.era_2026
        """Takes `input_required` results (a 2026-07-28 client), not server->client requests."""

    @property
    def cancel_reason(self) -> str | None:
        """The reason the client gave when it cancelled this request (`keep_cancel_reason`)."""
        reasons = connection_state(self.ctx).get(CANCEL_REASONS_STATE_KEY)
        return reasons.get(self.ctx.request_id) if isinstance(reasons, dict) else None

    @property
    def era_2026(self) -> bool:
        return self.ctx.protocol_version in MODERN_PROTOCOL_VERSIONS

    @property
    def capabilities(self) -> dict[str, Any] | None:
        if self.era_2026:
            return envelope_capabilities(self.ctx.params)
        return declared_capabilities(connection_of(self.ctx))

    @property
    def log_level(self) -> str | None:
        """2026-07-28: the level this request opted in to (none: no logs). Before: the session's, else all."""
        if self.era_2026:
            return envelope_log_level(self.ctx.params)
        return session_log_level(connection_of(self.ctx))

    async def log(self, params: types.LoggingMessageNotificationParams) -> None:
        if not wants_log(params.level, self.log_level):
            return
        with warnings.catch_warnings():  # logging is deprecated in 2026-07-28, still relayed for older clients
            warnings.simplefilter("ignore", MCPDeprecationWarning)
            await self.ctx.session.send_log_message(params.level, params.data, logger=params.logger,
                                                    related_request_id=self.ctx.request_id)

    async def progress(self, params: dict[str, Any]) -> None:
        token = progress_token(self.ctx.params)
        if token is not None:  # as the upstream sent them: the SDK's `report_progress` knows no `_meta`
            await request_channel(self.ctx).notify("notifications/progress", {**params, "progressToken": token})

    async def ask(self, request: Any, result_type: Any) -> Any:
        if self.era_2026:
            return cannot_ask(request.method, self.ctx.protocol_version)
        try:
            metadata = ServerMessageMetadata(related_request_id=self.ctx.request_id)
            return await self.ctx.session.send_request(request, result_type, metadata=metadata)
        except MCPError as exc:
            return exc.error


class SessionRelay:
    """A handshake-era session's own channel to its client, outside any request (its standalone stream; stdio's
    pipe): where a per-client upstream session's logs and requests go when no call of the client is in flight
    (server-filesystem asks for roots right after `initialize`). A request the client does not answer within
    `ASK_TIMEOUT` (an HTTP client without a GET stream never sees it) gets an error, never a hang."""

    modern = False
    cancel_reason = None  # a session is never cancelled; its requests are

    def __init__(self, connection: Connection) -> None:
        self.connection = connection
        """The session's connection (also for notifications not about a request: a task's status)."""

    @property
    def capabilities(self) -> dict[str, Any] | None:
        return declared_capabilities(self.connection)

    @property
    def log_level(self) -> str | None:
        return session_log_level(self.connection)

    async def log(self, params: types.LoggingMessageNotificationParams) -> None:
        if not wants_log(params.level, self.log_level):
            return
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", MCPDeprecationWarning)
            await self.connection.log(params.level, params.data, params.logger)

    async def progress(self, params: dict[str, Any]) -> None:
        """Progress belongs to a request; a session has none of its own."""

    async def lists_changed(self, family: str) -> None:
        """One of the session's own lists changed (`consumers.relay.ListsChanged`)."""
        await self.connection.notify(f"notifications/{family}/list_changed", None)

    async def ask(self, request: Any, result_type: Any) -> Any:
        try:
            with anyio.fail_after(ASK_TIMEOUT):
                answer = await self.connection.send_raw_request(
                    request.method, request.params.model_dump(by_alias=True, mode="json", exclude_none=True)
                    if request.params is not None else None)
            return result_type.model_validate(answer, by_name=False)
        except MCPError as exc:
            return exc.error
        except TimeoutError:
            return types.ErrorData(code=types.INTERNAL_ERROR, message=(
                f"the client did not answer {request.method} within {ASK_TIMEOUT:g}s"))
        except ValueError:
            return types.ErrorData(code=types.INVALID_PARAMS, message=f"the client's answer to {request.method} "
                                   "is not valid")


ASK_TIMEOUT = 60.0
"""How long a request put to a client outside any call may wait for its answer."""


def cannot_ask(method: str, version: str) -> types.ErrorData:
    """What an upstream is told when it asks a 2026-07-28 client something outside input rounds."""
    return types.ErrorData(code=types.INVALID_REQUEST, message=(
        f"the client speaks {version}, which has no server-to-client requests, and this request was not "
        f"forwarded in input_required rounds; Triad cannot relay {method}"))


def progress_token(params: Any) -> str | int | None:
    """The progress token a request carries (`_meta.progressToken`); None when it wants no progress."""
    meta = (params or {}).get("_meta")
    token = meta.get("progressToken") if isinstance(meta, dict) else None
    return token if isinstance(token, str | int) and not isinstance(token, bool) else None


def envelope_capabilities(params: Any) -> dict[str, Any]:
    """What a 2026-07-28 request says its client can do (`_meta`); nothing when it says nothing."""
    meta = (params or {}).get("_meta")
    declared = meta.get(CLIENT_CAPABILITIES_META_KEY) if isinstance(meta, dict) else None
    return declared if isinstance(declared, dict) else {}


def envelope_log_level(params: Any) -> str | None:
    """The log level a 2026-07-28 request opted in to (`_meta`); None: it wants no logs."""
    meta = (params or {}).get("_meta")
    level = meta.get(LOG_LEVEL_META_KEY) if isinstance(meta, dict) else None
    return level if level in LEVELS else None


def session_log_level(connection: Connection | None) -> str:
    """The level a handshake-era session set with `logging/setLevel`; all messages until it sets one."""
    return (connection.state.get(LOG_LEVEL_STATE_KEY) if connection is not None else None) or LEVELS[0]


def declared_capabilities(connection: Connection | None) -> dict[str, Any] | None:
    """What a handshake-era client declared in `initialize`; None when unknown."""
    client = connection.client_params if connection is not None else None
    return client.capabilities.model_dump(by_alias=True, mode="json", exclude_none=True) if client else None


def keep_cancel_reason(connection: Connection, params: Any) -> None:
    """A client's `notifications/cancelled`: the SDK's server cancels the request itself and keeps no reason, so
    the reason is kept here (in the session's state, bounded) for the upstream's cancellation, which the SDK's
    client sends after this runs (the SDK hands the notification on before the cancelled call unwinds)."""
    found = params if isinstance(params, dict) else {}
    reason, request_id = found.get("reason"), found.get("requestId")
    # unvalidated here: anything but a JSON-RPC id (a string or an integer) names no request
    if not isinstance(reason, str) or not isinstance(request_id, str | int) or isinstance(request_id, bool):
        return
    reasons = connection.state.setdefault(CANCEL_REASONS_STATE_KEY, {})
    reasons[request_id] = reason
    while len(reasons) > MAX_CANCEL_REASONS:
        del reasons[next(iter(reasons))]


def connection_state(ctx: ServerRequestContext[Any]) -> dict[str, Any]:
    connection = connection_of(ctx)
    return connection.state if connection is not None else {}


def takes_tasks(connection: Connection | None) -> bool:
    """A handshake-era client that declared the tasks capability (2025-11-25) can run a tool as a task. A
    2026-07-28 request takes tasks in any case: it declares the extension per request, and a call that needs it
    and does not gets -32021 (`gateway.tasks`; `gateway.registry.TAKES_TASKS`)."""
    return "tasks" in (declared_capabilities(connection) or {})


def wants_log(level: str, wanted: str | None) -> bool:
    """A log message at `level` goes to a client that asked for `wanted` and above (None: no logs)."""
    return wanted is not None and LEVELS.index(level) >= LEVELS.index(wanted)
