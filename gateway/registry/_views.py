"""Per-client views of one registry version: the plan, the name lookups, and the serialised lists.

A view is computed once per (registry version, identity) and reused by every request of that client until the
registry changes, so the call path only does dict lookups. Pagination cursors are opaque keyset cursors over the
caller's own list (`paginate`): a rebuild for another client's change does not make them stale.
"""

from __future__ import annotations

import base64
import binascii
import dataclasses
import functools
import hashlib
import itertools
import json
import operator
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Literal

from consumers import JSONObject, OwnLists
from gateway.config import ToolsMode
from gateway.errors import StaleCursor
from gateway.identity import bounded_run_list_work
from gateway.registry._catalog import SERVING, TAKES_TASKS_KEY, upstream_context_key, upstream_of_key
from gateway.registry._core_tools import TOOLS_MODE_KEY
from gateway.registry._descriptors import PromptEntry, Registry, ToolDescriptor
from gateway.registry._naming import expose_uri
from gateway.registry._pinning import pin_diagnostic
from gateway.registry._planner import HiddenEntry, PlanEntry, ToolPlan, build_plan
from gateway.registry._schemas import PROFILES, normalize
from policy import Decision, Identity, Pipeline, ToolFacts, ToolIndex, compile_patterns


@dataclass(frozen=True)
class ClientView:
    version: int
    identity: Identity
    plan: ToolPlan
    denied: tuple[tuple[ToolDescriptor, Decision], ...]
    """Available tools the policy hides from this caller, with the decision that says why."""
    tools: Mapping[str, PlanEntry]
    """Every tool this caller may call, by exposed name (in search mode too, where most are not listed)."""
    tools_wire: tuple[JSONObject, ...]
    """What `tools/list` gives this caller: every tool it may call, or in search mode the always-listed ones and
    the core tools, `search_tools` and `call_tool` (`gateway.registry` CORE_TOOLS)."""
    resources_wire: tuple[JSONObject, ...]
    templates_wire: tuple[JSONObject, ...]
    prompts: Mapping[str, PromptEntry]
    prompts_wire: tuple[JSONObject, ...]
    visible_upstreams: frozenset[str]
    fingerprint: tuple[int, int, int]
    """What a client would notice changing (tools, resources, prompts), computed once per view: sessions keep
    only these three numbers, and get `list_changed` only for the lists whose number changed."""
    mode: ToolsMode = "all"
    profile: str | None = None
    """The provider schema profile of the input schemas this caller sees."""
    unlisted: ClientView | None = None
    """When run-level lists narrow this view, the caller's view without them: search ranks over that view's index
    (built once per policy view) and keeps what this one allows, so a list a client picks per request never costs
    an index build."""

    @functools.cached_property
    def searchable(self) -> Mapping[str, ToolDescriptor]:
        """The tools `search_tools` ranks: every tool this caller may call but the core tools themselves."""
        return {name: entry.descriptor for name, entry in self.tools.items() if entry.executor.kind != "core"}

    @functools.cached_property
    def facts(self) -> Mapping[str, ToolFacts]:
        """What a pattern sees of each tool this caller may call, computed once per view: views narrowed from
        this one by a run-level list match against these."""
        return {name: tool_facts(entry.descriptor) for name, entry in self.tools.items()}

    @functools.cached_property
    def index(self) -> ToolIndex:
        """The tools a run-level list narrows (all this caller may call but the core tools), laid out once per
        view for deciding a whole list at a time (`narrow_by_run_list`)."""
        return ToolIndex({name: facts for name, facts in self.facts.items()
                          if self.tools[name].executor.kind != "core"})

    @functools.cached_property
    def tool_names(self) -> frozenset[str]:
        """The names of `searchable`, hashed once per view: search indexes are cached by it."""
        return frozenset(self.searchable)

    @functools.cached_property
    def hidden(self) -> Mapping[str, HiddenEntry]:
        """The plan's hidden tools by exposed name, made once per view at the first refused call that needs it."""
        return {entry.descriptor.name: entry for entry in self.plan.hidden}


def tool_facts(descriptor: ToolDescriptor) -> ToolFacts:
    executor = descriptor.executor
    upstream, raw = (executor.id, executor.tool) if executor is not None and executor.kind == "mcp" else ("", "")
    return ToolFacts.from_annotations(descriptor.name, upstream, raw, descriptor.annotations)


def build_view(registry: Registry, identity: Identity, pipeline: Pipeline, profile: str | None = None,
               schemas: dict[tuple[str, str], JSONObject] | None = None, mode: ToolsMode = "all",
               always_list: Sequence[str] = (), tool_groups: Mapping[str, Sequence[str]] | None = None
               ) -> ClientView:
    """`schemas` caches normalised input schemas by (profile, tool) for this registry version; in `search` mode,
    `always_list` (globs and groups, `tool_groups` expanding) picks the tools still listed."""
    # whether the caller takes tasks, and its tools mode, are facts of the caller, not of the registry
    # (`gateway.registry.TAKES_TASKS`, `TOOLS_MODE_KEY`)
    context = dataclasses.replace(registry.context, values={**registry.context.values,
                                                            TAKES_TASKS_KEY: identity.tasks, TOOLS_MODE_KEY: mode})
    plan = build_plan(registry.tools.values(), context)
    allowed: list[PlanEntry] = []
    denied: list[tuple[ToolDescriptor, Decision]] = []
    # a run-level list narrows what a run may use through the core tools (what `search_tools` finds and
    # `call_tool` calls), not the core tools themselves; every other layer decides on them as on any tool
    unlisted = dataclasses.replace(identity, run_lists=()) if identity.run_lists else identity
    for entry in plan.visible:
        decision = pipeline.decide(unlisted if entry.executor.kind == "core" else identity,
                                   tool_facts(entry.descriptor))
        if decision.allowed:
            allowed.append(entry)
        else:
            denied.append((entry.descriptor, decision))
    tools = {entry.descriptor.name: entry for entry in allowed}
    # An upstream's resources and prompts are visible when the caller may use at least one of its tools, or when
    # it has no tools at all (then tool policy has nothing to say about it).
    with_tools = _with_tools(registry)
    seen = {entry.executor.id for entry in allowed if entry.executor.kind == "mcp"}
    serving = {upstream_of_key(key) for key, state in registry.context.values.items() if state in SERVING}
    ready = {name for name in serving if name is not None and (name in seen or name not in with_tools)}
    resources, templates, prompts = _of_upstreams(registry, ready)
    listed = allowed
    if mode == "search":  # the always-listed tools, and the core tools (sorted last)
        matchers = compile_patterns(always_list, tool_groups or {})
        listed = [entry for entry in allowed if entry.executor.kind == "core"
                  or any(m.matches(tool_facts(entry.descriptor)) for m in matchers)]
    tools_wire = tuple(tool_wire(entry.descriptor, profile, schemas if schemas is not None else {})
                       for entry in listed)
    return ClientView(
        version=registry.version,
        identity=identity,
        plan=plan,
        denied=tuple(denied),
        tools=tools,
        tools_wire=tools_wire,
        resources_wire=resources,
        templates_wire=templates,
        prompts=prompts,
        prompts_wire=_prompts_wire(prompts),
        visible_upstreams=frozenset(ready),
        fingerprint=(_digest(tools_wire), _digest(resources + templates), _digest(_prompts_wire(prompts))),
        mode=mode,
        profile=profile,
    )


def down_upstream(view: ClientView, name: str, pipeline: Pipeline) -> str | None:
    """The upstream whose state alone hides tool `name` from `view`'s caller (it is not serving), if the policy
    lets that caller see the tool: its call is told the upstream is down. None for a name that is unknown, hidden
    by policy (every layer, run-level lists included) or hidden for any other reason: those look unknown."""
    entry = view.hidden.get(name)
    executor = entry.descriptor.executor if entry is not None else None
    if entry is None or executor is None or executor.kind != "mcp":
        return None
    key = upstream_context_key(executor.id)
    if any(d.signal is None or d.signal.get("key") != key for d in entry.diagnostics):
        return None
    return executor.id if pipeline.decide(view.identity, tool_facts(entry.descriptor)).allowed else None


def pin_withheld(view: ClientView, name: str, pipeline: Pipeline) -> str | None:
    """Why a `pin_definitions` hook alone hides tool `name` from `view`'s caller (a new definition not approved
    yet, or one being recorded), if the policy lets that caller see the tool: its call is told so, as a call of a
    changed pinned tool is. None otherwise (those look unknown, as in `down_upstream`)."""
    entry = view.hidden.get(name)
    if entry is None or not entry.diagnostics:
        return None
    found = [pin_diagnostic(d.signal) if d.signal is not None else None for d in entry.diagnostics]
    if any(f is None for f in found) or not pipeline.decide(view.identity, tool_facts(entry.descriptor)).allowed:
        return None
    return "; ".join(str(f["message"]) for f in found if f is not None)


_DESCRIPTOR = operator.attrgetter("descriptor")


def narrow_by_run_list(base: ClientView, identity: Identity, registry: Registry, pipeline: Pipeline) -> ClientView:
    """The view of `identity`, which is `base.identity` with one more run-level list (its last): `base` with only
    layer 7 decided, for the tools `base` allows. A run-level list only narrows, so every other layer's decision,
    the plan and the serialised tools are `base`'s: a list a client sends with one request costs one match per
    tool it could call, not a new view (which decides every layer and serialises every tool)."""
    index, patterns = len(identity.run_lists), identity.run_lists[-1]
    bounded_run_list_work(patterns, len(base.index))
    step, names = pipeline.run_level_denials(index, patterns, base.index)
    unlisted = base.unlisted or base
    if not names:
        return dataclasses.replace(base, identity=identity, unlisted=unlisted)
    out = frozenset(names)
    tools = {name: entry for name, entry in base.tools.items() if name not in out}
    # one decision for every tool the list denies, paired in C loops: thousands of tools per fresh list
    entries = map(base.tools.__getitem__, names)
    denied = base.denied + tuple(zip(map(_DESCRIPTOR, entries), itertools.repeat(Decision(False, (step,)))))
    seen = {entry.executor.id for entry in tools.values() if entry.executor.kind == "mcp"}
    with_tools = _with_tools(registry)
    ready = {name for name in base.visible_upstreams if name in seen or name not in with_tools}
    resources, templates, prompts = _of_upstreams(registry, ready)
    tools_wire = tuple(wire for wire in base.tools_wire if wire.get("name") in tools)
    prompts_wire = _prompts_wire(prompts)
    # what a client would notice: `base`'s tools and which of them this list keeps (no new serialisation)
    listed = tuple(str(wire.get("name")) for wire in tools_wire)
    fingerprint = (hash((base.fingerprint[0], listed)), _digest(resources + templates), _digest(prompts_wire))
    return dataclasses.replace(base, identity=identity, denied=denied, tools=tools, tools_wire=tools_wire,
                               resources_wire=resources, templates_wire=templates, prompts=prompts,
                               prompts_wire=prompts_wire, visible_upstreams=frozenset(ready), fingerprint=fingerprint,
                               unlisted=unlisted)


def narrow_to_name(base: ClientView, identity: Identity, pipeline: Pipeline, name: str) -> ClientView:
    """The view of `identity` (`base.identity` with more run-level lists after its own) for a request that touches
    the tool `name` and nothing else (a call): that tool alone, if every added list lets it through, and nothing
    more, so any other use of this view finds nothing (fail closed). A core tool is kept as it is (lists do not
    narrow it; what it reaches is found in the whole narrowed view: `gateway.calls`)."""
    entry = base.tools.get(name)
    kept: dict[str, PlanEntry] = {}
    denied = base.denied
    if entry is not None and entry.executor.kind == "core":
        kept = {name: entry}
    elif entry is not None:
        facts = base.facts[name]
        for index in range(len(base.identity.run_lists) + 1, len(identity.run_lists) + 1):
            step = pipeline.run_level(index, identity.run_lists[index - 1], facts)
            if not step.allowed:
                denied = (*denied, (entry.descriptor, Decision(False, (step,))))
                break
        else:
            kept = {name: entry}
    return dataclasses.replace(base, identity=identity, denied=denied, tools=kept, tools_wire=(), resources_wire=(),
                               templates_wire=(), prompts={}, prompts_wire=(), visible_upstreams=frozenset(),
                               unlisted=base.unlisted or base)


def _with_tools(registry: Registry) -> set[str]:
    """The upstreams that offer tools (their resources and prompts follow their tools' visibility)."""
    return {d.executor.id for d in registry.tools.values() if d.executor is not None and d.executor.kind == "mcp"}


def _of_upstreams(registry: Registry, ready: set[str]
                  ) -> tuple[tuple[JSONObject, ...], tuple[JSONObject, ...], dict[str, PromptEntry]]:
    """The resources, resource templates and prompts of the `ready` upstreams."""
    return (tuple(dict(r.wire) for r in registry.resources.values() if r.upstream in ready),
            tuple(dict(t.wire) for t in registry.templates if t.upstream in ready),
            {name: p for name, p in registry.prompts.items() if p.upstream in ready})


def _prompts_wire(prompts: Mapping[str, PromptEntry]) -> tuple[JSONObject, ...]:
    return tuple(dict(p.wire) for p in sorted(prompts.values(), key=lambda p: p.exposed))


SessionLists = tuple[tuple[str, OwnLists | None], ...]
"""What a session's own upstream sessions list (`sessions: per_client`), by upstream name, sorted; None where its
own session could not be opened (that upstream's tools are then hidden from it: fail closed)."""


def narrow_view(view: ClientView, registry: Registry, own: SessionLists) -> ClientView:
    """`view` as one session sees it: of each per-client upstream, only the tools, prompts and resource templates
    its own session lists (none where it could not be opened), and that session's resources instead of the
    catalog's (its session resources, namespaced like the others)."""
    by_upstream = dict(own)
    dropped = set()
    for name, entry in view.tools.items():
        executor = entry.executor
        if executor.kind == "mcp" and executor.id in by_upstream:
            lists = by_upstream[executor.id]
            if lists is None or executor.tool not in lists.tools:
                dropped.add(name)
    hidden_prompts = {name for name, prompt in view.prompts.items()
                      if prompt.upstream in by_upstream and not _lists(by_upstream[prompt.upstream], "prompts",
                                                                       prompt.raw)}
    templates = {t.exposed: t for t in registry.templates if t.upstream in by_upstream}
    templates_wire = tuple(wire for wire in view.templates_wire
                           if (found := templates.get(wire.get("uriTemplate", ""))) is None
                           or _lists(by_upstream[found.upstream], "templates", found.raw))
    resources = view.resources_wire
    replaced = {name for name, lists in own if lists is not None and lists.resources is not None
                and name in view.visible_upstreams}
    if replaced:
        owners = registry.resources
        kept = tuple(wire for wire in resources
                     if (found_resource := owners.get(wire.get("uri", ""))) is None
                     or found_resource.upstream not in replaced)
        added = tuple({**wire, "uri": _exposed_uri(registry, name, wire["uri"])}
                      for name, lists in own if name in replaced and lists is not None
                      for wire in lists.resources or () if isinstance(wire.get("uri"), str))
        resources = kept + added
    if not dropped and not replaced and not hidden_prompts and len(templates_wire) == len(view.templates_wire):
        return view
    tools_wire = tuple(wire for wire in view.tools_wire if wire.get("name") not in dropped)
    prompts_wire = tuple(wire for wire in view.prompts_wire if wire.get("name") not in hidden_prompts)
    return dataclasses.replace(
        view, tools={name: entry for name, entry in view.tools.items() if name not in dropped},
        tools_wire=tools_wire, resources_wire=resources, templates_wire=templates_wire,
        prompts={name: prompt for name, prompt in view.prompts.items() if name not in hidden_prompts},
        prompts_wire=prompts_wire,
        fingerprint=(_digest(tools_wire), _digest(resources + templates_wire), _digest(prompts_wire)))


def _lists(lists: OwnLists | None, family: Literal["prompts", "templates"], raw: str) -> bool:
    """The session lists `raw` among its prompts or resource templates (one that could not be opened lists none)."""
    names = getattr(lists, family) if lists is not None else None
    return names is not None and raw in names


def _exposed_uri(registry: Registry, upstream: str, raw: str) -> str:
    part = registry.uri_parts.get(upstream)
    return expose_uri(raw, part) if part is not None else raw


def tool_wire(descriptor: ToolDescriptor, profile: str | None, schemas: dict[tuple[str, str], JSONObject]
              ) -> JSONObject:
    """A tool as a caller sees it: its wire form, the input schema after the caller's profile."""
    wire = descriptor.to_wire()
    if profile is None or profile == "anthropic":
        return wire
    key = (profile, descriptor.name)
    if key not in schemas:
        schemas[key] = normalize(descriptor.input_schema, profile)
    return {**wire, "inputSchema": schemas[key]}


def _digest(items: tuple[JSONObject, ...]) -> int:
    return hash(json.dumps(items, sort_keys=True, default=str))


def paginate(items: Sequence[JSONObject], key: str, cursor: str | None, page_size: int) -> JSONObject:
    """One page of the caller's own list `items` under `key` (`tools`, `resources`...), each item identified by
    its name, URI or URI template (`_ID_FIELDS`).

    A cursor holds a digest of the list it paged, its offset, and hashes of the last keys it delivered. While the
    caller's list is unchanged (another client's change rebuilds the registry, not this list) the offset holds; when
    it changed, the page continues after the last delivered item still listed, so an item listed throughout is
    neither repeated nor skipped (lists keep the relative order of their items: sorted tools, upstream order)."""
    field = _ID_FIELDS.get(key, "name")
    keys = [str(item.get(field, "")) for item in items]
    start = 0 if cursor is None else _resume(_decode_cursor(cursor), keys)
    end = start + page_size
    result: JSONObject = {key: list(items[start:end])}
    if end < len(items):
        result["nextCursor"] = _encode_cursor(_list_digest(keys), end, keys[max(0, end - CURSOR_KEYS):end])
    return result


_ID_FIELDS = {"tools": "name", "prompts": "name", "resources": "uri", "resourceTemplates": "uriTemplate"}

CURSOR_KEYS = 16
"""Hashes of the last delivered keys a cursor holds: the page resumes after the latest of them still listed; a
cursor whose every one of them left the caller's list is refused (stale) rather than guessed."""

_HASH_BYTES = 8


def _key_hash(key: str) -> bytes:
    return hashlib.blake2b(key.encode("utf-8", "surrogatepass"), digest_size=_HASH_BYTES).digest()


def _list_digest(keys: Sequence[str]) -> bytes:
    digest = hashlib.blake2b(digest_size=_HASH_BYTES)
    for key in keys:
        digest.update(_key_hash(key))
    return digest.digest()


def _encode_cursor(digest: bytes, offset: int, last: Sequence[str]) -> str:
    raw = b"\x02" + digest + offset.to_bytes(4, "big") + b"".join(_key_hash(k) for k in reversed(last))
    return base64.urlsafe_b64encode(raw).decode().rstrip("=")


MAX_CURSOR_CHARS = 256
"""Characters in a list cursor: Triad's own are at most 188 (a version byte, the list digest, the offset and
`CURSOR_KEYS` key hashes, in base64), whatever the length of the names or URIs; anything longer was not issued
here, and is refused before it is decoded."""


def _decode_cursor(cursor: str) -> tuple[bytes, int, list[bytes]]:
    if len(cursor) > MAX_CURSOR_CHARS:
        raise StaleCursor(f"invalid cursor: it has {len(cursor)} characters, the limit is {MAX_CURSOR_CHARS}; it was "
                          "not issued by this server; list again without a cursor")
    try:
        raw = base64.urlsafe_b64decode(cursor + "=" * (-len(cursor) % 4))
    except (ValueError, binascii.Error):
        raw = b""
    body = raw[1 + _HASH_BYTES + 4:]
    if raw[:1] != b"\x02" or not body or len(body) % _HASH_BYTES or len(body) > CURSOR_KEYS * _HASH_BYTES:
        raise StaleCursor("invalid cursor: it was not issued by this server; list again without a cursor")
    offset = int.from_bytes(raw[1 + _HASH_BYTES:1 + _HASH_BYTES + 4], "big")
    last = [body[i:i + _HASH_BYTES] for i in range(0, len(body), _HASH_BYTES)]
    return raw[1:1 + _HASH_BYTES], offset, last


def _resume(cursor: tuple[bytes, int, list[bytes]], keys: Sequence[str]) -> int:
    digest, offset, last = cursor
    if digest == _list_digest(keys) and 0 < offset <= len(keys) and _key_hash(keys[offset - 1]) == last[0]:
        return offset
    positions = {_key_hash(key): index for index, key in enumerate(keys)}
    for hashed in last:  # the latest delivered item still listed
        if hashed in positions:
            return positions[hashed] + 1
    raise StaleCursor("stale cursor: every item of the last page left this list since the cursor was issued; "
                      "list again from the start")


def schema_profile(configured: str | None, provider: str | None) -> str | None:
    """The client's own setting, else its provider's family when Triad has a profile for it."""
    if configured is not None:
        return configured
    return provider.lower() if provider and provider.lower() in PROFILES else None
