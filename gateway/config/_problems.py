"""Config error messages: every problem as `key.path: message (line N)`, never with the value (it may be secret)."""

from __future__ import annotations

import difflib
import re
import types as pytypes
import typing
from collections.abc import Mapping
from typing import Annotated, Any

from pydantic import BaseModel
from pydantic_core import ErrorDetails

from consumers import SecretMask
from gateway.config._yaml import LineMap

_PYDANTIC_INPUT = re.compile(r"\s*\[type=[\w.-]+, input_value=.*?, input_type=\w+\]", re.DOTALL)
"""The trailer `str(ValidationError)` appends to each error; it quotes the input (a plugin's options error)."""


def hide_values(message: str, mask: SecretMask) -> str:
    """Every secret value a message quotes hidden (a `${VAR}` value becomes `${VAR}`): errors show the variable,
    never its value (a token read from `${VAR}` must not reach `triad check`'s output, the log or `/readyz`)."""
    return mask(_PYDANTIC_INPUT.sub("", message))


def variables_mask(variables: Mapping[str, str]) -> SecretMask:
    """The mask of a file's `${VAR}` values, each shown as its `${NAME}`."""
    return SecretMask({value: f"${{{name}}}" for name, value in variables.items()})


def format_problem(path: tuple[str | int, ...], message: str, line: int | None) -> str:
    where = ".".join(str(p) for p in path) or "(top level)"
    return f"{where}: {message}" + (f" (line {line})" if line is not None else "")


_SHAPES = {
    "tuple_type": "must be a list (`- item` lines, or `[a, b]`)",
    "list_type": "must be a list (`- item` lines, or `[a, b]`)",
    "dict_type": "must be a mapping (`key: value` lines, or `{key: value}`)",
    "model_type": "must be a mapping (`key: value` lines, or `{key: value}`)",
    "model_attributes_type": "must be a mapping (`key: value` lines, or `{key: value}`)",
    "int_parsing": "must be a whole number",
    "int_type": "must be a whole number",
    "int_from_float": "must be a whole number",
    "float_parsing": "must be a number",
    "float_type": "must be a number",
    "bool_parsing": "must be true or false",
    "bool_type": "must be true or false",
    "string_type": "must be text (quote it: \"...\")",
}
"""pydantic's wording of a value of the wrong shape ("Input should be a valid tuple") in YAML's terms."""


def describe_error(error: ErrorDetails, lines: LineMap, root: type[BaseModel], prefix: tuple[str | int, ...] = (),
                   what: str = "key") -> str:
    """One pydantic error as `key.path: message (line N)`, with "did you mean" for an unknown key. `prefix` is
    where `root` sits in the file (a hook's options are validated by the hook's own model)."""
    loc = tuple(p for p in error["loc"] if not (isinstance(p, str) and _is_internal_loc(p)))
    message = error["msg"].removeprefix("Value error, ").replace("Input should be", "must be", 1)
    if error["type"] == "extra_forbidden":
        unknown = str(loc[-1])
        message = f"unknown {what} {unknown!r}"
        known = _known_keys(root, loc[:-1])
        if close := difflib.get_close_matches(unknown, known, n=1, cutoff=0.6):
            message += f" (did you mean {close[0]!r}?)"
        elif known:
            message += f" ({what}s here: {', '.join(known)})"
    elif error["type"] == "missing":
        message = f"required {what} is missing (add `{loc[-1]}:`)" if loc else f"required {what} is missing"
    elif error["type"] in _SHAPES:
        message = _SHAPES[error["type"]]
    elif error["type"] == "string_pattern_mismatch":
        pattern = str((error.get("ctx") or {}).get("pattern", ""))
        message = "must be an http:// or https:// URL" if pattern.startswith("^https?://") else message
    head, colon, rest = message.partition(": ")
    if colon and error["type"] == "value_error" and head in _known_keys(root, loc):
        loc, message = (*loc, head), rest  # a model's check about one of its keys ("use: no profile named ...")
    loc = (*prefix, *loc)
    line = None
    for end in range(len(loc), -1, -1):
        if (line := lines.get(loc[:end])) is not None:
            break
    return format_problem(loc, message, line)


def _is_internal_loc(part: str) -> bool:
    # pydantic adds the name of a function validator or union member to error locations; those are not keys.
    return part.startswith(("function-", "union[", "str-", "constrained-")) or "[" in part


def _known_keys(root: type[BaseModel], loc: tuple[str | int, ...]) -> list[str]:
    """The field names of the model at `loc`, walking the config models' type hints."""
    current: Any = root
    for part in loc:
        current = _unwrap(current)
        if isinstance(current, type) and issubclass(current, BaseModel):
            field = current.model_fields.get(str(part))
            if field is None:
                return []
            current = field.annotation
        elif typing.get_origin(current) is dict:
            current = typing.get_args(current)[1]
        elif typing.get_origin(current) in (tuple, list):
            current = typing.get_args(current)[0]
        else:
            return []
    current = _unwrap(current)
    if isinstance(current, type) and issubclass(current, BaseModel):
        return [name for name in current.model_fields if name != "source"]
    return []


def _unwrap(annotation: object) -> object:
    if typing.get_origin(annotation) is Annotated:
        annotation = typing.get_args(annotation)[0]
    if isinstance(annotation, pytypes.UnionType) or typing.get_origin(annotation) is typing.Union:
        members = [a for a in typing.get_args(annotation) if a is not type(None)]
        annotation = members[0] if len(members) == 1 else annotation
    return annotation
