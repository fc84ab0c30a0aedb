"""The one place a request leaves for an upstream: timed, counted and logged.

Ownership: the dispatcher creates one `Forwarder` with the pool and the metrics, and gives it to every collaborator
that sends something upstream (tool calls and prompts, resources, the task relay); it holds no state of its own.
"""

from __future__ import annotations

import time
from typing import Unpack

from consumers import JSONObject, RequestOptions, Upstream, UpstreamPool, UpstreamRequest
from gateway.errors import UpstreamTimeout, UpstreamUnavailable
from gateway.observe import Metrics, log_call
from gateway.registry import clean_result


class Forwarder:
    def __init__(self, pool: UpstreamPool, metrics: Metrics) -> None:
        self._pool = pool
        self._metrics = metrics

    def upstream(self, name: str) -> Upstream:
        """The upstream configured as `name` (one a reload removed is unavailable, not unknown)."""
        upstream = self._pool.get(name)
        if upstream is None:
            raise UpstreamUnavailable(name, f"upstream {name!r} is not configured any more")
        return upstream

    async def forward(self, upstream: Upstream, kind: str, request: UpstreamRequest, *,
                      caller: tuple[str, str] = ("", ""), **options: Unpack[RequestOptions]) -> JSONObject:
        """`request` to `upstream`, its raw result back (`caller`: client and exposed name, for the log)."""
        start, outcome = time.perf_counter(), "error"
        record = self._metrics.call_log.start(upstream.name, kind, request, options.get("client"))
        try:
            result = clean_result(await upstream.request(request, **options))
            outcome = "tool_error" if result.get("isError") is True else "ok"
            return result
        except UpstreamTimeout:
            outcome = "timeout"
            raise
        finally:
            elapsed = time.perf_counter() - start
            self._metrics.call_log.end(record, outcome, elapsed)
            self._metrics.observe(upstream.name, kind, outcome, elapsed)
            log_call(kind, upstream.name, request, outcome, elapsed, caller, options.get("client"))
