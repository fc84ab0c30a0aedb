"""Upstream connections: one owner task per upstream, transports, and the pool keyed by name."""

from consumers.pool import UpstreamPool, wait_settled_or_timeout
from consumers.upstream import Catalog, ProgressFn, Upstream, UpstreamState, describe_failure

__all__ = ["Catalog", "ProgressFn", "Upstream", "UpstreamPool", "UpstreamState", "describe_failure",
           "wait_settled_or_timeout"]
