"""The structured fields of Triad's log lines, shared by the gateway's formatter and the consumers' log calls.

A log call passes them with `extra=` (`log_fields(...)`); `gateway.observe.JsonFormatter` writes the ones a record
has, in the order of `FIELDS`, besides the text. Values are names and numbers, never arguments, results or
secrets; a session is its short hash (`s-1a2b3c4d5e6f`), never the id a client holds.
"""

from __future__ import annotations

from consumers._json import JSONObject

FIELDS = ("kind", "upstream", "client", "session", "tool", "raw", "outcome", "duration_ms", "layer", "pattern",
          "hook")
"""The structured fields a log call may pass with `extra=`, in the order a JSON line shows them."""


def log_fields(upstream: str, outcome: str, *, session: object = None, client: str | None = None,
               seconds: float | None = None) -> JSONObject:
    """`extra=` for a line about one upstream: what happened (`outcome`), the session it concerns (an object
    whose `id` is its hash label, e.g. `gateway.hooks.Session`), the client where known, and how long it took."""
    fields: JSONObject = {"upstream": upstream, "outcome": outcome}
    if (label := getattr(session, "id", None)) is not None:
        fields["session"] = label
    if client is not None:
        fields["client"] = client
    if seconds is not None:
        fields["duration_ms"] = round(seconds * 1000, 3)
    return fields
