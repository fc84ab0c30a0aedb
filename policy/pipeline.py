"""The seven-layer allow/deny pipeline, compiled once per config, with a decision trace per tool.

Layers, in order: 1 global profile · 2 agent (policy.agents.<agent> and the client's own `tools:`) · 3 provider
(`provider/model`, else `provider`) · 4 groups (each group of the caller) · 5 gateway deny list (plus built-in
defaults when listening on a non-loopback address) · 6 owner-only · 7 run-level allow lists.

Semantics (reference section 8.2): in a layer, deny beats allow and an empty or absent allow allows all;
`also_allow` adds to allow (alone, it means `*` plus those). A tool must pass every layer that applies; any deny is
final. At run level an **empty** list denies everything, and several lists intersect. Pure: no I/O, no clock.

Every list is compiled once into a `MatcherSet`: config lists when the pipeline is built, run-level lists (whose
size `gateway.identity.bounded_run_list` bounds where they come in) on first use, kept in a small cache of the most
recent ones, because a view asks for one decision per tool with the same caller.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from policy.config import PolicyConfig, ToolRule
from policy.patterns import MatcherSet, ToolFacts, compile_patterns
from policy.tool_index import ToolIndex

DEFAULT_REMOTE_DENY = ("exec", "spawn", "shell", "fs_write", "fs_delete", "fs_move", "apply_patch")
"""Denied when Triad listens on a non-loopback address (after OpenClaw's DEFAULT_GATEWAY_HTTP_TOOL_DENY), matched
against exposed names and raw names of every upstream; lift one with `policy.gateway_allow`."""

MAX_COMPILED_RUN_LISTS = 64
"""Compiled run-level lists kept for reuse; the least recently used goes first. Building one view needs one."""

LAYER_NAMES = {1: "profile", 2: "agent", 3: "provider", 4: "group", 5: "gateway_deny", 6: "owner_only",
               7: "run_level"}
"""Each layer's one name: in explanations, log lines (`layer`), the audit (`layer`) and metrics (`layer` label);
the spelling of its `policy:` key where it has one."""


@dataclass(frozen=True, slots=True)
class CompiledRule:
    source: str
    allow: MatcherSet | None  # None: allow all
    deny: MatcherSet


EMPTY_RUN_LIST = "denied: the run-level allow list is empty"
NOT_IN_RUN_LIST = "denied: not in the run-level allow list"


@dataclass(frozen=True, slots=True)
class Step:
    """One layer's verdict on one tool, for explanations and diagnostics."""

    layer: int
    source: str
    allowed: bool
    pattern: str | None
    detail: str

    def describe(self) -> str:
        return f"layer {self.layer} ({LAYER_NAMES[self.layer]}, {self.source}): {self.detail}"


@dataclass(frozen=True, slots=True)
class Decision:
    allowed: bool
    steps: tuple[Step, ...]

    @property
    def denied_by(self) -> Step | None:
        return next((s for s in self.steps if not s.allowed), None)


@dataclass(frozen=True, slots=True)
class Identity:
    """Who is calling, as the policy sees it. Hashable: views are cached per identity.

    `run_lists` are the run-level allow lists in force (from the session's `X-Triad-Tools` header or `tools`
    query parameter, and a request's `_meta["triad/tools"]`)."""

    client_id: str
    agent: str | None = None
    provider: str | None = None
    model: str | None = None
    groups: tuple[str, ...] = ()
    owner: bool = False
    run_lists: tuple[tuple[str, ...], ...] = ()
    tasks: bool = False
    """The client can take tasks (it declared the tasks capability in the handshake era, 2025-11-25): it may see
    tools that run only as tasks."""
    principal: tuple[str, str] | None = field(default=None, compare=False)
    """Who stands behind the client, when that is more than the client: an OAuth token's issuer and subject.
    Sessions are bound to it (`gateway.identity.same_principal`); policy and views ignore it, so every subject
    of one client shares that client's cached view."""


class Pipeline:
    def __init__(self, policy: PolicyConfig, client_rules: Mapping[str, ToolRule | None], *,
                 remote: bool = False) -> None:
        groups = policy.tool_groups
        self._groups = groups
        profile = policy.active_profile()
        self._profile = _compile(f"profile {policy.use}" if policy.use else "profile", profile, groups)
        self._agents = {k.lower(): _compile(f"agent {k}", r, groups) for k, r in policy.agents.items()}
        self._clients = {k: _compile(f"client {k} tools", r, groups) for k, r in client_rules.items()}
        self._providers = {k.lower(): _compile(f"provider {k}", r, groups) for k, r in policy.providers.items()}
        self._group_rules = {k.lower(): _compile(f"group {k}", r, groups) for k, r in policy.groups.items()}
        lifted = {name.strip().lower() for name in policy.gateway_allow}
        defaults = [p for name in DEFAULT_REMOTE_DENY if name not in lifted for p in (name, f"*:{name}")]
        deny = [*policy.gateway_deny, *(defaults if remote else ())]
        self._gateway = CompiledRule("gateway_deny", None, _set(deny, groups)) if deny else None
        self._owner_only = _set(policy.owner_only, groups)
        self._run_sets: OrderedDict[tuple[str, ...], MatcherSet] = OrderedDict()

    def decide(self, caller: Identity, tool: ToolFacts) -> Decision:
        steps: list[Step] = []
        for layer, rule in self._rules(caller):
            steps.append(_apply(layer, rule, tool))
        if self._gateway is not None:
            steps.append(_apply(5, self._gateway, tool))
        if self._owner_only:
            match = self._owner_only.first(tool)
            if match is None:
                steps.append(Step(6, "owner_only", True, None, "allowed: not an owner-only tool"))
            else:
                ok = caller.owner
                steps.append(Step(6, "owner_only", ok, match.pattern,
                                  f"{'allowed: caller is an owner' if ok else 'denied: owners only'} "
                                  f"(pattern {match.pattern!r})"))
        for index, patterns in enumerate(caller.run_lists, 1):
            steps.append(self.run_level(index, patterns, tool))
        return Decision(all(s.allowed for s in steps), tuple(steps))

    def _rules(self, caller: Identity) -> list[tuple[int, CompiledRule]]:
        rules: list[tuple[int, CompiledRule]] = []
        if self._profile is not None:
            rules.append((1, self._profile))
        if caller.agent and (rule := self._agents.get(caller.agent.lower())) is not None:
            rules.append((2, rule))
        if (rule := self._clients.get(caller.client_id)) is not None:
            rules.append((2, rule))
        if caller.provider:
            provider = caller.provider.lower()
            candidates = [f"{provider}/{caller.model.lower()}"] if caller.model else []
            for key in [*candidates, provider]:
                if (rule := self._providers.get(key)) is not None:
                    rules.append((3, rule))
                    break
        for group in caller.groups:
            if (rule := self._group_rules.get(group.lower())) is not None:
                rules.append((4, rule))
        return rules

    def run_level(self, index: int, patterns: Sequence[str], tool: ToolFacts) -> Step:
        source = f"run-level list {index}"
        if not patterns:
            return Step(7, source, False, None, EMPTY_RUN_LIST)
        match = self._run_set(tuple(patterns)).first(tool)
        if match is None:
            return Step(7, source, False, None, NOT_IN_RUN_LIST)
        return Step(7, source, True, match.pattern, f"allowed by {match.pattern!r}")

    def run_level_denials(self, index: int, patterns: Sequence[str], tools: ToolIndex) -> tuple[Step, list[str]]:
        """Layer 7 alone for many tools: the names of the tools of `tools` that the `index`-th run-level list
        denies, and the one step that says why for all of them. A view narrowed by one more list decides only this,
        for the tools its caller's view already allows (`gateway.registry.narrow_by_run_list`): the list compiled
        once, each of its patterns looked up among the tools (`policy.ToolIndex`)."""
        source = f"run-level list {index}"
        if not patterns:
            return Step(7, source, False, None, EMPTY_RUN_LIST), list(tools.names)
        return (Step(7, source, False, None, NOT_IN_RUN_LIST),
                tools.unmatched(self._run_set(tuple(patterns)).matchers))

    def _run_set(self, patterns: tuple[str, ...]) -> MatcherSet:
        found = self._run_sets.get(patterns)
        if found is None:
            found = self._run_sets[patterns] = _set(patterns, self._groups)
            if len(self._run_sets) > MAX_COMPILED_RUN_LISTS:
                self._run_sets.popitem(last=False)
        else:
            self._run_sets.move_to_end(patterns)
        return found


def _set(patterns: Sequence[str], groups: Mapping[str, Sequence[str]]) -> MatcherSet:
    return MatcherSet(compile_patterns(patterns, groups))


def _compile(source: str, rule: ToolRule | None, groups: Mapping[str, Sequence[str]]) -> CompiledRule | None:
    if rule is None or (rule.allow is None and not rule.deny and not rule.also_allow):
        return None
    allow: MatcherSet | None = None
    if rule.allow or rule.also_allow:
        base = rule.allow if rule.allow else ("*",)
        allow = _set([*base, *rule.also_allow], groups)
    return CompiledRule(source, allow, _set(rule.deny, groups))


def _apply(layer: int, rule: CompiledRule, tool: ToolFacts) -> Step:
    denied = rule.deny.first(tool)
    if denied is not None:
        return Step(layer, rule.source, False, denied.pattern, f"denied by {denied.pattern!r}")
    if rule.allow is None:
        detail = "allowed: no deny pattern matches" if rule.deny else "allowed: no allow list"
        return Step(layer, rule.source, True, None, detail)
    allowed = rule.allow.first(tool)
    if allowed is None:
        return Step(layer, rule.source, False, None, "denied: not in the allow list")
    return Step(layer, rule.source, True, allowed.pattern, f"allowed by {allowed.pattern!r}")
