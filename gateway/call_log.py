"""The calls in flight and the recent ones, for operators (the web console): who called what, where, how it ended.

A record holds names and numbers only: the kind, the upstream, the tool's or prompt's raw name (never a resource
URI, which may carry a user's data), the client, the start time, the duration, the outcome and, for a call a hook
blocked, that hook's name. Never an argument or a result value: they may hold secrets.

Ownership: `Metrics` holds one `CallLog` per dispatcher. It is fed from two seams: the dispatcher's `_forward`
(every request that leaves for an upstream: `watch`), and the hook chain's block (`blocked`), since a blocked call
never leaves. The exposer's runner tells it whose session a request comes from (`attribute`): `_forward` knows the
session, not the identity. Everything here is synchronous but `watch`, which awaits only the upstream call it
wraps; the records are bounded (`MAX_RECENT`), and the calls in flight are bounded by the calls Triad serves.
"""

from __future__ import annotations

import itertools
import time
import weakref
from collections import deque
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from gateway.errors import UpstreamTimeout

if TYPE_CHECKING:
    from consumers import Upstream

MAX_RECENT = 200
"""Finished calls kept; enough for a screen or two of history, small enough to copy on every page view."""
NAMED_KINDS = frozenset({"tool", "prompt"})
"""Kinds whose target is a name an upstream published; a resource read's target is a URI and is not kept."""


@dataclass
class CallRecord:
    number: int
    kind: str
    upstream: str
    raw: str | None
    """The upstream's own name of the tool or prompt (None for reads and completions)."""
    client: str | None
    """The configured client that made the call (None when the runner did not say)."""
    started: float
    """Wall-clock time the request left (seconds since the epoch)."""
    exposed: str | None = None
    """The name the client used, when known at the source (a blocked call); else the console maps `raw`."""
    duration: float | None = None
    outcome: str | None = None
    """None while in flight; then `ok`, `tool_error`, `timeout`, `error` (as in the metrics) or `blocked`."""
    blocked_by: str | None = None


class CallLog:
    def __init__(self, size: int = MAX_RECENT) -> None:
        self._recent: deque[CallRecord] = deque(maxlen=size)
        self._in_flight: dict[int, CallRecord] = {}
        self._numbers = itertools.count(1)
        self._callers: weakref.WeakKeyDictionary[Any, str] = weakref.WeakKeyDictionary()
        """Downstream session -> client id; gone with the session."""

    def attribute(self, session: Any, client_id: str) -> None:
        """The requests of `session` are made by `client_id` (a session belongs to the identity that opened it)."""
        self._callers[session] = client_id

    async def watch(self, upstream: Upstream, kind: str, request: Any, options: Mapping[str, Any]
                    ) -> dict[str, Any]:
        """Send `request` on `upstream` (with the dispatcher's `options`), keeping it among the calls in flight
        until it ends; its raw result, or its exception."""
        session = options.get("client")
        record = CallRecord(next(self._numbers), kind, upstream.name, _raw_name(kind, request),
                            self._callers.get(session) if session is not None else None, time.time())
        self._in_flight[record.number] = record
        start, outcome = time.perf_counter(), "error"
        try:
            result = await upstream.request(request, **options)
            outcome = "tool_error" if result.get("isError") is True else "ok"
            return result
        except UpstreamTimeout:
            outcome = "timeout"
            raise
        finally:
            record.duration, record.outcome = time.perf_counter() - start, outcome
            del self._in_flight[record.number]
            self._recent.append(record)

    def blocked(self, ctx: Any, hook: str) -> None:
        """A before-hook named `hook` blocked the call `ctx` (a `gateway.hooks.CallContext`)."""
        kind = str(ctx.kind)
        self._recent.append(CallRecord(next(self._numbers), kind, ctx.upstream,
                                       ctx.raw_name if kind in NAMED_KINDS else None, ctx.client_id, time.time(),
                                       exposed=ctx.name if kind in NAMED_KINDS else None, duration=0.0,
                                       outcome="blocked", blocked_by=hook or None))

    def in_flight(self) -> list[CallRecord]:
        """Oldest first."""
        return sorted(self._in_flight.values(), key=lambda r: r.number)

    def recent(self) -> list[CallRecord]:
        """Newest first."""
        return list(reversed(self._recent))

    def since(self, upstream: str, seconds: float) -> list[CallRecord]:
        """The finished calls to `upstream` that started within the last `seconds` (as far as the log reaches)."""
        floor = time.time() - seconds
        return [r for r in self._recent if r.upstream == upstream and r.started >= floor]


def _raw_name(kind: str, request: Any) -> str | None:
    if kind not in NAMED_KINDS:
        return None
    name = getattr(getattr(request, "params", None), "name", None)
    return name if isinstance(name, str) else None
