"""Triad's log lines: the JSON formatter of `--log-format json`, and the call path's one line per upstream request.

A JSON line carries `time` (ISO 8601 with milliseconds and a time zone), `level`, `logger`, `message`, the
traceback when there is one, and the structured fields a log call passed with `extra=` (`FIELDS`: the upstream,
the client, the tool, the session, the duration, the outcome...). The session is always its short hash
(`s-1a2b3c4d5e6f`, `gateway.hooks.Session.id`), never the id a client holds. Values are the call's names and
numbers, never arguments or results.
"""

from __future__ import annotations

import json
import logging
import time
from collections import Counter
from collections.abc import Callable, Mapping
from datetime import UTC, datetime
from typing import TYPE_CHECKING

from consumers import JSON, JSONObject
from consumers.log_fields import FIELDS
from policy import LAYER_NAMES, Step

if TYPE_CHECKING:
    from consumers import UpstreamRequest

calls_logger = logging.getLogger("triad.calls")
denials_logger = logging.getLogger("triad.dispatch")
"""Denials keep the logger they were always written to."""
FAILED_OUTCOMES = frozenset({"error", "timeout"})
"""A request that failed is logged at INFO; one that was answered (a tool error included) at DEBUG."""


class JsonFormatter(logging.Formatter):
    """One JSON object per line (see the module docstring)."""

    def format(self, record: logging.LogRecord) -> str:
        line: JSONObject = {
            "time": datetime.fromtimestamp(record.created, UTC).isoformat(timespec="milliseconds"),
            "level": record.levelname.lower(), "logger": record.name, "message": record.getMessage()}
        fields = record.__dict__
        for name in FIELDS:
            value = fields.get(name)
            if value is not None and value != "":
                line[name] = value
        if record.exc_info:
            line["exception"] = self.formatException(record.exc_info)
        return json.dumps(line, default=str)


def log_call(kind: str, upstream: str, request: UpstreamRequest, outcome: str, seconds: float, caller: tuple[str, str],
             session: object) -> None:
    """The call path's line for one request to an upstream (a tool call, a read, a get), once it ended. `caller`:
    the client and the name it asked for; `session`: a `gateway.hooks.Session` (its id is already a hash) or None."""
    level = logging.INFO if outcome in FAILED_OUTCOMES else logging.DEBUG
    if not calls_logger.isEnabledFor(level):
        return
    (client, tool), raw = caller, request_name(request)
    fields: Mapping[str, JSON] = {"kind": kind, "upstream": upstream, "client": client, "tool": tool or raw,
                                 "raw": raw, "session": getattr(session, "id", None), "outcome": outcome,
                                 "duration_ms": round(seconds * 1000, 3)}
    calls_logger.log(level, "%s %s on %s by %s: %s in %.1f ms", kind, tool or raw, upstream, client or "-",
                     outcome, seconds * 1000, extra=fields)


def log_denied(client: str, tool: str, session: object, step: Step) -> None:
    """A call refused by policy (the caller gets `Unknown tool`): the layer by name and the pattern."""
    denials_logger.info("denied call: client %s tool %s by %s", client, tool, step.describe(),
                        extra={"kind": "tool", "client": client, "tool": tool, "session": getattr(session, "id", None),
                               "outcome": "denied", "layer": LAYER_NAMES.get(step.layer, str(step.layer)),
                               "pattern": step.pattern})


def request_name(request: UpstreamRequest) -> str | None:
    """The upstream's own name of what a request asks for: the raw tool or prompt name, or the raw URI."""
    params = getattr(request, "params", None)
    value = getattr(params, "name", None) or getattr(params, "uri", None)
    return str(value) if value is not None else None


class LogSummary:
    """One log line per `interval` about events that a client can cause at any rate (failed authentications):
    the first event after a quiet interval writes a line with the count of each kind since the previous line, so
    a flood costs one line per interval, never one per event. Kinds are a fixed set of the caller's, never a
    client's values."""

    def __init__(self, logger: logging.Logger, what: str, interval: float = 60.0,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self._logger = logger
        self._what = what
        self._interval = interval
        self._clock = clock
        self._counts: Counter[str] = Counter()
        self._last: float | None = None

    def note(self, kind: str) -> None:
        self._counts[kind] += 1
        now = self._clock()
        if self._last is not None and now - self._last < self._interval:
            return
        since = "" if self._last is None else f" in the last {now - self._last:.0f}s"
        counts = ", ".join(f"{name} {count}" for name, count in sorted(self._counts.items()))
        self._logger.warning("%s%s: %d (%s); at most one such line every %gs", self._what, since,
                             sum(self._counts.values()), counts, self._interval)
        self._counts.clear()
        self._last = now
