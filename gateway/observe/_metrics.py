"""Prometheus metrics, in a registry of the daemon's own (no global state).

Labels are bounded and never client-supplied: upstream names come from the config, `kind` and `outcome` from
fixed sets, `layer` is one of the seven layer names, `hook` a hook's name in the config. No arguments, no tokens,
no tool names (a hostile upstream could invent them). Counters and histograms are updated on the call path;
states, registry size and reloads are read at scrape time. Names follow Prometheus's conventions (`promtool check
metrics` passes): counters end in `_total`, with no `_created` series; `process_*`, `python_info` and
`triad_build_info` are there as operators' dashboards expect.
"""

from __future__ import annotations

import platform
from collections.abc import Callable, Iterator
from importlib.metadata import PackageNotFoundError, version

from prometheus_client import (
    CollectorRegistry,
    Counter,
    Histogram,
    PlatformCollector,
    ProcessCollector,
    disable_created_metrics,
    generate_latest,
)
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from consumers import JSONObject
from gateway.observe._call_log import BlockedCall, CallLog
from policy import LAYER_NAMES

OUTCOMES = ("ok", "tool_error", "timeout", "error", "blocked")
"""`timeout`: no answer within the deadline; `error`: the transport failed or the upstream answered an error."""
BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120)


class Metrics:
    def __init__(self) -> None:
        # The `_created` series double every counter and mean nothing to a scraper; the switch is the client
        # library's own (process-wide, and the daemon has one registry per process anyway).
        disable_created_metrics()  # type: ignore[no-untyped-call]
        self.registry = CollectorRegistry(auto_describe=True)
        ProcessCollector(registry=self.registry)
        PlatformCollector(registry=self.registry)
        self.registry.register(_BuildInfo())
        self.calls = Counter("triad_calls", "Calls, reads and gets forwarded, by upstream, kind and outcome",
                             ["upstream", "kind", "outcome"], registry=self.registry)
        self.duration = Histogram("triad_call_duration_seconds", "Time spent on forwarded requests, by upstream",
                                  ["upstream", "kind"], buckets=BUCKETS, registry=self.registry)
        self.denied = Counter("triad_denied_calls", "Calls refused by the policy, by layer name", ["layer"],
                              registry=self.registry)
        self.blocks = Counter("triad_blocked_calls", "Calls, reads and gets a before-hook blocked (a rate limit, a "
                              "changed pinned definition...), by upstream and hook", ["upstream", "hook"],
                              registry=self.registry)
        self.restarts = Counter("triad_upstream_restarts", "Times an upstream that was down was connected (a stdio "
                                "child started) again", ["upstream"], registry=self.registry)
        self.auth_failures = Counter("triad_auth_failures", "Failed authentications at the HTTP listener, by reason "
                                     "(exposers: invalid_token, invalid_request, console_sign_in, session_mismatch, "
                                     "throttled)", ["reason"], registry=self.registry)
        self.approvals = Counter("triad_approvals", "Calls that needed a person's yes (`approval:`), by decision "
                                 "(approved, denied, timeout, unanswerable) and who answered (caller, console, "
                                 "session: allowed earlier in the session, none)", ["decision", "via"],
                                 registry=self.registry)
        self.call_log = CallLog()
        """The calls in flight and the recent ones, by name (the console's; never exported to Prometheus)."""

    def deny(self, layer: int) -> None:
        self.denied.labels(LAYER_NAMES.get(layer, str(layer))).inc()

    def blocked(self, ctx: BlockedCall, hook: str) -> None:
        """A before-hook named `hook` (a name from the config) blocked `ctx` (a `gateway.hooks.CallContext`)."""
        self.blocks.labels(ctx.upstream, hook or "unknown").inc()
        self.calls.labels(ctx.upstream, str(ctx.kind), "blocked").inc()
        self.call_log.blocked(ctx, hook)

    def observe(self, upstream: str, kind: str, outcome: str, seconds: float) -> None:
        self.calls.labels(upstream, kind, outcome).inc()
        self.duration.labels(upstream, kind).observe(seconds)

    def watch(self, read: Callable[[], JSONObject]) -> None:
        """Gauges computed at scrape time from `read()` (see `_StateCollector`)."""
        self.registry.register(_StateCollector(read))

    def render(self) -> bytes:
        return generate_latest(self.registry)


class _StateCollector(Collector):
    """`read()` returns {"upstreams": {name: state}, "states": [...], "tools": n, "version": n,
    "reloads": n, "reload_failures": n, "sessions": {(era, transport): n}, "quotas": {(quota, holder): n},
    "quota_refusals": {(quota, holder): n}}."""

    def __init__(self, read: Callable[[], JSONObject]) -> None:
        self._read = read

    def collect(self) -> Iterator[Metric]:
        data = self._read()
        states = GaugeMetricFamily("triad_upstream_state", "1 for each upstream's current state",
                                   labels=["upstream", "state"])
        for name, current in data["upstreams"].items():
            for state in data["states"]:
                states.add_metric([name, state], 1.0 if state == current else 0.0)
        yield states
        yield GaugeMetricFamily("triad_registry_tools", "Tools in the registry", value=data["tools"])
        yield GaugeMetricFamily("triad_registry_version", "Registry version (rebuilds so far)", value=data["version"])
        yield CounterMetricFamily("triad_reloads", "Config reloads applied", value=data["reloads"])
        yield CounterMetricFamily("triad_reload_failures", "Config reloads refused", value=data["reload_failures"])
        sessions = GaugeMetricFamily("triad_sessions_open", "Open downstream sessions", labels=["era", "transport"])
        for (era, transport), count in data["sessions"].items():
            sessions.add_metric([era, transport], count)
        yield sessions
        use = GaugeMetricFamily("triad_quota_use", "Places of each identity quota held now (limits.<quota>), by "
                                "identity class (owner, client, anonymous)", labels=["quota", "holder"])
        for (quota, holder), count in data["quotas"].items():
            use.add_metric([quota, holder], count)
        yield use
        refused = CounterMetricFamily("triad_quota_refusals", "Requests refused because their identity was at one "
                                      "of its quotas (or non-owners at the gateway's total), by quota and identity "
                                      "class", labels=["quota", "holder"])
        for (quota, holder), count in data["quota_refusals"].items():
            refused.add_metric([quota, holder], count)
        yield refused


class _BuildInfo(Collector):
    """`triad_build_info{version, python, mcp} 1`: what is running, for dashboards and alerts on a mixed fleet."""

    def collect(self) -> Iterator[GaugeMetricFamily]:
        info = GaugeMetricFamily("triad_build_info", "Triad's version, and the Python and MCP SDK it runs on",
                                 labels=["version", "python", "mcp"])
        info.add_metric([_version("mcp-triad"), platform.python_version(), _version("mcp")], 1.0)
        yield info


def _version(distribution: str) -> str:
    try:
        return version(distribution)
    except PackageNotFoundError:
        return "unknown"
