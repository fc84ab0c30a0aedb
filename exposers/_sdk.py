"""Every private part of the MCP SDK the exposer side relies on, in one place (mcp 2.3.x).

Each function states one assumption about the SDK's internals; `tests/test_sdk_contract.py` checks each against
the installed SDK and fails naming the SDK version when one no longer holds, so a rename breaks a test with its
cause instead of silently switching a feature off. Nothing else in `exposers/` touches an SDK attribute that
starts with `_`.

- `connection_of`: a handshake-era request's `Connection` is reached as `ServerSession._connection` (2.3.0 has no
  public accessor); Triad's state of the session is found by it in `exposers.sessions`.
- `session_transport` / `held`: a request served on Triad's direct HTTP path must count as activity of its
  session, as `StreamableHTTPServerTransport.handle_request` counts its own (`_requests_in_flight`,
  `_idle_timeout`, `idle_scope`); the transport is found in `StreamableHTTPSessionManager._server_instances`
  (`live_transports`: all of them, whose GET streams a drain ends).
- `SESSION_LOGGERS`: the SDK's session managers log session ids in clear (a session id is a bearer secret);
  `hide_session_ids` filters those loggers' records (and drops their per-request credential-mismatch lines).
- `request_channel`: a request's own outbound channel (its `DispatchContext`: on streamable HTTP the request's
  stream) is `ServerSession._request_outbound`; its `notify(method, params)` sends params as given, where the
  session's typed helpers (`report_progress`) re-type numbers and know no `_meta`.
- `sse_session_owner`: the SDK binds a legacy SSE session to its opener in `SseServerTransport._session_owners`;
  Triad reads it to count a request with another identity's session id as a failed authentication.
- `drop_idle_tracing`: the SDK pre-installs `mcp.server._otel.OpenTelemetryMiddleware` on every server; with no
  tracer provider it only costs CPU per request.
"""

from __future__ import annotations

import contextlib
import importlib.metadata
import logging
import math
import re
from collections.abc import Callable, Iterator
from uuid import UUID

import anyio
from mcp.server import Server, ServerRequestContext
from mcp.server._otel import OpenTelemetryMiddleware
from mcp.server.auth.middleware.bearer_auth import AuthorizationContext
from mcp.server.connection import Connection
from mcp.server.sse import SseServerTransport
from mcp.server.streamable_http import StreamableHTTPServerTransport
from mcp.server.streamable_http_manager import StreamableHTTPSessionManager
from mcp.shared.dispatcher import Outbound

SUPPORTED_SDK = ((2, 3), (2, 4))
"""The `mcp` releases this module was written against: at least 2.3, below 2.4."""


def sdk_version() -> str:
    return importlib.metadata.version("mcp")


def check_sdk_version(version: str | None = None) -> None:
    """Refuse to start on an SDK outside the range whose internals this module knows."""
    version = version or sdk_version()
    parts = tuple(int(p) for p in version.split(".")[:2] if p.isdigit())
    low, high = SUPPORTED_SDK
    if not low <= parts < high:
        raise ImportError(f"Triad needs mcp >={low[0]}.{low[1]},<{high[0]}.{high[1]} (its exposer relies on that "
                          f"release's internals, see exposers/_sdk.py); installed: mcp {version}")


check_sdk_version()


def connection_of(ctx: ServerRequestContext) -> Connection | None:
    """The connection a request arrived on; None for a 2026-07-28 request's throwaway session."""
    connection = ctx.session._connection
    return connection if isinstance(connection, Connection) else None


def request_channel(ctx: ServerRequestContext) -> Outbound:
    """The channel of the request `ctx` serves: notifications sent on it belong to that request."""
    return ctx.session._request_outbound


def session_transport(manager: StreamableHTTPSessionManager, session_id: str) -> StreamableHTTPServerTransport | None:
    """The live transport of a handshake-era HTTP session; None once it ended, expired or is idle-cancelled."""
    transport = manager._server_instances.get(session_id)
    if transport is None or transport.is_terminated:
        return None
    if transport.idle_scope is not None and transport.idle_scope.cancel_called:
        return None
    return transport


def live_transports(manager: StreamableHTTPSessionManager) -> list[StreamableHTTPServerTransport]:
    """The transports of every live handshake-era HTTP session (`_server_instances`)."""
    return [transport for transport in manager._server_instances.values() if not transport.is_terminated]


@contextlib.contextmanager
def held(transport: StreamableHTTPServerTransport) -> Iterator[None]:
    """The session counts a request in flight (its idle countdown suspended), as in the SDK's `handle_request`."""
    idle = transport.idle_scope
    timeout = transport._idle_timeout
    if idle is None or timeout is None:
        yield
        return
    transport._requests_in_flight += 1
    idle.deadline = math.inf
    try:
        yield
    finally:
        transport._requests_in_flight -= 1
        if not transport._requests_in_flight:
            idle.deadline = anyio.current_time() + timeout


def drop_idle_tracing(server: Server) -> None:
    """Remove the SDK's pre-installed OpenTelemetry middleware (used when tracing is off)."""
    server.middleware[:] = [m for m in server.middleware if not isinstance(m, OpenTelemetryMiddleware)]


SESSION_LOGGERS = ("mcp.server.streamable_http_manager", "mcp.server.streamable_http", "mcp.server.sse")
"""The SDK modules whose log lines name sessions (by their ids: 32 hex digits, or a UUID with dashes)."""
_SESSION_ID = re.compile(r"\b[0-9a-f]{8}-?[0-9a-f]{4}-?[0-9a-f]{4}-?[0-9a-f]{4}-?[0-9a-f]{12}\b")


MISMATCH_LINES = ("Rejecting request for session", "Rejecting message for session")
"""The SDK's WARNING for each request with another identity's session id: one line per request, at any rate a client
likes; Triad counts these requests itself (`exposers._throttle`, summarised), so these lines are dropped."""


class _SessionIdFilter(logging.Filter):
    def __init__(self, label: Callable[[str], str]) -> None:
        super().__init__()
        self._label = label

    def filter(self, record: logging.LogRecord) -> bool:
        if isinstance(record.msg, str) and record.msg.startswith(MISMATCH_LINES):
            return False
        message = record.getMessage()
        hidden = _SESSION_ID.sub(lambda found: self._label(found.group().replace("-", "")), message)
        if hidden != message:
            record.msg, record.args = hidden, None
        return True


def hide_session_ids(label: Callable[[str], str]) -> None:
    """Replace session ids in the SDK's log records by `label(id)` (once per process)."""
    for name in SESSION_LOGGERS:
        found = logging.getLogger(name)
        if not any(isinstance(f, _SessionIdFilter) for f in found.filters):
            found.addFilter(_SessionIdFilter(label))


def sse_session_owner(transport: SseServerTransport, session_id: UUID) -> AuthorizationContext | None:
    """Who opened a legacy SSE session, as the SDK bound it (`SseServerTransport._session_owners`); None: unknown."""
    return transport._session_owners.get(session_id)
