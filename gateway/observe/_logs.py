"""Triad's log lines: the two formats (text, and JSON with `--log-format json`), and the call path's one line per
upstream request.

Either format writes one record as exactly one line, whatever a caller, an upstream or an exception put in it:
JSON escapes by itself; the text format escapes every control character (`escape_controls`), so a tool name
with a line break cannot forge a record, and the text stays recoverable.

A JSON line carries `time` (ISO 8601 with milliseconds and a time zone), `level`, `logger`, `message`, the
traceback when there is one, and the structured fields a log call passed with `extra=` (`FIELDS`: the upstream,
the client, the tool, the session, the duration, the outcome...). The session is always its short hash
(`s-1a2b3c4d5e6f`, `gateway.hooks.Session.id`), never the id a client holds. Values are the call's names and
numbers, never arguments or results.
"""

from __future__ import annotations

import json
import logging
import re
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


TEXT_FORMAT = "%(asctime)s %(levelname)-7s %(name)s: %(message)s"
_CONTROLS = re.compile("[\\\\\x00-\x1f\x7f-\x9f\u2028\u2029\ud800-\udfff]")
"""A backslash (so the escaping is reversible), C0, DEL, C1 (U+0085 breaks lines too), the Unicode line and
paragraph separators, and surrogates (in a `str` always lone: UTF-8 cannot carry them)."""
_NAMED = {"\\": "\\\\", "\n": "\\n", "\r": "\\r", "\t": "\\t"}


def escape_controls(text: str) -> str:
    """`text` with the characters of `_CONTROLS` as backslash escapes (`\\n`, `\\x1b`, `\\u2028`, `\\\\`):
    printable, on one line, and reversible. Linear in the text's length."""
    return _CONTROLS.sub(_escape, text)


def _escape(match: re.Match[str]) -> str:
    char = match.group()
    return _NAMED.get(char) or (f"\\x{ord(char):02x}" if ord(char) < 0x100 else f"\\u{ord(char):04x}")


class TextFormatter(logging.Formatter):
    """`time LEVEL logger: message`, one record per line: every field (the message with its arguments, the
    logger's name, a traceback) is escaped by `escape_controls`, a traceback's line breaks included. Both
    formatters hide the config's secrets (`mask`, set by `mask_logs`) in whatever a record says."""

    def __init__(self) -> None:
        super().__init__(TEXT_FORMAT)
        self.mask: Callable[[str], str] = str

    def format(self, record: logging.LogRecord) -> str:
        return escape_controls(self.mask(super().format(record)))


def mask_logs(mask: Callable[[str], str]) -> None:
    """Every line Triad's log handlers write from now on hides what `mask` hides (the daemon's config's secrets,
    set at start and by each reload): a secret a caller, an upstream or a library quotes never reaches the log."""
    for handler in logging.getLogger().handlers:
        if isinstance(handler.formatter, TextFormatter | JsonFormatter):
            handler.formatter.mask = mask


class JsonFormatter(logging.Formatter):
    """One JSON object per line (see the module docstring)."""

    def __init__(self) -> None:
        super().__init__()
        self.mask: Callable[[str], str] = str

    def format(self, record: logging.LogRecord) -> str:
        line: JSONObject = {
            "time": datetime.fromtimestamp(record.created, UTC).isoformat(timespec="milliseconds"),
            "level": record.levelname.lower(), "logger": record.name, "message": self.mask(record.getMessage())}
        fields = record.__dict__
        for name in FIELDS:
            value = fields.get(name)
            if value is not None and value != "":
                line[name] = self.mask(value) if isinstance(value, str) else value
        if record.exc_info:
            line["exception"] = self.mask(self.formatException(record.exc_info))
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
