"""What `pin_definitions` does to a listed tool: list its approved definition in place of a changed one, or withhold
it with a diagnostic when no approved one can be shown.

A model reads a tool's description, title, schemas and annotations from the list: a definition changed since it
was approved must not reach it (issue #31), so the registry holds the approved fields and keeps the upstream's
current definition beside them (`ToolDescriptor.held`) for the call path, which still blocks the tool until an
operator approves the change. A withheld tool carries an availability signal that never holds, with its reason
and message, so `triad plan`, `explain` and the console show why it is hidden. Pure functions; the pin state is read
by `gateway.calls`.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Literal

from consumers import JSON, JSONObject
from gateway.registry._descriptors import ToolDescriptor
from gateway.state import HASHED_FIELDS

PIN_KEY_PREFIX = "pin:"
"""Availability context keys of withheld pinned tools: never set, so their signal always fails."""

PinReason = Literal["pin-changed", "pin-unapproved", "pin-pending"]


def listed_approved(descriptor: ToolDescriptor, approved: Mapping[str, JSON]) -> ToolDescriptor:
    """`descriptor` listed with the approved fields (`gateway.state.pinned_fields`: a field the approved definition
    did not have is not listed), the current definition kept in `held`."""
    wire: JSONObject = {k: v for k, v in descriptor.wire.items() if k not in HASHED_FIELDS}
    wire.update((k, v) for k, v in approved.items() if k in HASHED_FIELDS and v is not None)
    schema, output, notes = wire.get("inputSchema"), wire.get("outputSchema"), wire.get("annotations")
    description, title = wire.get("description"), wire.get("title")
    return dataclasses.replace(
        descriptor, wire=wire, held=descriptor.current,
        description=description if isinstance(description, str) else "",
        title=title if isinstance(title, str) else None,
        input_schema=schema if isinstance(schema, dict) else {"type": "object"},
        output_schema=output if isinstance(output, dict) else None,
        annotations=notes if isinstance(notes, dict) else None)


def withheld(descriptor: ToolDescriptor, reason: PinReason, message: str) -> ToolDescriptor:
    """`descriptor` hidden from every client, with `reason: message` as its diagnostic."""
    executor = descriptor.executor
    where = f"{executor.id}:{executor.tool}" if executor is not None else descriptor.name
    signal: JSONObject = {"kind": "context", "key": f"{PIN_KEY_PREFIX}{where}", "equals": "approved",
                          "reason": reason, "message": message}
    availability: JSONObject = {"allOf": [dict(descriptor.availability), signal]} if descriptor.availability \
        else signal
    return dataclasses.replace(descriptor, availability=availability)


def pin_diagnostic(signal: Mapping[str, JSON]) -> JSONObject | None:
    """The diagnostic a report shows for a withheld pinned tool's signal; None for any other signal."""
    key = signal.get("key")
    if not isinstance(key, str) or not key.startswith(PIN_KEY_PREFIX):
        return None
    return {"reason": signal.get("reason"), "message": signal.get("message")}
