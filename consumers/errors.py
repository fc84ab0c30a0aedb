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


class TriadError(Exception):
    """Base of every error Triad raises on purpose."""

    code: int = INTERNAL_ERROR

    def __init__(self, message: str, *, data: JSON = None) -> None:
        super().__init__(message)
        self.message = message
        self.data = data


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
