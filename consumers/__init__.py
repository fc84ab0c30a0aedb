"""Upstream connections: one owner task per upstream, transports, the pool keyed by name, and the relay seam."""

from consumers._errors import describe_failure
from consumers.listing import Catalog
from consumers.login import LoginError, login
from consumers.pool import UpstreamPool
from consumers.relay import CURRENT_DOWNSTREAM, ClientOrigin, Downstream, ProgressFn
from consumers.upstream import Upstream, UpstreamState

__all__ = [
    "CURRENT_DOWNSTREAM",
    "Catalog",
    "ClientOrigin",
    "Downstream",
    "LoginError",
    "ProgressFn",
    "Upstream",
    "UpstreamPool",
    "UpstreamState",
    "describe_failure",
    "login",
]
