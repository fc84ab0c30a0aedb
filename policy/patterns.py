"""Patterns as OpenClaw matches them (reference section 8.2), plus Triad's groups.

A glob has `*` as its only wildcard: `*` alone matches everything; a pattern without `*` matches exactly;
otherwise the pattern is regex-escaped, each `*` becomes `.*`, anchored at both ends (`?` and `[]` are
literals). Both sides are trimmed and lowercased, so matching ignores case. Empty patterns are dropped.

Run-level lists come from clients, so neither compiling nor matching may cost more than linear time, whatever the
stars: a glob is split at its stars once (no regex is built), and matched with `startswith`, `endswith` and one
`str.find` per middle segment, each at its first occurrence after the previous one and never retried. For globs the
first occurrence is also the right one, so nothing is lost; a regex `.*` per star would backtrack (n choose stars)
ways, and compiling a regex of every pattern costs seconds for a list a client may send with each request.
A `MatcherSet` indexes a whole list: exact names in a dict, prefixes (`x*`) and suffixes (`*x`) in a dict per
length, and only the other globs, whose count `search_cost` lets a caller bound, are tried one by one.

Groups: `group:<upstream>` (every tool of that upstream), `group:readonly` (annotated `readOnlyHint: true`),
`group:destructive` (not read-only and `destructiveHint` not false — the spec's default is destructive), and the
user's `policy.tool_groups`, which expand to their own patterns. A tool is matched by its exposed name and by its
`upstream:raw` form.
"""

from __future__ import annotations

import functools
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
    """The normalised pattern when it has no star."""
    _parts: tuple[str, ...] = ()
    """Else its segments: the first, the non-empty middle ones, the last (`a**b*` -> ("a", "b", ""))."""
    _size: int = 0
    """Characters a name needs at least: those of the segments."""

    @property
    def exact(self) -> str | None:
        """The normalised pattern when it has no star."""
        return self._exact

    @property
    def parts(self) -> tuple[str, ...]:
        """The segments between its stars (empty for an exact pattern)."""
        return self._parts

    def matches_text(self, text: str) -> bool:
        return self._matches(text.strip().lower())

    def matches(self, tool: ToolFacts) -> bool:
        return any(self._matches(form) for form in tool.forms())

    def matches_form(self, form: str) -> bool:
        """`form` is a name already lowercased and trimmed (`ToolFacts.forms`, stripped)."""
        return self._matches(form)

    def _matches(self, text: str) -> bool:
        """`text` is normalised. Linear in it: each segment is looked for once, after the one before."""
        if self._exact is not None:
            return text == self._exact
        first, last = self._parts[0], self._parts[-1]
        if len(text) < self._size or not text.startswith(first) or not text.endswith(last):
            return False
        position, end = len(first), len(text) - len(last)
        for part in self._parts[1:-1]:
            position = text.find(part, position, end)
            if position < 0:
                return False
            position += len(part)
        return True


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


@functools.lru_cache(maxsize=4096)
def compile_glob(pattern: str) -> Glob | None:
    """None for an empty pattern (which is dropped, as in the reference). Globs are immutable, so one compiled for a
    run-level list's budget (`search_cost`) is the one its matchers use; the cache is bounded (clients pick
    patterns freely)."""
    normalized = pattern.strip().lower()
    if not normalized:
        return None
    if "*" not in normalized:
        return Glob(pattern, normalized)
    first, *middle, last = normalized.split("*")
    parts = (first, *(part for part in middle if part), last)
    return Glob(pattern, None, parts, sum(map(len, parts)))


def search_cost(pattern: str) -> int:
    """How many segment searches matching `pattern` costs per name, beyond dict lookups: 0 for an exact name, a
    prefix `x*`, a suffix `*x`, `*` or a group; else its stars (a bound on these bounds a run-level list's work)."""
    glob = None if pattern.strip().lower().startswith("group:") else compile_glob(pattern)
    return 0 if glob is None or shape(glob) != "other" else len(glob._parts) - 1


def shape(glob: Glob) -> str:
    """`exact`, `prefix` (`x*`, and `*`), `suffix` (`*x`) or `other`: the first three are lookups, not searches."""
    if glob._exact is not None:
        return "exact"
    if len(glob._parts) == 2 and not glob._parts[1]:
        return "prefix"
    if len(glob._parts) == 2 and not glob._parts[0]:
        return "suffix"
    return "other"


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
    """A list of matchers compiled for lookup: `first(tool)` is `first_matcher(matchers, tool)`, found per form of
    the tool's name with one dict lookup for exact names, one per distinct length of the prefixes and suffixes,
    and a scan of the other globs (and the groups, few and cheap) that stops at the best index found so far."""

    __slots__ = ("_exact", "_globs", "_groups", "_prefixes", "_suffixes", "matchers")

    def __init__(self, matchers: Sequence[Matcher]) -> None:
        self.matchers = tuple(matchers)
        self._exact: dict[str, int] = {}
        prefixes: dict[int, dict[str, int]] = {}
        suffixes: dict[int, dict[str, int]] = {}
        self._globs: list[tuple[int, Glob]] = []
        self._groups: list[tuple[int, Group]] = []
        for index, matcher in enumerate(self.matchers):
            if isinstance(matcher, Group):
                self._groups.append((index, matcher))
                continue
            kind = shape(matcher)
            if kind == "exact" and matcher._exact is not None:
                self._exact.setdefault(matcher._exact, index)
            elif kind == "prefix":
                prefixes.setdefault(len(matcher._parts[0]), {}).setdefault(matcher._parts[0], index)
            elif kind == "suffix":
                suffixes.setdefault(len(matcher._parts[1]), {}).setdefault(matcher._parts[1], index)
            else:
                self._globs.append((index, matcher))
        self._prefixes = sorted(prefixes.items())
        self._suffixes = sorted(suffixes.items())

    def __bool__(self) -> bool:
        return bool(self.matchers)

    def __len__(self) -> int:
        return len(self.matchers)

    def first(self, tool: ToolFacts) -> Matcher | None:
        best = len(self.matchers)
        for form in tool.forms():
            form = form.strip()
            best = min(best, self._exact.get(form, best))
            for length, table in self._prefixes:
                if length > len(form):
                    break
                best = min(best, table.get(form[:length], best))
            for length, table in self._suffixes:
                if length > len(form):
                    break
                best = min(best, table.get(form[len(form) - length:], best))
            for index, glob in self._globs:
                if index >= best:
                    break
                if glob._matches(form):
                    best = index
                    break
        for index, group in self._groups:
            if index >= best:
                break
            if group.matches(tool):
                best = index
                break
        return self.matchers[best] if best < len(self.matchers) else None
