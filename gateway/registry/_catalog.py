"""Turning upstream catalogs into registry sources: filters, exposed names, descriptors.

`build_upstream_sources` is pure but for the name ledger: given the config, each upstream's last catalog and state
and the names given before, it returns the `ToolSource`s and availability context for `build_registry`, and
records the names it gave. Upstream tools carry the availability expression
`context upstream:<name> == "ready"`, so the tools of an upstream that went down move to the hidden list with a
diagnostic instead of failing calls. Tool overrides (`tools.overrides`) are applied here, to the descriptors, so
everything downstream of the registry sees the overridden tool (`gateway.registry`).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from consumers import JSON, Catalog, JSONObject
from consumers.config import ToolOverride
from gateway.config import TriadConfig, UpstreamConfig
from gateway.registry._availability import AvailabilityContext
from gateway.registry._descriptors import ExecutorRef, OwnerRef, PromptEntry, ResourceEntry, ToolDescriptor, ToolSource
from gateway.registry._naming import assign_names, expose_uri, prefix_active, renamed_key, sanitize_server_names
from gateway.registry._overrides import bound_arguments, override_wire
from gateway.state import NameLedger
from policy import ToolFacts, compile_globs, first_match
from policy.lint import case_lookalike_denies, matchless_patterns

SERVING = ("ready", "degraded")
"""Upstream states whose tools are visible: a degraded upstream (circuit open) still lists its tools, and its
calls fail fast with a clear error until the next trial."""


UPSTREAM_KEY_PREFIX = "upstream:"


def upstream_context_key(upstream: str) -> str:
    return f"{UPSTREAM_KEY_PREFIX}{upstream}"


def upstream_of_key(key: str) -> str | None:
    """The upstream an availability context key is about, or None for any other key."""
    return key.removeprefix(UPSTREAM_KEY_PREFIX) if key.startswith(UPSTREAM_KEY_PREFIX) else None


@dataclass(frozen=True)
class UpstreamSnapshot:
    """What the registry needs of one upstream: its last catalog (None if never listed) and its state."""

    catalog: Catalog | None
    state: str
    reason: str = ""


@dataclass(frozen=True)
class BuiltSources:
    sources: list[ToolSource]
    context: AvailabilityContext
    uri_owners: dict[str, str]
    warnings: tuple[str, ...] = ()
    """Deny patterns that reach tools whose raw names differ only by case, and patterns that match no tool once
    every upstream has listed (`policy.lint`)."""
    definitions: tuple[str, ...] = ()
    """What was repaired or dropped of the enabled upstreams' tool definitions (`consumers.definitions`)."""


def build_upstream_sources(config: TriadConfig, snapshots: Mapping[str, UpstreamSnapshot],
                           reserved: Iterable[str] = (), names: NameLedger | None = None) -> BuiltSources:
    """`names`: the names given before, which tools keep; the names given now are recorded in it."""
    upstreams = config.enabled_upstreams()
    server_parts = sanitize_server_names(list(upstreams))
    prefixed = prefix_active(config.naming, len(upstreams))
    tools_by_upstream: dict[str, list[JSONObject]] = {}
    for name, up in upstreams.items():
        snapshot = snapshots.get(name)
        catalog = snapshot.catalog if snapshot is not None else None
        tools_by_upstream[name] = _filter_tools(catalog.tools if catalog else (), up)
    reserved = list(reserved)
    tool_keys = {n: [_naming_key(t["name"], upstreams[n]) for t in ts] for n, ts in tools_by_upstream.items()}
    tool_names = assign_names(tool_keys, config.naming,
                              server_parts=server_parts, prefixed=prefixed, reserved=reserved,
                              pinned=names.pinned("tools") if names is not None else None)
    prompt_catalog = {n: [p["name"] for p in _catalog(snapshots, n).prompts if isinstance(p.get("name"), str)]
                      for n in upstreams}
    prompt_names = assign_names(prompt_catalog, config.naming, server_parts=server_parts, prefixed=prefixed,
                                pinned=names.pinned("prompts") if names is not None else None)
    if names is not None:
        names.record("tools", tool_names.forward)
        names.record("prompts", prompt_names.forward)
    sources: list[ToolSource] = []
    for name in upstreams:
        catalog = _catalog(snapshots, name)
        key = upstream_context_key(name)
        availability = {"anyOf": [{"kind": "context", "key": key, "equals": state} for state in SERVING]}
        overrides = upstreams[name].tools.overrides
        tools = [_descriptor(name, tool_names.exposed(name, key), t,
                             {"allOf": [availability, TAKES_TASKS]} if _needs_tasks(t) else availability,
                             overrides.get(t["name"]))
                 for t, key in zip(tools_by_upstream[name], tool_keys[name], strict=True)]
        part = server_parts[name]
        resources = [_resource(name, r, "uri", part if prefixed else None) for r in catalog.resources
                     if isinstance(r.get("uri"), str)]
        templates = [_resource(name, t, "uriTemplate", part if prefixed else None) for t in catalog.templates
                     if isinstance(t.get("uriTemplate"), str)]
        prompts = [PromptEntry(prompt_names.exposed(name, p["name"]), name, p["name"],
                               {**p, "name": prompt_names.exposed(name, p["name"])})
                   for p in catalog.prompts if isinstance(p.get("name"), str)]
        sources.append(ToolSource("mcp", name, tools, resources, templates, prompts))
    context = AvailabilityContext(values={upstream_context_key(n): s.state for n, s in snapshots.items()})
    uri_owners = {part: name for name, part in server_parts.items()} if prefixed else {}
    lookalikes = []
    for name in upstreams:
        by_case: dict[str, list[str]] = {}
        for tool in tools_by_upstream[name]:
            by_case.setdefault(tool["name"].lower(), []).append(tool["name"])
        head = server_parts[name] + config.naming.separator if prefixed else ""
        lookalikes += [[(f"{name}:{raw} ({tool_names.exposed(name, _naming_key(raw, upstreams[name]))})",
                         (tool_names.exposed(name, _naming_key(raw, upstreams[name])), head + raw, f"{name}:{raw}"))
                        for raw in raws] for raws in by_case.values() if len(raws) > 1]
    client_rules = {cid: c.tools for cid, c in config.clients.items()}
    warnings = case_lookalike_denies(config.policy, client_rules, lookalikes, config.line_of)
    if all(_catalog(snapshots, name) is not _EMPTY for name in upstreams):  # every tool is known: none is missing
        facts = [ToolFacts(name) for name in reserved]
        facts += [ToolFacts.from_annotations(d.name, source.id, d.executor.tool, d.annotations)
                  for source in sources for d in source.tools if d.executor is not None]
        warnings += matchless_patterns(config.policy, client_rules, facts, config.line_of)
    definitions = tuple(note for name in upstreams for note in _catalog(snapshots, name).notes)
    return BuiltSources(sources, context, uri_owners, tuple(warnings), definitions)


_EMPTY = Catalog()

TAKES_TASKS_KEY = "the client takes tasks"
TAKES_TASKS = {"kind": "context", "key": TAKES_TASKS_KEY, "equals": True}
"""A tool whose `execution.taskSupport` is `required` can only be called as a task (2025-11-25): a client that did
not declare the tasks capability could not call it, so it does not see it; this is the reason `triad plan` shows
(a 2026-07-28 client sees it, and is told -32021 if it calls it without the extension). Checked per caller
(`gateway.registry.build_view`, from `Identity.tasks`)."""


def _needs_tasks(tool: Mapping[str, JSON]) -> bool:
    execution = tool.get("execution")
    return isinstance(execution, Mapping) and execution.get("taskSupport") == "required"


def _catalog(snapshots: Mapping[str, UpstreamSnapshot], name: str) -> Catalog:
    snapshot = snapshots.get(name)
    return snapshot.catalog if snapshot is not None and snapshot.catalog is not None else _EMPTY


def _filter_tools(tools: Iterable[JSONObject], config: UpstreamConfig) -> list[JSONObject]:
    include = compile_globs(config.tools.include)
    exclude = compile_globs(config.tools.exclude)
    out = []
    for tool in tools:
        name = tool.get("name")
        if not isinstance(name, str) or not name:
            continue  # a tool without a name cannot be called; skip it rather than invent one
        if include and first_match(include, name) is None:
            continue
        if first_match(exclude, name) is not None:
            continue
        out.append(tool)
    return out


def _naming_key(raw: str, config: UpstreamConfig) -> str:
    override = config.tools.overrides.get(raw)
    return renamed_key(raw, override.name) if override is not None and override.name is not None else raw


def _descriptor(upstream: str, exposed: str, wire: JSONObject, availability: JSONObject,
                override: ToolOverride | None = None) -> ToolDescriptor:
    raw = wire["name"]
    if override is not None:
        wire = override_wire(wire, override)
    schema = wire.get("inputSchema")
    return ToolDescriptor(
        name=exposed,
        description=wire.get("description") or "",
        input_schema=schema if isinstance(schema, dict) else {"type": "object"},
        owner=OwnerRef("mcp", upstream),
        title=wire.get("title"),
        output_schema=wire.get("outputSchema"),
        executor=ExecutorRef("mcp", upstream, raw),
        availability=availability,
        annotations=wire.get("annotations"),
        wire=wire,
        arguments=bound_arguments(override),
    )


def _resource(upstream: str, wire: JSONObject, key: str, part: str | None) -> ResourceEntry:
    raw = wire[key]
    exposed = expose_uri(raw, part) if part is not None else raw
    return ResourceEntry(exposed, upstream, raw, {**wire, key: exposed})
