"""The root of Triad's exception tree, its JSON-RPC codes, and the upstream branch (drawn whole in
`gateway.errors`, which re-exports these). They live here, at the bottom of the import graph, because the consumers
raise them and import nothing upward.
"""

from __future__ import annotations

from consumers._json import JSON

INVALID_REQUEST = -32600
INVALID_PARAMS = -32602
INTERNAL_ERROR = -32603
REQUEST_TIMEOUT = -32001
QUOTA_EXCEEDED = -32029
"""An implementation-defined server error (JSON-RPC reserves -32000..-32099 for them): 429 in spirit."""


class TriadError(Exception):
    """Base of every error Triad raises on purpose."""

    code: int = INTERNAL_ERROR

    def __init__(self, message: str, *, data: JSON = None) -> None:
        super().__init__(message)
        self.message = message
        self.data = data


class QuotaExceeded(TriadError):
    """The caller's identity is at one of its quotas (`limits:`); the message names the quota and its limit, and
    `data` carries both (`{"quota": "limits.sessions", "limit": 100}`). Raised in `consumers` for upstream slots
    and stand-ins, in `gateway` for the rest; refused before any JSON-RPC message, it is HTTP 429."""

    code = QUOTA_EXCEEDED

    def __init__(self, quota: str, limit: int, message: str) -> None:
        super().__init__(message, data={"quota": f"limits.{quota}", "limit": limit})
        self.quota = quota
        self.limit = limit


class UpstreamError(TriadError):
    """A failure on the upstream's side; it does not blame the request."""

    def __init__(self, upstream: str, message: str, *, code: int | None = None, data: JSON = None) -> None:
        super().__init__(message, data=data)
        self.upstream = upstream
        if code is not None:
            self.code = code


class UpstreamUnavailable(UpstreamError):
    pass


class UpstreamTimeout(UpstreamError):
    code = REQUEST_TIMEOUT


class UpstreamRefused(UpstreamError):
    """The upstream answered with a JSON-RPC error; its code, message and data pass through."""


class UpstreamAuthorizationRequired(UpstreamUnavailable):
    """The upstream needs a person to authorize Triad (or, with `auth: per_user`, the caller), and no one can be
    asked now; the message says how (`triad login`)."""


class UpstreamAuthorizationFailed(UpstreamUnavailable):
    """Discovery, registration or a token request at the upstream's authorization server failed."""
