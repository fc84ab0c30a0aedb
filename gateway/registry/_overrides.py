"""Tool overrides (`upstreams.<name>.tools.overrides`): how one upstream tool is presented and called.

`override_wire` is applied where the registry is built (`gateway.registry`), so everything that reads descriptors
(plans, policy, pins, search, the console, `tools/list`) sees the overridden tool. `BoundArguments` travels on the
descriptor to the call path, where it shapes the arguments just before they are forwarded (after the hooks): a
hidden argument is dropped, a fixed one is set whatever the client or a hook sent. Pure functions; no I/O.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from consumers import JSON, JSONObject
from consumers.config import ToolOverride


@dataclass(frozen=True, slots=True)
class BoundArguments:
    """Arguments the client may not set: `hidden` ones are dropped, `fixed` ones are sent as configured."""

    hidden: frozenset[str] = frozenset()
    fixed: Mapping[str, JSON] = field(default_factory=dict)

    def apply(self, arguments: Mapping[str, JSON] | None) -> JSONObject:
        kept = {k: v for k, v in (arguments or {}).items() if k not in self.hidden and k not in self.fixed}
        return {**kept, **self.fixed}


def bound_arguments(override: ToolOverride | None) -> BoundArguments | None:
    if override is None or not (override.hide_arguments or override.fixed_arguments):
        return None
    return BoundArguments(frozenset(override.hide_arguments), dict(override.fixed_arguments))


def override_wire(wire: Mapping[str, JSON], override: ToolOverride) -> JSONObject:
    """The tool as the upstream sent it, with the override's title, description, annotations and input schema.
    `name` stays the raw one (the exposed name is given by `gateway.registry`)."""
    out = dict(wire)
    if override.title is not None:
        out["title"] = override.title
    if override.description is not None:
        out["description"] = override.description
    if override.annotations is not None:
        given = override.annotations.model_dump(exclude_none=True)
        current = wire.get("annotations")
        out["annotations"] = {**(current if isinstance(current, dict) else {}), **given}
    withheld = {*override.hide_arguments, *override.fixed_arguments}
    schema = wire.get("inputSchema")
    if withheld and isinstance(schema, dict):
        out["inputSchema"] = without_arguments(schema, withheld)
    return out


def without_arguments(schema: Mapping[str, JSON], names: set[str]) -> JSONObject:
    """`schema` with `names` gone from its top-level `properties` and `required`."""
    out = dict(schema)
    properties = schema.get("properties")
    if isinstance(properties, dict):
        out["properties"] = {k: v for k, v in properties.items() if k not in names}
    required = schema.get("required")
    if isinstance(required, list):
        out["required"] = [k for k in required if k not in names]
    return out
