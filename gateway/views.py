"""Per-client views of one registry version: the plan, the name lookups, and the serialised lists.

A view is computed once per (registry version, identity) and reused by every request of that client until the
registry changes, so the call path only does dict lookups. Pagination cursors are opaque and carry the registry
version; a cursor from an older version is refused with a clear error instead of silently skipping items.
"""

from __future__ import annotations

import base64
import binascii
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from gateway.errors import StaleCursor
from gateway.identity import Identity
from gateway.planner import PlanEntry, ToolPlan, build_plan
from gateway.registry import PromptEntry, Registry


@dataclass(frozen=True)
class ClientView:
    version: int
    identity: Identity
    plan: ToolPlan
    tools: Mapping[str, PlanEntry]
    tools_wire: tuple[dict[str, Any], ...]
    resources_wire: tuple[dict[str, Any], ...]
    templates_wire: tuple[dict[str, Any], ...]
    prompts: Mapping[str, PromptEntry]
    prompts_wire: tuple[dict[str, Any], ...]
    visible_upstreams: frozenset[str]

    def fingerprint(self) -> tuple[tuple[str, ...], ...]:
        """What a client would notice changing: used to send `list_changed` only to sessions whose view changed."""
        return (
            tuple(repr(sorted(t.items())) for t in self.tools_wire),
            tuple(r.get("uri", "") for r in self.resources_wire)
            + tuple(t.get("uriTemplate", "") for t in self.templates_wire),
            tuple(repr(sorted(p.items())) for p in self.prompts_wire),
        )


def build_view(registry: Registry, identity: Identity) -> ClientView:
    plan = build_plan(registry.tools.values(), registry.context)
    tools = {entry.descriptor.name: entry for entry in plan.visible}
    ready = {key.removeprefix("upstream:") for key, state in registry.context.values.items() if state == "ready"}
    resources = tuple(dict(r.wire) for r in registry.resources.values() if r.upstream in ready)
    templates = tuple(dict(t.wire) for t in registry.templates if t.upstream in ready)
    prompts = {name: p for name, p in registry.prompts.items() if p.upstream in ready}
    return ClientView(
        version=registry.version,
        identity=identity,
        plan=plan,
        tools=tools,
        tools_wire=tuple(entry.descriptor.to_wire() for entry in plan.visible),
        resources_wire=resources,
        templates_wire=templates,
        prompts=prompts,
        prompts_wire=tuple(dict(p.wire) for p in sorted(prompts.values(), key=lambda p: p.exposed)),
        visible_upstreams=frozenset(ready),
    )


def paginate(items: Sequence[dict[str, Any]], key: str, cursor: str | None, version: int,
             page_size: int) -> dict[str, Any]:
    start = 0 if cursor is None else _decode_cursor(cursor, version)
    end = start + page_size
    result: dict[str, Any] = {key: list(items[start:end])}
    if end < len(items):
        result["nextCursor"] = _encode_cursor(version, end)
    return result


def _encode_cursor(version: int, offset: int) -> str:
    return base64.urlsafe_b64encode(f"v1:{version}:{offset}".encode()).decode().rstrip("=")


def _decode_cursor(cursor: str, version: int) -> int:
    try:
        text = base64.urlsafe_b64decode(cursor + "=" * (-len(cursor) % 4)).decode()
        tag, cursor_version, offset = text.split(":")
        if tag != "v1":
            raise ValueError(tag)
        parsed_version, parsed_offset = int(cursor_version), int(offset)
    except (ValueError, binascii.Error, UnicodeDecodeError):
        raise StaleCursor("invalid cursor: it was not issued by this server; list again without a cursor") from None
    if parsed_version != version or parsed_offset < 0:
        raise StaleCursor("stale cursor: the list changed since this cursor was issued; list again from the start")
    return parsed_offset
