"""Descriptors and the registry: an immutable snapshot of everything Triad can expose, rebuilt whole.

A `ToolDescriptor` is the planner-facing contract; it never holds a callable. Its `ExecutorRef` names what runs
it (`mcp:<upstream>:<raw tool>` for an upstream tool), and the call path resolves that ref at call time.

`build_registry` merges the sources in order — core (the gateway's own tools), plugins, upstreams — into a new
`Registry` with a higher version. Override rules follow the reference (OpenClaw AgentSession, section 4): a
plugin tool overrides a core tool of the same name; among plugins the first registration wins; upstream tools are
named by `gateway.registry` with core and plugin names reserved, so they never clash. Every override and drop is
recorded in `Registry.diagnostics`. The snapshot is swapped by one assignment by its owner (`gateway.calls`).
"""

from __future__ import annotations

import functools
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Literal

from consumers import JSON, JSONObject
from gateway.registry._availability import AvailabilityContext
from gateway.registry._overrides import BoundArguments


@dataclass(frozen=True, slots=True)
class OwnerRef:
    """Who provides a tool: `core`, `plugin` (id = plugin id) or `mcp` (id = upstream name)."""

    kind: Literal["core", "plugin", "mcp"]
    id: str = ""

    def __str__(self) -> str:
        return self.kind if self.kind == "core" else f"{self.kind}:{self.id}"


@dataclass(frozen=True, slots=True)
class ExecutorRef:
    """What runs a tool: `core{executor}`, `plugin{plugin, tool}` or `mcp{upstream, raw tool name}`."""

    kind: Literal["core", "plugin", "mcp"]
    id: str
    tool: str = ""

    def __str__(self) -> str:
        # For diagnostics only; never parsed back.
        return f"{self.kind}:{self.id}" if self.kind == "core" else f"{self.kind}:{self.id}:{self.tool}"


@dataclass(frozen=True, slots=True)
class ToolDescriptor:
    name: str
    description: str
    input_schema: Mapping[str, JSON]
    owner: OwnerRef
    title: str | None = None
    output_schema: Mapping[str, JSON] | None = None
    executor: ExecutorRef | None = None
    availability: Mapping[str, JSON] | None = None
    annotations: Mapping[str, JSON] | None = None
    sort_key: str | None = None
    wire: Mapping[str, JSON] = field(default_factory=dict)
    """The tool as its source sent it (icons, `_meta`, `execution`...), served with only `name` replaced; for an
    overridden upstream tool, with the override applied (`gateway.registry`)."""
    arguments: BoundArguments | None = None
    """Arguments the client may not set (hidden or fixed by an override), applied as the call is forwarded."""
    held: Mapping[str, JSON] | None = None
    """When `pin_definitions` lists the approved definition in place of a changed one (`wire`): the definition the
    upstream offers now, which pins check and `triad approve` approves (`current`)."""

    @property
    def current(self) -> Mapping[str, JSON]:
        """The tool as its source defines it now (what pins are checked against)."""
        return self.held if self.held is not None else self.wire

    def to_wire(self) -> JSONObject:
        out = dict(self.wire)
        out["name"] = self.name
        out.setdefault("inputSchema", dict(self.input_schema))
        if self.description and "description" not in out:
            out["description"] = self.description
        return out


@dataclass(frozen=True, slots=True)
class ResourceEntry:
    """A resource or resource template; `exposed` is the URI (or template) the client sees."""

    exposed: str
    upstream: str
    raw: str
    wire: Mapping[str, JSON]


@dataclass(frozen=True, slots=True)
class PromptEntry:
    exposed: str
    upstream: str
    raw: str
    wire: Mapping[str, JSON]


@dataclass(frozen=True, slots=True)
class RegistryDiagnostic:
    kind: Literal["override", "drop", "naming", "definition"]
    name: str
    message: str


@dataclass(frozen=True, slots=True)
class ToolSource:
    """One source's descriptors: `core`, a plugin, or an upstream (already named)."""

    kind: Literal["core", "plugin", "mcp"]
    id: str
    tools: Sequence[ToolDescriptor]
    resources: Sequence[ResourceEntry] = ()
    templates: Sequence[ResourceEntry] = ()
    prompts: Sequence[PromptEntry] = ()


@dataclass(frozen=True)
class Registry:
    """An immutable snapshot. `version` increases on every rebuild; plans and caches are keyed by it."""

    version: int
    tools: Mapping[str, ToolDescriptor]
    resources: Mapping[str, ResourceEntry]
    templates: Sequence[ResourceEntry]
    prompts: Mapping[str, PromptEntry]
    context: AvailabilityContext
    diagnostics: Sequence[RegistryDiagnostic] = ()
    uri_owners: Mapping[str, str] = field(default_factory=dict)
    """Upstream part of a namespaced URI -> upstream name; empty when URIs are not namespaced."""

    @functools.cached_property
    def uri_parts(self) -> Mapping[str, str]:
        """Upstream name -> the part that namespaces its URIs (the inverse of `uri_owners`)."""
        return {owner: part for part, owner in self.uri_owners.items()}


EMPTY_REGISTRY = Registry(0, {}, {}, (), {}, AvailabilityContext())


def build_registry(version: int, sources: Sequence[ToolSource], context: AvailabilityContext,
                   uri_owners: Mapping[str, str] | None = None) -> Registry:
    """Merge `sources` (core first, then plugins, then upstreams) into a new snapshot."""
    tools: dict[str, ToolDescriptor] = {}
    diagnostics: list[RegistryDiagnostic] = []
    plugin_names: dict[str, str] = {}
    for source in sources:
        for tool in source.tools:
            previous = tools.get(tool.name)
            if previous is None:
                tools[tool.name] = tool
                if source.kind == "plugin":
                    plugin_names[tool.name] = source.id
            elif source.kind == "plugin" and previous.owner.kind == "core":
                tools[tool.name] = tool
                plugin_names[tool.name] = source.id
                diagnostics.append(RegistryDiagnostic("override", tool.name,
                                   f"plugin {source.id!r} overrides the core tool {tool.name!r}"))
            else:
                diagnostics.append(RegistryDiagnostic("drop", tool.name,
                                   f"{source.kind}:{source.id} tool {tool.name!r} dropped: already provided by "
                                   f"{previous.owner}"))
    resources: dict[str, ResourceEntry] = {}
    prompts: dict[str, PromptEntry] = {}
    templates: list[ResourceEntry] = []
    for source in sources:
        for resource in source.resources:
            if resource.exposed in resources:
                diagnostics.append(RegistryDiagnostic("drop", resource.exposed,
                                   f"resource {resource.exposed!r} of {resource.upstream!r} dropped: already "
                                   f"provided by {resources[resource.exposed].upstream!r}"))
                continue
            resources[resource.exposed] = resource
        templates.extend(source.templates)
        # prompt names are unique by construction (gateway.registry._naming suffixes clashes)
        prompts.update((prompt.exposed, prompt) for prompt in source.prompts)
    return Registry(version, tools, resources, tuple(templates), prompts, context, tuple(diagnostics),
                    dict(uri_owners or {}))
