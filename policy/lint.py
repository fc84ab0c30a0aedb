"""Static checks of policy patterns for `triad check`: a pattern that can never match is almost always a typo.

Without connecting, Triad cannot know every tool name, but it knows the upstreams: `group:<name>` must name an
upstream, a built-in group or a `tool_groups` entry; `<upstream>:<tool>` must name an upstream; and a prefixed
pattern (`<part><separator>...`) must start like one of the upstreams' exposed prefixes. And a pattern that begins
with a name (not with `*`) but could match the tools of several upstreams (`f*` with upstreams `fs` and `files`)
was probably meant for one of them.

A glob has `*` as its only wildcard, so a pattern written as a regular expression (`^.*exec.*$`, `demo__ech?`,
`[a-z]+`, `read|write`) matches nothing that was meant: `regex_patterns` says so, with the glob meant.

Once the upstreams have listed their tools (a registry rebuild, not `triad check`), `case_lookalike_denies` says
where a deny pattern reaches tools whose raw names differ only by case: matching ignores case, so the pattern
may be meant for either, and only one has the plain name; and `matchless_patterns` names each pattern that
matches none of the tools.

Every warning is `key.path: message (line N)` when `line_of` (the config's line of a key path) is given.
"""

from __future__ import annotations

import difflib
import re
from collections.abc import Callable, Iterator, Mapping, Sequence

from policy.config import PolicyConfig, ToolRule
from policy.patterns import BUILTIN_GROUPS, ToolFacts, compile_glob, compile_patterns

KeyPath = tuple[str | int, ...]
LineOf = Callable[[KeyPath], int | None]


def unknown_patterns(policy: PolicyConfig, client_rules: Mapping[str, ToolRule | None],
                     upstream_parts: Mapping[str, str], separator: str | None, line_of: LineOf | None = None
                     ) -> list[str]:
    """Warnings as `key.path: pattern 'p' matches nothing (why)`; `separator` is None when names are not
    prefixed (then a pattern's head says nothing about its upstream)."""
    upstreams = {name.lower() for name in upstream_parts}
    groups = {name.lower() for name in policy.tool_groups}
    heads = [compile_glob(part + separator) for part in upstream_parts.values()] if separator is not None else []
    warnings = []
    known = ", ".join(sorted(part + separator for part in upstream_parts.values())) if separator else ""
    for path, key, pattern in _patterns(policy, client_rules):
        normalized = pattern.strip().lower()
        why = None
        if normalized.startswith("group:"):
            name = normalized.removeprefix("group:")
            if name not in upstreams and name not in groups and name not in BUILTIN_GROUPS:
                why = (f"no upstream, built-in group or tool_groups entry is called {name!r}; groups: "
                       f"{', '.join(sorted({*upstreams, *groups, *BUILTIN_GROUPS}))}")
        elif ":" in normalized and "*" not in normalized.split(":", 1)[0]:
            if normalized.split(":", 1)[0] not in upstreams:
                why = (f"no upstream is called {normalized.split(':', 1)[0]!r}; upstreams: "
                       f"{', '.join(sorted(upstreams)) or 'none'}")
        elif separator is not None and separator in normalized:
            head = normalized.split(separator, 1)[0] + separator
            if "*" not in head and not any(h is not None and h.matches_text(head) for h in heads):
                why = f"no upstream's tools start with {head!r}; they start with {known}"
        if why is not None:
            warnings.append(_where(path, key, f"pattern {pattern!r} matches nothing ({why})", line_of))
    return warnings


def spanning_patterns(policy: PolicyConfig, client_rules: Mapping[str, ToolRule | None],
                      upstream_parts: Mapping[str, str], separator: str | None, line_of: LineOf | None = None
                      ) -> list[str]:
    """Warnings as `key.path: pattern 'p' spans upstreams a, b (...)` for a pattern whose literal head (the text
    before its first `*`) fits the prefix of more than one upstream. A pattern that starts with `*` is meant for
    every upstream and is not reported."""
    if separator is None:
        return []
    prefixes = {name: (part + separator).lower() for name, part in upstream_parts.items()}
    warnings = []
    for path, key, pattern in _patterns(policy, client_rules):
        normalized = pattern.strip().lower()
        if "*" not in normalized or ":" in normalized:
            continue  # an exact name, a group or an `upstream:tool` form names its upstream
        head = normalized.split("*", 1)[0]
        if not head:
            continue
        spanned = [name for name, prefix in prefixes.items() if prefix.startswith(head) or head.startswith(prefix)]
        if len(spanned) > 1:
            warnings.append(_where(path, key, f"pattern {pattern!r} spans upstreams {', '.join(spanned)} (write "
                                   f"'{upstream_parts[spanned[0]]}{separator}...' to mean one of them)", line_of))
    return warnings


def case_lookalike_denies(policy: PolicyConfig, client_rules: Mapping[str, ToolRule | None],
                          lookalikes: Sequence[Sequence[tuple[str, Sequence[str]]]], line_of: LineOf | None = None
                          ) -> list[str]:
    """Warnings as `key.path: deny pattern 'p' matches tools whose raw names differ only by case: ...`.
    `lookalikes`: groups of one upstream's tools whose raw names differ only by case, each tool as (its label, the
    texts a pattern written for it may match: its exposed name, the plain name of its raw name, `upstream:raw`)."""
    warnings = []
    for path, key, pattern in _patterns(policy, client_rules):
        if not (path.endswith(".deny") or path == "policy.gateway_deny"):
            continue
        glob = compile_glob(pattern)
        if glob is None:
            continue
        for group in lookalikes:
            hit = [label for label, texts in group if any(glob.matches_text(text) for text in texts)]
            if len(hit) > 1:
                warnings.append(_where(path, key, f"deny pattern {pattern!r} matches tools whose raw names differ "
                                       f"only by case: {', '.join(hit)} (the plain name is the exact raw-name "
                                       "match's; write the exposed name of the one meant)", line_of))
    return warnings


_REGEX = re.compile(r"^\^|\$$|\\[.\w]|^\.[*+]|\.\+|[?+|()\[\]{}]")
"""Signs of a regular expression: anchors, escapes, a leading `.*`, `.+`, `?`, `+`, alternation, groups, classes and
counts. None of these is in an MCP tool name (letters, digits, `_`, `-`, `.`) or means anything to a glob; a `.*`
after a name (`fs.*`) is left alone: tool names may hold dots."""


def regex_patterns(policy: PolicyConfig, client_rules: Mapping[str, ToolRule | None],
                   line_of: LineOf | None = None) -> list[str]:
    """Warnings as `key.path: pattern 'p' looks like a regular expression...: did you mean 'glob'?`."""
    return [_where(path, key, regex_hint(pattern), line_of) for path, key, pattern in _patterns(policy, client_rules)
            if looks_like_regex(pattern)]


def looks_like_regex(pattern: str) -> bool:
    text = pattern.strip()
    return not text.lower().startswith("group:") and _REGEX.search(text) is not None


def regex_hint(pattern: str) -> str:
    return f"pattern {pattern!r} looks like a regular expression, but {_glob_meant(pattern)}"


def _glob_meant(pattern: str) -> str:
    meant = [glob for glob in dict.fromkeys(_as_globs(pattern.strip())) if glob]
    shown = " or ".join(repr(g) for g in meant) if len(meant) < 2 else f"the patterns {', '.join(map(repr, meant))}"
    return (f"a pattern is a glob: * is its only wildcard and ^ $ ? + | ( ) [ ] are plain characters, so it matches "
            f"no tool name; did you mean {shown or '*'}?")


def _as_globs(regex: str) -> list[str]:
    """The globs a regular expression most likely meant: alternatives split, anchors dropped, each wildcard run
    (`.*`, `.+`, `[a-z]+`, `\\w*`, `x?`) one `*`."""
    if "|" in regex and not re.search(r"\([^)]*\|", regex):
        return [g for part in regex.split("|") for g in _as_globs(part)]
    group = re.search(r"\(([^()]*\|[^()]*)\)", regex)
    if group is not None:
        return [g for option in group.group(1).split("|")
                for g in _as_globs(regex[:group.start()] + option + regex[group.end():])]
    text = regex.removeprefix("^").removesuffix("$")
    text = re.sub(r"(\.|\[[^\]]*\]|\\[wdsWDS])([*+?]|\{[^}]*\})?", "*", text)
    text = re.sub(r".\?", "*", text)
    text = re.sub(r"\\(.)", r"\1", text).replace("+", "").replace("(", "").replace(")", "")
    return [re.sub(r"\*+", "*", text)]


def matchless_patterns(policy: PolicyConfig, client_rules: Mapping[str, ToolRule | None],
                       tools: Sequence[ToolFacts], line_of: LineOf | None = None) -> list[str]:
    """Warnings as `key.path: pattern 'p' matches none of the N tools`, once every tool is known (each upstream
    has listed): a pattern that matches nothing is a typo, a regular expression, or about an upstream since gone."""
    warnings = []
    for path, key, pattern in _patterns(policy, client_rules):
        matchers = compile_patterns([pattern], policy.tool_groups)
        if not pattern.strip() or any(m.matches(tool) for m in matchers for tool in tools):
            continue
        hint = f" ({_glob_meant(pattern)})" if looks_like_regex(pattern) else _close_names(pattern, tools)
        warnings.append(_where(path, key, f"pattern {pattern!r} matches none of the {len(tools)} tools the "
                                          f"upstreams list{hint}", line_of))
    return warnings


def _close_names(pattern: str, tools: Sequence[ToolFacts]) -> str:
    names = [tool.name for tool in tools]
    close = difflib.get_close_matches(pattern.strip().lower().replace("*", ""), [n.lower() for n in names], n=2,
                                      cutoff=0.6)
    return f" (did you mean {' or '.join(map(repr, close))}?)" if close else " (`triad plan` lists their names)"


def _where(path: str, key: KeyPath, message: str, line_of: LineOf | None) -> str:
    line = line_of(key) if line_of is not None else None
    return f"{path}: {message}" + (f" (line {line})" if line is not None else "")


def _patterns(policy: PolicyConfig, client_rules: Mapping[str, ToolRule | None]
              ) -> Iterator[tuple[str, KeyPath, str]]:
    """Every pattern of the config: its key path as shown, as a key of the file (to find its line), and itself."""
    rules: list[tuple[KeyPath, ToolRule | None]] = [(("policy", "profile"), policy.profile)]
    rules += [(("policy", "profiles", k), r) for k, r in policy.profiles.items()]
    rules += [(("policy", "agents", k), r) for k, r in policy.agents.items()]
    rules += [(("policy", "providers", k), r) for k, r in policy.providers.items()]
    rules += [(("policy", "groups", k), r) for k, r in policy.groups.items()]
    rules += [(("clients", k, "tools"), r) for k, r in client_rules.items()]
    for where, rule in rules:
        if rule is None:
            continue
        for key in ("allow", "deny", "also_allow"):
            for index, pattern in enumerate(getattr(rule, key) or ()):
                yield ".".join(map(str, (*where, key))), (*where, key, index), pattern
    for key in ("gateway_deny", "owner_only"):
        for index, pattern in enumerate(getattr(policy, key)):
            yield f"policy.{key}", ("policy", key, index), pattern
    for name, patterns in policy.tool_groups.items():
        for index, pattern in enumerate(patterns):
            yield f"policy.tool_groups.{name}", ("policy", "tool_groups", name, index), pattern
