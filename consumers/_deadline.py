"""One request on one upstream session under its deadline: the upstream's `timeout` (or the call's own), pushed back
by each progress notification up to `max_call_time`; tracked among the upstream's calls in flight (so that retiring
it can wait for them), and its failure mapped to an `UpstreamError` (`consumers._errors.call_failure`).

Which session, and what to do when it fails (retry, the circuit breaker): `consumers.upstream.Upstream.request`.
"""

from __future__ import annotations

import anyio
from mcp_types import LOG_LEVEL_META_KEY

from consumers._errors import call_failure
from consumers._json import JSONObject
from consumers.channel import SessionChannel
from consumers.errors import UpstreamTimeout, UpstreamUnavailable
from consumers.lifecycle import CallsInFlight
from consumers.relay import CURRENT_DOWNSTREAM, ProgressFn, UpstreamRequest, with_params


async def send_within_deadline(name: str, channel: SessionChannel, request: UpstreamRequest,
                               progress: ProgressFn | None, calls: CallsInFlight, limits: tuple[float, float], *,
                               modern: bool, http: bool) -> JSONObject:
    """`request` on `channel` of upstream `name`; `limits`: (timeout, max call time); `modern`: the upstream speaks
    2026-07-28; `http`: over streamable HTTP."""
    method = request.method
    timeout, cap = limits
    start = anyio.current_time()

    async def on_progress(params: JSONObject) -> None:
        scope.deadline = min(anyio.current_time() + timeout, start + max(cap, timeout))
        if progress is not None:
            await progress(params)

    call_key = id(scope := anyio.CancelScope(deadline=start + timeout))
    if (downstream := CURRENT_DOWNSTREAM.get()) is not None:
        channel.relays.calls[call_key] = downstream
        if modern and downstream.log_level is not None:  # 2026-07-28 logs only on a request's opt-in
            request = with_params(request, {"_meta": {**(request.params.meta or {}),
                                                       LOG_LEVEL_META_KEY: downstream.log_level}})
    try:
        with calls.track(scope), scope:
            return await channel.request(request, on_progress, downstream)
        if calls.grace_over:
            raise UpstreamUnavailable(name, f"upstream {name!r} was {calls.retired} and its grace "
                                      f"period ran out during {method}")
        raise UpstreamTimeout(name, _expired(name, method, limits, scope.deadline - start))
    except Exception as exc:
        failure = call_failure(name, method, exc, http=http, retired=calls.retired)
        if failure is None:
            raise
        raise failure from None
    finally:
        channel.relays.calls.pop(call_key, None)


def _expired(name: str, method: str, limits: tuple[float, float], allowed: float) -> str:
    """Which limit cut the call, given how long its deadline `allowed` in the end: the timeout (no progress), the
    timeout counted from the last progress, or the cap that progress cannot push back."""
    timeout, cap = limits
    if allowed <= timeout:
        return f"upstream {name!r} did not answer {method} within {timeout:g}s"
    if allowed >= max(cap, timeout):
        return (f"upstream {name!r} did not finish {method} within its maximum call time of {max(cap, timeout):g}s "
                "(progress does not extend a call past it)")
    return f"upstream {name!r} did not answer {method} within {timeout:g}s of its last progress (after {allowed:.3g}s)"
