"""JSON Schema validation whose cost is linear in the arguments, for `validate_arguments`.

An upstream writes a tool's schema; a caller writes the arguments. `jsonschema` matches `pattern`,
`patternProperties` and the property names `additionalProperties` weeds out with Python's `re`, which backtracks:
`^(a|a)*$` against 40 characters of a caller's choosing runs for hours. Here those keywords match with RE2, whose
time is linear in the text; a pattern RE2 cannot take (a look-around, a back-reference) cannot be checked in linear
time, and the tool's calls are refused (fail closed: the check was asked for) with a message that says so.
`uniqueItems`, quadratic in jsonschema for arrays of objects, compares canonical forms in a set instead.
"""

from __future__ import annotations

import functools
from collections.abc import Iterator, Mapping
from typing import Any

import re2
from jsonschema import Draft202012Validator, validators
from jsonschema.exceptions import ValidationError

from consumers import JSON

__all__ = ["LinearValidator", "nonlinear_patterns"]

MAX_CACHED_PATTERNS = 1024
"""Compiled schema patterns kept (the schemas are the upstreams', so their patterns are few)."""


@functools.lru_cache(maxsize=MAX_CACHED_PATTERNS)
def _compiled(pattern: str) -> Any:
    """RE2's compiled pattern, or None where RE2 refuses it."""
    try:
        return re2.compile(pattern)
    except re2.error:
        return None


def _search(pattern: str, text: str) -> bool:
    compiled = _compiled(pattern)
    if compiled is None:  # nonlinear_patterns refused the schema before: never reached on a caller's call
        raise ValueError(f"pattern {pattern!r} cannot be checked in linear time")
    return compiled.search(text) is not None


def nonlinear_patterns(schema: JSON) -> list[str]:
    """The `pattern`s and `patternProperties` keys anywhere in `schema` that RE2 cannot take; with
    `unevaluatedProperties` anywhere, every `patternProperties` key (jsonschema's own walk matches those with `re`)."""
    found: list[str] = []
    keys: list[str] = []
    unevaluated = False
    stack = [schema]
    while stack:
        node = stack.pop()
        if isinstance(node, Mapping):
            pattern = node.get("pattern")
            if isinstance(pattern, str) and _compiled(pattern) is None:
                found.append(pattern)
            keyed = node.get("patternProperties")
            if isinstance(keyed, Mapping):
                keys += [key for key in keyed if isinstance(key, str)]
            unevaluated = unevaluated or "unevaluatedProperties" in node
            stack.extend(node.values())
        elif isinstance(node, list):
            stack.extend(node)
    return found + [key for key in keys if unevaluated or _compiled(key) is None]


def _pattern(validator: Any, pattern: str, instance: Any, schema: Any) -> Iterator[ValidationError]:
    if validator.is_type(instance, "string") and not _search(pattern, instance):
        yield ValidationError(f"the string of {len(instance)} characters does not match {pattern!r}")


def _pattern_properties(validator: Any, patterns: Mapping[str, Any], instance: Any, schema: Any
                        ) -> Iterator[ValidationError]:
    if not validator.is_type(instance, "object"):
        return
    for pattern, subschema in patterns.items():
        for key, value in instance.items():
            if _search(pattern, key):
                yield from validator.descend(value, subschema, path=key, schema_path=pattern)


def _additional_properties(validator: Any, allowed: Any, instance: Any, schema: Any) -> Iterator[ValidationError]:
    if not validator.is_type(instance, "object"):
        return
    properties, patterns = schema.get("properties", {}), schema.get("patternProperties", {})
    extras = [key for key in instance
              if key not in properties and not any(_search(pattern, key) for pattern in patterns)]
    if validator.is_type(allowed, "object"):
        for extra in extras:
            yield from validator.descend(instance[extra], allowed, path=extra)
    elif not allowed and extras:
        shown = ", ".join(repr(extra) for extra in sorted(extras)[:10]) + (", ..." if len(extras) > 10 else "")
        yield ValidationError(f"additional properties are not allowed ({shown} unexpected)")


def _canonical(value: Any) -> Any:
    """A hashable form under which two JSON values are equal exactly when JSON Schema says so (1 == 1.0, but
    true != 1; objects equal whatever their key order)."""
    if isinstance(value, bool) or value is None or isinstance(value, str):
        return (type(value).__name__, value)
    if isinstance(value, int | float):
        return ("number", int(value) if isinstance(value, float) and value.is_integer() else value)
    if isinstance(value, list):
        return ("array", tuple(_canonical(item) for item in value))
    if isinstance(value, Mapping):
        return ("object", frozenset((key, _canonical(item)) for key, item in value.items()))
    return ("other", repr(value))


def _unique_items(validator: Any, unique: Any, instance: Any, schema: Any) -> Iterator[ValidationError]:
    if unique and validator.is_type(instance, "array"):
        seen = {_canonical(item) for item in instance}
        if len(seen) != len(instance):
            yield ValidationError(f"the array of {len(instance)} items has non-unique elements")


LinearValidator = validators.extend(Draft202012Validator, {  # type: ignore[no-untyped-call]  # untyped in the stubs
    "pattern": _pattern, "patternProperties": _pattern_properties,
    "additionalProperties": _additional_properties, "uniqueItems": _unique_items})
"""Draft 2020-12, with the keywords above in linear time; check a schema with `nonlinear_patterns` first."""
