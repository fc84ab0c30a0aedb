"""YAML loading that remembers where every key was, so config errors can name a line.

`load_with_lines(text)` returns the plain data and a map from key path (a tuple of keys and list indexes) to the
1-based line of that node. Interpolation of `${VAR}` / `${VAR:-default}` happens here too, on string scalars only,
so that an unset variable is reported with the key path and line where it was used; the values taken from the
environment are returned by variable name, so that error messages can show the name instead of the value.

`$$` is a literal `$`. Any other `$` that starts something shaped like a reference (`$VAR`, `${VAR:default}`,
`${VAR`, `$(VAR)`, `${env:VAR}`...) is a problem, with the spelling Triad expands: left alone it would be sent
upstream literally, as the token or password the user meant to read from the environment.
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import yaml

from consumers import JSON, JSONObject

Path = tuple[str | int, ...]
LineMap = dict[Path, int]

MAX_DEPTH = 64
"""Levels of nesting a config may have (a real one has fewer than ten). Deeper, and a node that contains itself
through an alias (`a: &a [*a]`), are problems of the file, reported like any other, never a recursion that takes
the reader (or the reloading daemon) down."""

MAX_VALUES = 200_000
"""Values (keys' values, list items, scalars) a config may hold once its aliases are expanded: a thousand upstreams
of twenty settings are 20,000; an alias bomb (`a1: [*a0, *a0, ...]`, nine times nine...) is refused in linear time
instead of expanding to billions."""

_NAME = r"[A-Za-z_][A-Za-z0-9_]*"
_DOLLAR = re.compile(r"\$\$|\$\{(?P<name>" + _NAME + r")(?::-(?P<default>[^}]*))?\}|\$\{(?P<body>[^}]*)(?P<end>\}?)"
                     r"|\$(?P<bare>" + _NAME + r")|\$\((?P<paren>" + _NAME + r")\)")
"""What a `$` may start: the escape `$$`, a reference Triad expands, or a near miss of one (`${...}` that is not
a reference, `$VAR`, `$(VAR)`). A `$` before anything else (`^a$`, `US$ 5`) is a literal."""


class YamlProblem(Exception):
    def __init__(self, path: Path, message: str, line: int | None) -> None:
        super().__init__(message)
        self.path = path
        self.message = message
        self.line = line


@dataclass
class Loaded:
    """A parsed file: plain data (None for a file with no YAML document in it: empty, or only comments), the
    line of every key path, the problems found, and the environment values used, by variable name."""

    data: Any
    lines: LineMap = field(default_factory=dict)
    problems: list[YamlProblem] = field(default_factory=list)
    variables: dict[str, str] = field(default_factory=dict)


def load_with_lines(text: str, environ: Mapping[str, str] | None = None) -> Loaded:
    """Parse and interpolate `text`. Raises YamlProblem for a YAML syntax error."""
    env = os.environ if environ is None else environ
    try:
        node = yaml.compose(text, Loader=yaml.SafeLoader)
    except RecursionError:  # PyYAML composes nested nodes recursively: a file nested thousands of levels deep
        raise YamlProblem((), f"nested more than {MAX_DEPTH} levels deep", None) from None
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        line = mark.line + 1 if mark is not None else None
        problem = getattr(exc, "problem", None) or str(exc)
        raise YamlProblem((), f"not valid YAML: {problem}{_yaml_hint(exc, problem, line)}", line) from None
    if node is None:
        return Loaded(None)
    loaded = Loaded(None)
    loaded.data = _Converter(loaded, env).convert(node, ())
    return loaded


def _yaml_hint(exc: yaml.YAMLError, problem: str, line: int | None) -> str:
    """What to do about a syntax error, where PyYAML's own words do not say it."""
    if "\\t" in problem or "\t" in problem:
        return " (YAML indents with spaces: replace the tab with spaces)"
    context, mark = getattr(exc, "context", None), getattr(exc, "context_mark", None)
    if context and mark is not None and mark.line + 1 != line:
        opened = {"while parsing a flow mapping": "the { opened", "while parsing a flow sequence": "the [ opened",
                  "while scanning a quoted scalar": "the quote opened"}.get(context)
        if opened is not None:
            return f" ({opened} on line {mark.line + 1} is never closed)"
        return f" ({context} that starts on line {mark.line + 1})"
    return ""


class _Converter:
    """Walks a composed node tree once, building plain data and the line map."""

    def __init__(self, loaded: Loaded, env: Mapping[str, str]) -> None:
        self.lines, self.problems, self.variables, self.env = loaded.lines, loaded.problems, loaded.variables, env
        self._scalars = yaml.SafeLoader("")
        self._open: set[int] = set()
        self._values = 0
        """The collections being converted, outermost first: one met again is an alias to its own ancestor."""

    def convert(self, node: yaml.Node, path: Path) -> JSON:
        lines, problems = self.lines, self.problems
        lines[path] = line = node.start_mark.line + 1
        self._values += 1
        if self._values > MAX_VALUES:
            raise YamlProblem(path, f"more than {MAX_VALUES} values once aliases are expanded", line)
        if isinstance(node, yaml.CollectionNode):
            if id(node) in self._open:
                raise YamlProblem(path, "an alias (`*name`) refers to a node that contains it", line)
            if len(path) >= MAX_DEPTH:
                raise YamlProblem(path, f"nested more than {MAX_DEPTH} levels deep", line)
            self._open.add(id(node))
            try:
                if isinstance(node, yaml.MappingNode):
                    return self._mapping(node, path)
                return [self.convert(item, (*path, i)) for i, item in enumerate(node.value)]
            finally:
                self._open.discard(id(node))
        value = self._scalars.construct_object(node)
        if isinstance(value, str) and "$" in value:
            return _interpolate(value, path, lines[path], problems, self.env, self.variables)
        return value

    def _mapping(self, node: yaml.MappingNode, path: Path) -> JSONObject:
        lines, problems = self.lines, self.problems
        out: JSONObject = {}
        for key_node, value_node in node.value:
            key = self._scalars.construct_object(key_node) if isinstance(key_node, yaml.ScalarNode) else None
            if not isinstance(key, str | int | float | bool):
                problems.append(YamlProblem(path, "mapping keys must be plain scalars", key_node.start_mark.line + 1))
                continue
            key = str(key)
            if key in out:
                problems.append(YamlProblem((*path, key), f"duplicate key: also on line {lines[(*path, key)]}; keep "
                                            "one (the last would win)", key_node.start_mark.line + 1))
            out[key] = self.convert(value_node, (*path, key))
            lines[(*path, key)] = key_node.start_mark.line + 1
        return out


def _interpolate(value: str, path: Path, line: int, problems: list[YamlProblem], env: Mapping[str, str],
                 variables: dict[str, str]) -> str:
    def substitute(match: re.Match[str]) -> str:
        if match.group() == "$$":
            return "$"
        name, default = match.group("name"), match.group("default")
        if name is None:
            problems.append(YamlProblem(path, _near_miss(match), line))
            return match.group()
        found = env.get(name)
        if found is not None and (found != "" or default is None):
            variables[name] = found
            return found
        if default is not None:
            return default
        problems.append(YamlProblem(path, f"environment variable {name} is not set (and has no default): set it, or "
                                          f"write ${{{name}:-default}}", line))
        return ""

    return _DOLLAR.sub(substitute, value)


_KEEP = "; for a literal $, write $$"


def _near_miss(match: re.Match[str]) -> str:
    """Why a `$...` is not a reference, and the spelling that is. A default is never quoted (it may be a secret)."""
    if (bare := match.group("bare") or match.group("paren")) is not None:
        written = f"${bare}" if match.group("bare") else f"$({bare})"
        return f"{written} is not expanded (Triad reads only ${{{bare}}}): write ${{{bare}}}{_KEEP}"
    body, closed = match.group("body"), bool(match.group("end"))
    head = re.match(r"\s*(" + _NAME + r")?\s*(.?)", body)
    assert head is not None
    name, after = head.group(1), head.group(2)
    if name is not None and not closed:
        return f"${{{name}... is never closed: write ${{{name}}} (or ${{{name}:-default}}){_KEEP}"
    if name is not None and name.lower() == "env" and after == ":":
        inner = re.match(r"\s*env:\s*(" + _NAME + ")", body)
        meant = inner.group(1) if inner is not None else "NAME"
        return f"${{env:{meant}}} is an editor's spelling: write ${{{meant}}} (Triad reads the environment){_KEEP}"
    if name is not None and body.strip() == name:
        return f"${{{name}}} has spaces inside the braces: write ${{{name}}}"
    if name is not None and after == ":":
        return f"${{{name}:...}} is not expanded (a default is written with :-): write ${{{name}:-default}}{_KEEP}"
    if name is not None and after == "-":
        return f"${{{name}-...}} is not expanded (a default is written with :-): write ${{{name}:-default}}{_KEEP}"
    if name is not None:
        return (f"${{{name}{after}...}} is not expanded: Triad reads only ${{{name}}} and ${{{name}:-default}}"
                f"{_KEEP}")
    return f"${{...}} does not hold a variable name (letters, digits and _, not starting with a digit){_KEEP}"
