"""Raw JSON: the two names for it in a signature (the only place `Any` stands for a wire value), and the one codec
for JSON text an upstream sends or a client is sent.

Defined here because `consumers` is the lowest package that every other one (but `policy`) may import; the
`consumers` face exports them. `policy`, which imports nothing of the others, keeps its own `policy/_json.py`.

Any valid JSON value crosses Triad, never ending a session or the process (issue #30). Where Python or pydantic
cannot hold a value exactly, the substitute is fixed here, and the README lists it:
- a string with a lone surrogate (`"\\ud800"`: valid JSON, what Node emits for text cut mid-emoji) is kept as it
  was received, sent on as the same `\\ud800` escape (pydantic's parser refuses it, its serialiser fails on it);
- a number beyond a double's range (`1e400`), and an integer of more than `MAX_INT_DIGITS` digits, become `null`,
  as `JSON.stringify` sends a non-finite number (JSON has no Infinity: RFC 8259 §6); an upstream's `NaN` or
  `Infinity` literal (not JSON) too. Every other number keeps its type and value (`-0.0`, `1.0`, 2**80).
"""

from __future__ import annotations

import json
import math
import re
from typing import Any, TypeAlias

import mcp_types as types
import pydantic_core
import re2
from pydantic import ValidationError

JSON: TypeAlias = Any
"""A value decoded from JSON (object, array, string, number, bool or null), narrowed where it is read."""

JSONObject: TypeAlias = dict[str, JSON]
"""A JSON-RPC object as it crossed the wire (params, a result, a notification), passed through, never re-validated."""

MAX_INT_DIGITS = 4300
"""Python's own bound on converting digits to an int (`sys.get_int_max_str_digits`, a guard against quadratic
conversions); a longer integer is a number out of range."""

_HUGE_NUMBER = re2.compile(rb"[eE]\+?0*[1-9][0-9]{2}|[0-9]{200}")
"""A literal that may overflow a double has an exponent of 100 or more, or 200 digits and more; only text with one
is walked for infinities after parsing. RE2, not `re`: Python's engine tries `[0-9]{200}` afresh at every digit,
and 4 MB of 199-digit runs (in strings, a client's or an upstream's) cost 0.5 s; RE2 makes one pass."""
_LONE_SURROGATE = re.compile("[\ud800-\udfff]")


def loads(data: bytes | str) -> JSON:
    """The JSON value of text Triad did not write itself (an upstream's, a file's, Redis's): `json.JSONDecodeError`
    if it is not JSON or is nested deeper than the interpreter's recursion allows (`json.loads` would raise a
    `RecursionError`, which no caller expects: one line nested 100,000 deep ended `triad stdio`), lone surrogates
    kept, numbers out of range as `None`."""
    try:
        try:
            value = json.loads(data, parse_constant=_no_constant)
        except ValueError as exc:
            if "integer string conversion" not in str(exc):
                raise
            value = json.loads(data, parse_constant=_no_constant, parse_int=_bounded_int)
    except RecursionError:
        raise json.JSONDecodeError("nested too deeply", data if isinstance(data, str) else "", 0) from None
    if may_overflow(data):
        value = finite(value)
    return value


def may_overflow(data: bytes | str) -> bool:
    """Whether JSON text may hold a number beyond a double's range (then its parse is walked for infinities): one
    linear pass, whatever the text."""
    text = data.encode("utf-8", "surrogatepass") if isinstance(data, str) else data
    return _HUGE_NUMBER.search(text) is not None


def parse_message(data: bytes | str) -> types.JSONRPCMessage:
    """One JSON-RPC message of an upstream: pydantic's parser first (the fast one), `loads` where it refuses valid
    JSON (a lone surrogate, a long integer); a `ValidationError` when the text is no message."""
    try:
        message = types.jsonrpc_message_adapter.validate_json(data, by_name=False)
    except ValidationError as exc:
        errors = exc.errors(include_url=False)
        if not errors or errors[0]["type"] != "json_invalid":
            raise
        try:
            value = loads(data)
        except ValueError:
            raise exc from None
        return types.jsonrpc_message_adapter.validate_python(value, by_name=False)
    return finite_message(message) if may_overflow(data) else message


def finite_message(message: types.JSONRPCMessage) -> types.JSONRPCMessage:
    """`message` with every non-finite number in its params, result or error data as `None`."""
    if isinstance(message, types.JSONRPCRequest | types.JSONRPCNotification) and message.params is not None:
        if not all_finite(message.params):
            return message.model_copy(update={"params": finite(message.params)})
    elif isinstance(message, types.JSONRPCResponse):
        if not all_finite(message.result):
            return message.model_copy(update={"result": finite(message.result)})
    elif isinstance(message, types.JSONRPCError) and not all_finite(message.error.data):
        error = message.error.model_copy(update={"data": finite(message.error.data)})
        return message.model_copy(update={"error": error})
    return message


def dumps(value: JSON) -> bytes:
    """Compact JSON text of `value` (UTF-8): pydantic's serialiser (non-finite numbers as `null`), or where it
    fails on a lone surrogate, `json`'s with each lone surrogate as its `\\uXXXX` escape."""
    try:
        return pydantic_core.to_json(value, inf_nan_mode="null")
    except pydantic_core.PydanticSerializationError:
        if not isinstance(value, dict | list | str):
            raise
    return dumps_text(value).encode()


def dumps_text(value: JSON) -> str:
    """`dumps` as a string that is always valid UTF-8 (no lone surrogate in it: each is escaped)."""
    text = json.dumps(finite(value), ensure_ascii=False, separators=(",", ":"),
                      default=pydantic_core.to_jsonable_python)
    return _LONE_SURROGATE.sub(lambda found: f"\\u{ord(found.group()):04x}", text)


def all_finite(value: JSON) -> bool:
    """No float in `value` (a parsed JSON value, at any depth) is NaN or infinite."""
    stack = [value]
    while stack:
        item = stack.pop()
        if isinstance(item, float):
            if not math.isfinite(item):
                return False
        elif isinstance(item, dict):
            stack.extend(item.values())
        elif isinstance(item, list):
            stack.extend(item)
    return True


def finite(value: JSON) -> JSON:
    """`value` with every NaN or infinite float as `None` (the same object when it holds none)."""
    return value if all_finite(value) else _finite(value)


def _finite(value: JSON) -> JSON:
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, dict):
        return {key: _finite(item) for key, item in value.items()}
    if isinstance(value, list):
        return [_finite(item) for item in value]
    return value


def _no_constant(_literal: str) -> None:
    return None  # `NaN`, `Infinity`, `-Infinity`: Python's parser takes them, JSON has none


def _bounded_int(digits: str) -> int | None:
    return int(digits) if len(digits.lstrip("-")) <= MAX_INT_DIGITS else None
