"""Triad's exception tree. Every error a client can see carries a fixed JSON-RPC code.

    TriadError
     ├── ConfigError                 the config file is invalid (never reaches a client)
     ├── ToolPlanContractError       the planner refused a descriptor set (duplicate name, missing executor)
     ├── UnknownName   (-32602)      unknown *or hidden* tool, prompt or resource: the same answer for both
     ├── StaleCursor   (-32602)      a pagination cursor from an older registry version
     ├── InvalidRequest (-32602)     a request Triad cannot make sense of (e.g. a malformed run-level list)
     ├── HookBlocked   (-32600)      a before-hook blocked a resource read or prompt get (a tool call gets isError)
     ├── UnknownSession (-32600)     a session id that is not the caller's: the same answer as one that never was
     ├── QuotaExceeded (-32029)      the caller's identity is at one of its quotas (`limits:`); HTTP 429 at the edge
     └── UpstreamError (-32603)      something went wrong on the upstream's side
          ├── UpstreamUnavailable    not connected, or the connection closed mid-call
          │    ├── UpstreamAuthorizationRequired  an OAuth upstream needs a person's authorization (`triad login`)
          │    └── UpstreamAuthorizationFailed    discovery, registration or a token request failed
          ├── UpstreamTimeout (-32001) no answer within the upstream's timeout
          └── UpstreamRefused        the upstream answered with a JSON-RPC error (its own code is kept)

Foreign errors (the SDK's MCPError, transport errors) are mapped to these in `consumers/`; the exposer renders
them as JSON-RPC errors in one place. Messages never carry a secret.

The root, its codes and the upstream branch live in `consumers.errors`, at the bottom of the import graph, so the
consumers can raise them without importing upward; they are re-exported here, where the tree is drawn whole.
"""

from __future__ import annotations

from typing import Literal

from consumers.errors import (
    INTERNAL_ERROR,
    INVALID_PARAMS,
    INVALID_REQUEST,
    QUOTA_EXCEEDED,
    REQUEST_TIMEOUT,
    QuotaExceeded,
    TriadError,
    UpstreamError,
    UpstreamRefused,
    UpstreamTimeout,
    UpstreamUnavailable,
)

__all__ = ["INTERNAL_ERROR", "INVALID_PARAMS", "INVALID_REQUEST", "QUOTA_EXCEEDED", "REQUEST_TIMEOUT", "ConfigError",
           "HookBlocked", "InvalidRequest", "QuotaExceeded", "StaleCursor", "ToolPlanContractError", "TriadError",
           "UnknownName", "UnknownSession", "UpstreamError", "UpstreamRefused", "UpstreamTimeout",
           "UpstreamUnavailable"]


class ConfigError(TriadError):
    """An invalid configuration; `problems` lists every error as `key.path: message (line N)`."""

    def __init__(self, problems: list[str]) -> None:
        super().__init__("invalid configuration:\n" + "\n".join(f"  {p}" for p in problems))
        self.problems = problems


class ToolPlanContractError(TriadError):
    """The planner's contract was broken; the whole plan is refused (no partial plan)."""

    def __init__(self, code: Literal["duplicate-tool-name", "missing-executor"], tool_name: str, message: str) -> None:
        super().__init__(message)
        self.contract_code = code
        self.tool_name = tool_name


class UnknownName(TriadError):
    """A tool, prompt or resource the caller cannot see. Hidden and unknown names look the same on purpose."""

    code = INVALID_PARAMS


class StaleCursor(TriadError):
    code = INVALID_PARAMS


class InvalidRequest(TriadError):
    code = INVALID_PARAMS


class HookBlocked(TriadError):
    code = INVALID_REQUEST


class UnknownSession(TriadError):
    """A session the caller does not own. Another identity's session and a session that never existed look the
    same, so that an id's existence is not revealed."""

    code = INVALID_REQUEST

    def __init__(self, message: str = "Session not found") -> None:
        super().__init__(message)
