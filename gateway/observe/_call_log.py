"""The calls in flight and the recent ones, for operators (the web console): who called what, where, how it ended.

A record holds names and numbers only: the kind, the upstream, the tool's or prompt's raw name (never a resource
URI, which may carry a user's data), the client, the start time, the duration, the outcome and, for a call a hook
blocked, that hook's name; for one policy denied, the layer and the pattern. Never an argument or a result value:
they may hold secrets.

Ownership: `Metrics` holds one `CallLog` per dispatcher. It is fed from two seams: `gateway.calls`' `Forwarder.forward`
(every request that leaves for an upstream: `start`, then `end` with the outcome `forward` computes for the
metrics too), the hook chain's block (`blocked`) and the policy's denial (`denied`), since neither call leaves.
The exposer's runner tells it whose session a request comes from (`attribute`): `forward` knows the session,
not the identity. Everything
here is synchronous; the records are bounded (`MAX_RECENT`), and the calls in flight by the calls Triad serves.
"""

from __future__ import annotations

import itertools
import time
import weakref
from collections import deque
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol

from policy import LAYER_NAMES

if TYPE_CHECKING:
    from consumers import UpstreamRequest
    from policy import Step

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
    """None while in flight; then `ok`, `tool_error`, `timeout`, `error` (as in the metrics), `blocked` or
    `denied`."""
    blocked_by: str | None = None
    layer: str | None = None
    """The policy layer that denied the call (`LAYER_NAMES`, as in the logs and the metrics)."""
    pattern: str | None = None


class BlockedCall(Protocol):
    """What the log keeps of a call a before-hook blocked (a `gateway.hooks.CallContext`)."""

    @property
    def kind(self) -> str: ...
    @property
    def client_id(self) -> str: ...
    @property
    def name(self) -> str: ...
    @property
    def upstream(self) -> str: ...
    @property
    def raw_name(self) -> str: ...


class CallLog:
    def __init__(self, size: int = MAX_RECENT) -> None:
        self._recent: deque[CallRecord] = deque(maxlen=size)
        self._in_flight: dict[int, CallRecord] = {}
        self._numbers = itertools.count(1)
        self._callers: weakref.WeakKeyDictionary[Any, str] = weakref.WeakKeyDictionary()
        """Downstream session -> client id; gone with the session."""

    def attribute(self, session: object, client_id: str) -> None:
        """The requests of `session` are made by `client_id` (a session belongs to the identity that opened it)."""
        self._callers[session] = client_id

    def start(self, upstream: str, kind: str, request: UpstreamRequest, session: object) -> CallRecord:
        """A request leaves for `upstream`: it is in flight until `end`."""
        record = CallRecord(next(self._numbers), kind, upstream, _raw_name(kind, request),
                            self._callers.get(session) if session is not None else None, time.time())
        self._in_flight[record.number] = record
        return record

    def end(self, record: CallRecord, outcome: str, duration: float) -> None:
        """The request ended with `outcome` (the dispatcher's, as in the metrics) after `duration` seconds."""
        record.duration, record.outcome = duration, outcome
        self._in_flight.pop(record.number, None)
        self._recent.append(record)

    def blocked(self, ctx: BlockedCall, hook: str) -> None:
        """A before-hook named `hook` blocked the call `ctx` (a `gateway.hooks.CallContext`)."""
        kind = str(ctx.kind)
        self._recent.append(CallRecord(next(self._numbers), kind, ctx.upstream,
                                       ctx.raw_name if kind in NAMED_KINDS else None, ctx.client_id, time.time(),
                                       exposed=ctx.name if kind in NAMED_KINDS else None, duration=0.0,
                                       outcome="blocked", blocked_by=hook or None))

    def denied(self, client_id: str, name: str, upstream: str, raw: str, step: Step) -> None:
        """Policy denied the tool call `name` (the caller was told `Unknown tool`) at `step`."""
        self._recent.append(CallRecord(next(self._numbers), "tool", upstream, raw, client_id, time.time(),
                                       exposed=name, duration=0.0, outcome="denied",
                                       layer=LAYER_NAMES.get(step.layer, str(step.layer)), pattern=step.pattern))

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


def _raw_name(kind: str, request: UpstreamRequest) -> str | None:
    if kind not in NAMED_KINDS:
        return None
    name = getattr(getattr(request, "params", None), "name", None)
    return name if isinstance(name, str) else None
