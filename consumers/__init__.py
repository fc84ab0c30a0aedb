"""Upstream connections: one owner task per upstream, transports, the pool keyed by name, and the relay seam."""

from consumers._errors import describe_failure
from consumers._files import read_regular
from consumers._json import JSON, JSONObject, all_finite, dumps, loads, may_overflow
from consumers.channel import TASK_STATUS
from consumers.child_groups import ChildGroups
from consumers.lifecycle import UpstreamState
from consumers.listing import Catalog
from consumers.login import LoginError, login
from consumers.masking import SecretMask
from consumers.oauth import UserAuthorization
from consumers.own_lists import OwnLists
from consumers.pool import UpstreamPool
from consumers.relay import (
    CURRENT_DOWNSTREAM,
    Answer,
    ClientOrigin,
    Downstream,
    DownstreamWrapper,
    ProgressFn,
    RequestOptions,
    Share,
    UpstreamRequest,
    cancellation_of,
    undeclared,
)
from consumers.sandbox import SandboxConfig, describe_sandbox
from consumers.sandbox import problems as sandbox_problems
from consumers.upstream import Upstream

__all__ = [
    "CURRENT_DOWNSTREAM",
    "JSON",
    "TASK_STATUS",
    "Answer",
    "Catalog",
    "ChildGroups",
    "ClientOrigin",
    "Downstream",
    "DownstreamWrapper",
    "JSONObject",
    "LoginError",
    "OwnLists",
    "ProgressFn",
    "RequestOptions",
    "SandboxConfig",
    "SecretMask",
    "Share",
    "Upstream",
    "UpstreamPool",
    "UpstreamRequest",
    "UpstreamState",
    "UserAuthorization",
    "all_finite",
    "cancellation_of",
    "describe_failure",
    "describe_sandbox",
    "dumps",
    "loads",
    "login",
    "may_overflow",
    "read_regular",
    "sandbox_problems",
    "undeclared",
]
