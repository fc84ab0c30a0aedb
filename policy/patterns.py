"""Patterns as OpenClaw matches them (reference section 8.2), plus Triad's groups.

A glob has `*` as its only wildcard: `*` alone matches everything; a pattern without `*` matches exactly;
otherwise the pattern is regex-escaped, each `*` becomes `.*`, anchored at both ends (`?` and `[]` are
literals). Both sides are trimmed and lowercased, so matching ignores case. Empty patterns are dropped.

Run-level lists come from clients, so a glob must cost time linear in the name whatever its stars: each segment
between two stars is matched at its first occurrence and never retried (an atomic group). For globs, the first
match is also the right one, so nothing is lost; a plain `.*` per star would backtrack (n choose stars) ways.
A `MatcherSet` compiles a whole list once: exact names in a dict, every other glob in one regex.

Groups: `group:<upstream>` (every tool of that upstream), `group:readonly` (annotated `readOnlyHint: true`),
`group:destructive` (not read-only and `destructiveHint` not false — the spec's default is destructive), and the
user's `policy.tool_groups`, which expand to their own patterns. A tool is matched by its exposed name and by its
`upstream:raw` form.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

from policy._json import JSON

BUILTIN_GROUPS = frozenset({"readonly", "destructive"})


@dataclass(frozen=True, slots=True)
class ToolFacts:
    """What a pattern can see of a tool."""

    name: str
    upstream: str = ""
    raw: str = ""
    read_only: bool = False
    destructive: bool = True

    @classmethod
    def from_annotations(cls, name: str, upstream: str, raw: str, annotations: Mapping[str, JSON] | None) -> ToolFacts:
        notes = annotations or {}
        read_only = notes.get("readOnlyHint") is True
        return cls(name, upstream, raw, read_only, not read_only and notes.get("destructiveHint") is not False)

    def forms(self) -> tuple[str, ...]:
        return (self.name.lower(), f"{self.upstream}:{self.raw}".lower()) if self.upstream else (self.name.lower(),)


@dataclass(frozen=True, slots=True)
class Glob:
    pattern: str
    _exact: str | None
    _regex: re.Pattern[str] | None

    def matches_text(self, text: str) -> bool:
        text = text.strip().lower()
        if self._regex is not None:
            return self._regex.fullmatch(text) is not None
        return text == self._exact

    def matches(self, tool: ToolFacts) -> bool:
        return any(self.matches_text(form) for form in tool.forms())


@dataclass(frozen=True, slots=True)
class Group:
    pattern: str
    kind: str  # "upstream", "readonly", "destructive"
    value: str = ""

    def matches(self, tool: ToolFacts) -> bool:
        if self.kind == "readonly":
            return tool.read_only
        if self.kind == "destructive":
            return tool.destructive
        return tool.upstream.lower() == self.value


Matcher = Glob | Group


def compile_glob(pattern: str) -> Glob | None:
    """None for an empty pattern (which is dropped, as in the reference)."""
    normalized = pattern.strip().lower()
    if not normalized:
        return None
    if "*" not in normalized:
        return Glob(pattern, normalized, None)
    return Glob(pattern, None, re.compile(_glob_regex(normalized), re.DOTALL))


def _glob_regex(normalized: str) -> str:
    """`a*b*c` -> `a(?>.*?b).*c`: the middle segments at their first occurrence (atomic: no retry), the last one
    at the end. Linear in the name for any number of stars."""
    first, *middle, last = normalized.split("*")
    return (re.escape(first) + "".join(f"(?>.*?{re.escape(part)})" for part in middle if part)
            + ".*" + re.escape(last))


def compile_globs(patterns: Iterable[str]) -> tuple[Glob, ...]:
    return tuple(g for g in (compile_glob(p) for p in patterns) if g is not None)


def first_match(globs: Iterable[Glob], *names: str) -> Glob | None:
    for glob in globs:
        if any(glob.matches_text(name) for name in names):
            return glob
    return None


def compile_patterns(patterns: Iterable[str], tool_groups: Mapping[str, Iterable[str]],
                     _expanding: frozenset[str] = frozenset()) -> tuple[Matcher, ...]:
    """Compile globs and groups; a user group expands to its own patterns (a group that includes itself stops)."""
    out: list[Matcher] = []
    groups = {k.lower(): v for k, v in tool_groups.items()}
    for pattern in patterns:
        normalized = pattern.strip().lower()
        if normalized.startswith("group:"):
            name = normalized.removeprefix("group:")
            if name in groups:
                if name not in _expanding:
                    out += compile_patterns(groups[name], tool_groups, _expanding | {name})
            elif name in BUILTIN_GROUPS:
                out.append(Group(pattern, name))
            else:
                out.append(Group(pattern, "upstream", name))
            continue
        glob = compile_glob(pattern)
        if glob is not None:
            out.append(glob)
    return tuple(out)


def first_matcher(matchers: Iterable[Matcher], tool: ToolFacts) -> Matcher | None:
    for matcher in matchers:
        if matcher.matches(tool):
            return matcher
    return None


class MatcherSet:
    """A list of matchers compiled for lookup: `first(tool)` is `first_matcher(matchers, tool)`, found with one
    dict lookup and one regex match per form of the tool's name (plus the groups, few and cheap)."""

    __slots__ = ("_exact", "_groups", "_union", "matchers")

    def __init__(self, matchers: Sequence[Matcher]) -> None:
        self.matchers = tuple(matchers)
        self._exact: dict[str, int] = {}
        self._groups: list[tuple[int, Group]] = []
        alternatives: list[str] = []
        for index, matcher in enumerate(self.matchers):
            if isinstance(matcher, Group):
                self._groups.append((index, matcher))
            elif matcher._regex is not None:
                alternatives.append(f"(?P<m{index}>{matcher._regex.pattern})")
            elif matcher._exact is not None:
                self._exact.setdefault(matcher._exact, index)
        self._union = re.compile("|".join(alternatives), re.DOTALL) if alternatives else None

    def __bool__(self) -> bool:
        return bool(self.matchers)

    def __len__(self) -> int:
        return len(self.matchers)

    def first(self, tool: ToolFacts) -> Matcher | None:
        best = len(self.matchers)
        for form in tool.forms():
            form = form.strip()
            best = min(best, self._exact.get(form, best))
            found = self._union.fullmatch(form) if self._union is not None else None
            if found is not None and found.lastgroup is not None:
                best = min(best, int(found.lastgroup[1:]))
        for index, group in self._groups:
            if index >= best:
                break
            if group.matches(tool):
                best = index
                break
        return self.matchers[best] if best < len(self.matchers) else None
