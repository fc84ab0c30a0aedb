"""Many tools laid out for deciding a whole pattern list at once: which of them does no pattern match?

A view narrowed by a run-level list (`gateway.registry.narrow_by_run_list`) asks this for every tool its caller may
call, with a list the client picks per request, so the work is turned around: each pattern is looked up among the
tools, not each tool among the patterns, and nothing runs per (tool, pattern) pair in Python.

- exact names: one dict lookup per pattern;
- prefixes `x*` (and `*`) and suffixes `*x`: two bisections per pattern in the sorted forms (the reversed forms for
  suffixes), the ranges merged before their tools are marked;
- groups: precomputed sets of tools (read-only, destructive, by upstream), each group marked once;
- the other globs: translated to one RE2 pattern (linear time, no backtracking), matched once per tool still
  unmatched, as one line `form\\0form`: one C call per tool gives the answer for every glob at once.

Semantics are `MatcherSet.first(tool) is None` exactly (`tests/test_tool_index.py`): forms lowercased and trimmed,
`*` the only wildcard. A tool whose name holds a NUL (the line separator) is matched by the globs' own scan, and a
glob that holds one can match no other.
Built once per view (`ClientView.index`); immutable after.
"""

from __future__ import annotations

import bisect
from collections.abc import Iterable, Mapping, Sequence

import re2

from policy.patterns import Glob, Group, Matcher, ToolFacts, shape

MAX_RE2_MEMORY = 64 << 20
"""RE2's memory for one list's globs (its DFA cache), released when the match ends. RE2's default (8 MiB) holds few
states of a program as large as the bounds allow (64 stars, 256 characters a pattern); a Set has no slower
fallback when its cache cannot hold a state, so it is given room."""
_SEPARATOR = "\x00"


class ToolIndex:
    __slots__ = ("_by_upstream", "_destructive", "_exact", "_forms", "_lines", "_odd", "_prefixes", "_read_only",
                 "_suffixes", "names")

    def __init__(self, tools: Mapping[str, ToolFacts]) -> None:
        self.names = tuple(tools)
        facts = tuple(tools.values())
        self._forms = tuple(tuple(form.strip() for form in tool.forms()) for tool in facts)
        self._exact: dict[str, list[int]] = {}
        for index, forms in enumerate(self._forms):
            for form in forms:
                self._exact.setdefault(form, []).append(index)
        self._prefixes = _sorted((form, index) for index, forms in enumerate(self._forms) for form in forms)
        self._suffixes = _sorted((form[::-1], index) for index, forms in enumerate(self._forms) for form in forms)
        self._read_only = frozenset(index for index, tool in enumerate(facts) if tool.read_only)
        self._destructive = frozenset(index for index, tool in enumerate(facts) if tool.destructive)
        self._by_upstream: dict[str, set[int]] = {}
        for index, tool in enumerate(facts):
            self._by_upstream.setdefault(tool.upstream.lower(), set()).add(index)
        self._odd = frozenset(index for index, forms in enumerate(self._forms) if any(_SEPARATOR in f for f in forms))
        self._lines = tuple(_SEPARATOR.join(forms).encode("utf-8", "surrogatepass") for forms in self._forms)

    def __len__(self) -> int:
        return len(self.names)

    def unmatched(self, matchers: Sequence[Matcher]) -> list[str]:
        """The names of the tools no matcher in `matchers` matches, in the index's order."""
        matched: set[int] = set()
        ranges: tuple[list[tuple[int, int]], list[tuple[int, int]]] = ([], [])
        globs: list[Glob] = []
        groups: set[tuple[str, str]] = set()
        for matcher in matchers:
            if isinstance(matcher, Group):
                groups.add((matcher.kind, matcher.value))
                continue
            kind = shape(matcher)
            if kind == "exact":
                matched.update(self._exact.get(matcher.exact or "", ()))
            elif kind == "prefix":
                ranges[0].append(_range(self._prefixes[0], matcher.parts[0]))
            elif kind == "suffix":
                ranges[1].append(_range(self._suffixes[0], matcher.parts[1][::-1]))
            else:
                globs.append(matcher)
        for (_, owners), found in zip((self._prefixes, self._suffixes), ranges, strict=True):
            for low, high in _merged(found):
                matched.update(owners[low:high])
        for kind, value in groups:
            matched.update(self._read_only if kind == "readonly" else self._destructive if kind == "destructive"
                           else self._by_upstream.get(value, ()))
        if globs:
            matched.update(self._glob_matches(globs, matched))
        return [name for index, name in enumerate(self.names) if index not in matched]

    def _glob_matches(self, globs: Sequence[Glob], matched: set[int]) -> Iterable[int]:
        """The tools not in `matched` that one of `globs` matches."""
        left = [index for index in range(len(self.names)) if index not in matched]
        found = [index for index in left if index in self._odd and _scan(globs, self._forms[index])]
        globs = [glob for glob in globs if not any(_SEPARATOR in part for part in glob.parts)]  # only odd names
        rest = [index for index in left if index not in self._odd]
        if not globs or not rest:
            return found
        options = re2.Options()
        options.encoding = re2.Options.Encoding.LATIN1  # bytes of UTF-8: a literal matches as its bytes do
        options.max_mem = MAX_RE2_MEMORY
        union = "|".join(_translate(glob) for glob in globs)
        lines = re2.Set.FullMatchSet(options)
        # one form of the line, then the other form or nothing; or the first form, then the other
        lines.Add(f"(?:{union})(?:\\x00[^\\x00]*)?|[^\\x00]*\\x00(?:{union})".encode("latin-1"))
        lines.Compile()
        found += (index for index, hit in zip(rest, map(lines.Match, (self._lines[i] for i in rest)), strict=True)
                  if hit)
        return found


def _sorted(pairs: Iterable[tuple[str, int]]) -> tuple[list[str], list[int]]:
    ordered = sorted(pairs)
    return [text for text, _ in ordered], [index for _, index in ordered]


def _range(ordered: list[str], prefix: str) -> tuple[int, int]:
    """The positions of the texts in `ordered` that start with `prefix`."""
    low = bisect.bisect_left(ordered, prefix)
    # the first text after every one with the prefix: the prefix with its last character + 1, past a tail of the
    # greatest character (a prefix of nothing else, or none: every text from `low` on has it)
    stem = prefix.rstrip(chr(0x10FFFF))
    if not stem:
        return low, len(ordered)
    return low, bisect.bisect_left(ordered, stem[:-1] + chr(ord(stem[-1]) + 1), low)


def _merged(ranges: list[tuple[int, int]]) -> list[tuple[int, int]]:
    """Overlapping ranges joined: every position is marked once, however many patterns cover it."""
    out: list[tuple[int, int]] = []
    for low, high in sorted(ranges):
        if out and low <= out[-1][1]:
            out[-1] = (out[-1][0], max(out[-1][1], high))
        elif low < high:
            out.append((low, high))
    return out


def _translate(glob: Glob) -> str:
    """`glob` as an RE2 pattern over the Latin-1 reading of UTF-8 bytes: each star any run of bytes but NUL."""
    return "[^\\x00]*".join("".join(chr(byte) if chr(byte).isalnum() and byte < 0x80 else f"\\x{byte:02x}"
                                    for byte in part.encode("utf-8", "surrogatepass"))
                            for part in glob.parts)


def _scan(globs: Sequence[Glob], forms: tuple[str, ...]) -> bool:
    return any(glob.matches_form(form) for glob in globs for form in forms)
