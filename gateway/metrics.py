"""Prometheus metrics, in a registry of the daemon's own (no global state).

Labels are bounded and never client-supplied: upstream names come from the config, `kind` and `outcome` from
fixed sets, `layer` is 1-7. No arguments, no tokens, no tool names (a hostile upstream could invent them).
Counters and histograms are updated on the call path; states, registry size and reloads are read at scrape time.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

from prometheus_client import CollectorRegistry, Counter, Histogram, generate_latest
from prometheus_client.core import GaugeMetricFamily
from prometheus_client.registry import Collector

OUTCOMES = ("ok", "tool_error", "error", "blocked")
BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120)


class Metrics:
    def __init__(self) -> None:
        self.registry = CollectorRegistry(auto_describe=True)
        self.calls = Counter("triad_calls", "Calls, reads and gets forwarded, by upstream, kind and outcome",
                             ["upstream", "kind", "outcome"], registry=self.registry)
        self.duration = Histogram("triad_call_duration_seconds", "Time spent on forwarded requests, by upstream",
                                  ["upstream", "kind"], buckets=BUCKETS, registry=self.registry)
        self.denied = Counter("triad_denied_calls", "Calls refused by the policy, by layer", ["layer"],
                              registry=self.registry)

    def observe(self, upstream: str, kind: str, outcome: str, seconds: float) -> None:
        self.calls.labels(upstream, kind, outcome).inc()
        self.duration.labels(upstream, kind).observe(seconds)

    def watch(self, read: Callable[[], dict[str, Any]]) -> None:
        """Gauges computed at scrape time from `read()` (see `_StateCollector`)."""
        self.registry.register(_StateCollector(read))

    def render(self) -> bytes:
        return generate_latest(self.registry)


class _StateCollector(Collector):
    """`read()` returns {"upstreams": {name: state}, "states": [...], "tools": n, "version": n,
    "reloads": n, "reload_failures": n, "sessions": {(era, transport): n}}."""

    def __init__(self, read: Callable[[], dict[str, Any]]) -> None:
        self._read = read

    def collect(self) -> Iterator[GaugeMetricFamily]:
        data = self._read()
        states = GaugeMetricFamily("triad_upstream_state", "1 for each upstream's current state",
                                   labels=["upstream", "state"])
        for name, current in data["upstreams"].items():
            for state in data["states"]:
                states.add_metric([name, state], 1.0 if state == current else 0.0)
        yield states
        yield GaugeMetricFamily("triad_registry_tools", "Tools in the registry", value=data["tools"])
        yield GaugeMetricFamily("triad_registry_version", "Registry version (rebuilds so far)", value=data["version"])
        yield GaugeMetricFamily("triad_reloads", "Config reloads applied", value=data["reloads"])
        yield GaugeMetricFamily("triad_reload_failures", "Config reloads refused", value=data["reload_failures"])
        sessions = GaugeMetricFamily("triad_sessions_open", "Open downstream sessions", labels=["era", "transport"])
        for (era, transport), count in data["sessions"].items():
            sessions.add_metric([era, transport], count)
        yield sessions
