"""Glob patterns as OpenClaw matches them (reference section 8.2): `*` is the only wildcard.

`*` alone matches everything; a pattern without `*` matches exactly; otherwise the pattern is regex-escaped and
each `*` becomes `.*`, anchored at both ends (`?` and `[]` are literals). Both sides are trimmed and lowercased.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class Glob:
    pattern: str
    _exact: str | None
    _regex: re.Pattern[str] | None

    def matches(self, name: str) -> bool:
        name = name.strip().lower()
        if self._regex is not None:
            return self._regex.fullmatch(name) is not None
        return name == self._exact


def compile_glob(pattern: str) -> Glob | None:
    """None for an empty pattern (which is dropped, as in the reference)."""
    normalized = pattern.strip().lower()
    if not normalized:
        return None
    if "*" not in normalized:
        return Glob(pattern, normalized, None)
    regex = ".*".join(re.escape(part) for part in normalized.split("*"))
    return Glob(pattern, None, re.compile(regex, re.DOTALL))


def compile_globs(patterns: Iterable[str]) -> tuple[Glob, ...]:
    return tuple(g for g in (compile_glob(p) for p in patterns) if g is not None)


def first_match(globs: Iterable[Glob], *names: str) -> Glob | None:
    for glob in globs:
        if any(glob.matches(name) for name in names):
            return glob
    return None
