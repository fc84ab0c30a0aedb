"""A whole run-level list decided over many tools at once (`policy.ToolIndex`, issue 28 point 1): the same answers
as the one-tool-at-a-time matcher (`MatcherSet.first`), for generated lists and names of every shape (exact names,
prefixes, suffixes, inner globs such as `a*a*a*...`, groups, case, blanks, non-ASCII, NUL, lone surrogates), and
with no per (tool, pattern) work in Python: the cost of a list a client picks per request is its patterns' lookups
plus one RE2 match per tool, whatever the number of globs."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from policy import ToolFacts, ToolIndex, compile_patterns
from policy.patterns import MatcherSet

ALPHABET = st.sampled_from(["a", "b", "A", "_", ":", " ", "é", "É", "\x00", "\ud800", "\U0010ffff", "ß"])
TEXT = st.lists(ALPHABET, max_size=10).map("".join)
PATTERN = st.one_of(
    st.lists(st.one_of(ALPHABET, st.just("*")), min_size=1, max_size=12).map("".join),
    st.integers(min_value=1, max_value=20).map(lambda n: "*".join("a" * (n + 1))),  # a*a*a*...
    st.sampled_from(["*", "**", "group:up", "group:UP", "group:other", "group:readonly", "group:destructive", "",
                     "up:*", "*:a", "\U0010ffff*", "*\U0010ffff"]))
TOOL = st.builds(ToolFacts, TEXT, st.sampled_from(["", "up", "Up", "other"]), TEXT, st.booleans(), st.booleans())


@settings(max_examples=400, deadline=None)
@given(st.lists(PATTERN, max_size=8), st.lists(TOOL, max_size=12))
def test_an_index_finds_the_tools_the_matcher_set_finds_none_for(patterns: list[str], tools: list[ToolFacts]
                                                                ) -> None:
    matchers = compile_patterns(patterns, {})
    named = {f"t{i}": tool for i, tool in enumerate(tools)}
    expected = [name for name, tool in named.items() if MatcherSet(matchers).first(tool) is None]
    assert ToolIndex(named).unmatched(matchers) == expected


@pytest.mark.parametrize("patterns", [
    ["*a*a*a*a*a*a*a*a*a*a*a*a*a*a*a*a*a*a*a*a*a*a*a*a*a*a*a*a*a*a*a*a*"],
    [f"*{'a' * 254}*" for _ in range(32)],
    [f"*{'ab' * 60}*{'ba' * 60}*" for _ in range(21)],
])
def test_pathological_globs_agree_on_names_built_to_nearly_match(patterns: list[str]) -> None:
    names = ["a" * n for n in range(0, 300, 7)] + ["ab" * n + "b" for n in range(0, 150, 5)] + ["ba" * 130]
    named = {name or "empty": ToolFacts(name, "up", name[::-1]) for name in names}
    matchers = compile_patterns(patterns, {})
    expected = [name for name, tool in named.items() if MatcherSet(matchers).first(tool) is None]
    assert ToolIndex(named).unmatched(matchers) == expected

