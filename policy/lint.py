"""Static checks of policy patterns for `triad check`: a pattern that can never match is almost always a typo.

Without connecting, Triad cannot know every tool name, but it knows the upstreams: `group:<name>` must name an
upstream, a built-in group or a `tool_groups` entry; `<upstream>:<tool>` must name an upstream; and a prefixed
pattern (`<part><separator>...`) must start like one of the upstreams' exposed prefixes. And a pattern that begins
with a name (not with `*`) but could match the tools of several upstreams (`f*` with upstreams `fs` and `files`)
was probably meant for one of them.

Once the upstreams have listed their tools (a registry rebuild, not `triad check`), `case_lookalike_denies` says
where a deny pattern reaches tools whose raw names differ only by case: matching ignores case, so the pattern
may be meant for either, and only one has the plain name.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence

from policy.config import PolicyConfig, ToolRule
from policy.patterns import BUILTIN_GROUPS, compile_glob


def unknown_patterns(policy: PolicyConfig, client_rules: Mapping[str, ToolRule | None],
                     upstream_parts: Mapping[str, str], separator: str | None) -> list[str]:
    """Warnings as `key.path: pattern 'p' matches nothing (why)`; `separator` is None when names are not
    prefixed (then a pattern's head says nothing about its upstream)."""
    upstreams = {name.lower() for name in upstream_parts}
    groups = {name.lower() for name in policy.tool_groups}
    heads = [compile_glob(part + separator) for part in upstream_parts.values()] if separator is not None else []
    warnings = []
    for path, pattern in _patterns(policy, client_rules):
        normalized = pattern.strip().lower()
        why = None
        if normalized.startswith("group:"):
            name = normalized.removeprefix("group:")
            if name not in upstreams and name not in groups and name not in BUILTIN_GROUPS:
                why = f"no upstream, built-in group or tool_groups entry is called {name!r}"
        elif ":" in normalized and "*" not in normalized.split(":", 1)[0]:
            if normalized.split(":", 1)[0] not in upstreams:
                why = f"no upstream is called {normalized.split(':', 1)[0]!r}"
        elif separator is not None and separator in normalized:
            head = normalized.split(separator, 1)[0] + separator
            if "*" not in head and not any(h is not None and h.matches_text(head) for h in heads):
                why = f"no upstream's tools start with {head!r}"
        if why is not None:
            warnings.append(f"{path}: pattern {pattern!r} matches nothing ({why})")
    return warnings


def spanning_patterns(policy: PolicyConfig, client_rules: Mapping[str, ToolRule | None],
                      upstream_parts: Mapping[str, str], separator: str | None) -> list[str]:
    """Warnings as `key.path: pattern 'p' spans upstreams a, b (...)` for a pattern whose literal head (the text
    before its first `*`) fits the prefix of more than one upstream. A pattern that starts with `*` is meant for
    every upstream and is not reported."""
    if separator is None:
        return []
    prefixes = {name: (part + separator).lower() for name, part in upstream_parts.items()}
    warnings = []
    for path, pattern in _patterns(policy, client_rules):
        normalized = pattern.strip().lower()
        if "*" not in normalized or ":" in normalized:
            continue  # an exact name, a group or an `upstream:tool` form names its upstream
        head = normalized.split("*", 1)[0]
        if not head:
            continue
        spanned = [name for name, prefix in prefixes.items() if prefix.startswith(head) or head.startswith(prefix)]
        if len(spanned) > 1:
            warnings.append(f"{path}: pattern {pattern!r} spans upstreams {', '.join(spanned)} (write "
                            f"'{upstream_parts[spanned[0]]}{separator}...' to mean one of them)")
    return warnings


def case_lookalike_denies(policy: PolicyConfig, client_rules: Mapping[str, ToolRule | None],
                          lookalikes: Sequence[Sequence[tuple[str, Sequence[str]]]]) -> list[str]:
    """Warnings as `key.path: deny pattern 'p' matches tools whose raw names differ only by case: ...`.
    `lookalikes`: groups of one upstream's tools whose raw names differ only by case, each tool as (its label, the
    texts a pattern written for it may match: its exposed name, the plain name of its raw name, `upstream:raw`)."""
    warnings = []
    for path, pattern in _patterns(policy, client_rules):
        if not (path.endswith(".deny") or path == "policy.gateway_deny"):
            continue
        glob = compile_glob(pattern)
        if glob is None:
            continue
        for group in lookalikes:
            hit = [label for label, texts in group if any(glob.matches_text(text) for text in texts)]
            if len(hit) > 1:
                warnings.append(f"{path}: deny pattern {pattern!r} matches tools whose raw names differ only by "
                                f"case: {', '.join(hit)} (the plain name is the exact raw-name match's; write the "
                                "exposed name of the one meant)")
    return warnings


def _patterns(policy: PolicyConfig, client_rules: Mapping[str, ToolRule | None]) -> Iterator[tuple[str, str]]:
    rules: list[tuple[str, ToolRule | None]] = [("policy.profile", policy.profile)]
    rules += [(f"policy.profiles.{k}", r) for k, r in policy.profiles.items()]
    rules += [(f"policy.agents.{k}", r) for k, r in policy.agents.items()]
    rules += [(f"policy.providers.{k}", r) for k, r in policy.providers.items()]
    rules += [(f"policy.groups.{k}", r) for k, r in policy.groups.items()]
    rules += [(f"clients.{k}.tools", r) for k, r in client_rules.items()]
    for path, rule in rules:
        if rule is None:
            continue
        for key in ("allow", "deny", "also_allow"):
            for pattern in getattr(rule, key) or ():
                yield f"{path}.{key}", pattern
    for key in ("gateway_deny", "owner_only"):
        for pattern in getattr(policy, key):
            yield f"policy.{key}", pattern
    for name, patterns in policy.tool_groups.items():
        for pattern in patterns:
            yield f"policy.tool_groups.{name}", pattern
