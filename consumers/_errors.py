"""Mapping foreign failures (the SDK's MCPError, transports, exception groups) to Triad's upstream errors."""

from __future__ import annotations

import re

import anyio
import mcp_types as types
from mcp.shared.exceptions import MCPError

from consumers.errors import UpstreamError, UpstreamRefused, UpstreamUnavailable

UNAVAILABLE_STATUSES = frozenset({502, 503, 504})
"""Statuses that say an HTTP upstream (or a proxy in front of it) is not reachable: connection-level failures."""
UNAVAILABLE_DATA_KEY = "triad/httpStatus"
"""In the `data` of the error `consumers.transports` makes of an `UNAVAILABLE_STATUSES` answer: the status."""


class UpstreamConnectionFailed(UpstreamUnavailable):
    """A connection-level failure under a request: the only kind the circuit breaker counts."""


class UpstreamSessionGone(UpstreamConnectionFailed):
    """The connection or session went away under a request (a child that exited, an HTTP upstream that restarted
    and answers 404 "Session not found"); a new one is being opened, and a request safe to repeat may be.
    `unsent`: the upstream provably never received the request (a 404 for the session, a connection refused),
    so any request may be sent again."""

    def __init__(self, upstream: str, message: str, *, unsent: bool = False) -> None:
        super().__init__(upstream, message)
        self.unsent = unsent


class SessionGone(Exception):
    """The direct path's upstream answered 404: it does not know the session (it restarted)."""


class HopUnavailable(Exception):
    """The direct path's upstream, or a proxy in front of it, answered 502, 503 or 504: nothing took the
    request. The message names the status."""

    def __init__(self, status: int) -> None:
        super().__init__(f"HTTP {status}")


class HopBroken(Exception):
    """The direct path's connection failed (`connect`: it could not connect at all); the message says which."""

    def __init__(self, *, connect: bool) -> None:
        super().__init__("could not connect" if connect else "the connection broke")
        self.connect = connect


def session_gone(exc: MCPError) -> bool:
    return exc.error.code == types.INVALID_REQUEST and exc.error.message in ("Session not found",
                                                                            "Session terminated")


def call_failure(name: str, method: str, exc: Exception, *, http: bool, retired: str | None) -> UpstreamError | None:
    """The one mapping of what a request to an upstream failed with to Triad's error (None: not a failure of the
    upstream's, re-raise it as it is). A `UpstreamConnectionFailed` says the connection is in doubt; its subclass
    `UpstreamSessionGone` that a new session is being opened (`unsent`: the upstream provably never saw it)."""
    gone = f"upstream {name!r} lost its session (it restarted?) during {method}; reconnecting"
    if isinstance(exc, MCPError):
        if isinstance(exc.error.data, dict) and (status := exc.error.data.get(UNAVAILABLE_DATA_KEY)) is not None:
            return UpstreamConnectionFailed(name, f"upstream {name!r} answered HTTP {status} to {method}")
        if session_gone(exc) and http:  # a 404: it never saw the request
            return UpstreamSessionGone(name, gone, unsent=True)
        if exc.error.code == types.CONNECTION_CLOSED:
            if retired is not None:
                return UpstreamUnavailable(name, f"upstream {name!r} was {retired} and its grace period ran out "
                                           f"during {method}")
            return UpstreamSessionGone(name, f"upstream {name!r} closed the connection during {method}")
        return map_mcp_error(name, exc)
    if isinstance(exc, HopBroken):  # the direct HTTP path's connection broke, or the upstream restarted
        return UpstreamSessionGone(name, f"upstream {name!r} connection failed during {method} ({exc})",
                                   unsent=exc.connect)
    if isinstance(exc, SessionGone):  # a 404 for the session on the direct HTTP path
        return UpstreamSessionGone(name, gone, unsent=True)
    if isinstance(exc, HopUnavailable):  # nothing took the request: a proxy or the upstream's server said so
        return UpstreamConnectionFailed(name, f"upstream {name!r} answered {exc} to {method}")
    if isinstance(exc, ValueError):  # pydantic's ValidationError, or JSON that is not a JSON-RPC response
        return UpstreamError(name, f"upstream {name!r} sent a malformed {method} result")
    if isinstance(exc, OSError | anyio.BrokenResourceError | anyio.ClosedResourceError | anyio.EndOfStream):
        return UpstreamConnectionFailed(name, f"upstream {name!r} connection failed during {method}: "
                                        f"{type(exc).__name__}")
    return None


def map_mcp_error(name: str, exc: MCPError) -> UpstreamError:
    error = exc.error
    return UpstreamRefused(name, error.message, code=error.code, data=error.data)


_URL_SECRETS = re.compile(r"(?P<scheme>https?://)(?:[^/\s@'\"]*@)?(?P<host>[^/\s?'\"]*)(?P<path>[^\s?'\"]*)(?:\?[^\s'\"]*)?")


def redact_urls(text: str) -> str:
    """URLs keep scheme, host and path; credentials and query strings (where tokens hide) are masked."""
    return _URL_SECRETS.sub(lambda m: f"{m['scheme']}{m['host']}{m['path']}", text)


def describe_failure(exc: BaseException) -> str:
    """One line for logs and diagnostics. Exception groups are flattened; no headers or env are included."""
    if isinstance(exc, BaseExceptionGroup):
        return "; ".join(describe_failure(e) for e in exc.exceptions)
    if isinstance(exc, UpstreamError | MCPError):
        return str(exc)
    if isinstance(exc, FileNotFoundError):
        return f"command not found: {exc.filename}" if exc.filename else "command not found"
    text = redact_urls(str(exc).splitlines()[0]) if str(exc) else ""
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__
