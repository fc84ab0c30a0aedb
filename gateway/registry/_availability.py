"""Availability expressions: six signals combined with `allOf`/`anyOf`, evaluated to diagnostics.

A tool is available exactly when its diagnostic list is empty. The rules reproduce OpenClaw's
`src/tools/availability.ts` (reference section 2): the whole tree is shape-checked first (a cycle is malformed
too), `exists` differs from `non-empty`, a `context` value of `None` counts as present when no `equals` is given,
`equals` is strict (`1` matches neither `True` nor `1.0`), whitespace-only env values are missing, and `anyOf`
keeps `unsupported-signal` diagnostics even when a sibling passes. Pure: no I/O.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

from consumers import JSON, JSONObject

Reason = Literal["auth-missing", "config-missing", "context-mismatch", "env-missing", "plugin-disabled",
                 "unsupported-signal"]

_SIGNAL_STRING_FIELDS = {"auth": "providerId", "env": "name", "plugin-enabled": "pluginId", "context": "key"}
_KINDS = frozenset({"always", "auth", "config", "env", "plugin-enabled", "context"})
_MISSING = object()


@dataclass(frozen=True, slots=True)
class Diagnostic:
    reason: Reason
    message: str
    signal: Mapping[str, JSON] | None = None

    def as_dict(self) -> JSONObject:
        out: JSONObject = {"reason": self.reason, "message": self.message}
        if self.signal is not None:
            out["signal"] = dict(self.signal)
        return out


@dataclass(frozen=True)
class AvailabilityContext:
    """What the signals are checked against. Every field is optional, as in the reference."""

    auth_provider_ids: frozenset[str] = frozenset()
    config: Mapping[str, JSON] = field(default_factory=dict)
    is_config_value_available: Callable[[Any, Sequence[str], Mapping[str, JSON]], bool] | None = None
    env: Mapping[str, str | None] = field(default_factory=dict)
    enabled_plugin_ids: frozenset[str] = frozenset()
    values: Mapping[str, JSON] = field(default_factory=dict)


MALFORMED = Diagnostic("unsupported-signal", "Unsupported availability expression")
ALWAYS: Mapping[str, JSON] = {"kind": "always"}


def evaluate(expression: JSON, context: AvailabilityContext | None = None) -> list[Diagnostic]:
    """Diagnostics for `expression` (None means always available); empty means available."""
    if expression is None:
        expression = ALWAYS
    if not has_valid_shape(expression):
        return [MALFORMED]
    return _evaluate(expression, context or AvailabilityContext())


def has_valid_shape(expression: JSON) -> bool:
    """Validate the whole tree before evaluating anything; a cyclic tree is malformed."""
    return _shape_ok(expression, set())


def _shape_ok(node: JSON, ancestors: set[int]) -> bool:
    if not isinstance(node, Mapping):
        return False
    if id(node) in ancestors:
        return False
    if "kind" in node:
        return _signal_shape_ok(node)
    ancestors = ancestors | {id(node)}
    for key in ("allOf", "anyOf"):
        if key in node:
            children = node[key]
            return isinstance(children, list | tuple) and all(_shape_ok(c, ancestors) for c in children)
    return False


def _signal_shape_ok(signal: Mapping[str, JSON]) -> bool:
    kind = signal["kind"]
    if kind not in _KINDS:
        return False
    if kind in _SIGNAL_STRING_FIELDS:
        return isinstance(signal.get(_SIGNAL_STRING_FIELDS[kind]), str)
    if kind == "config":
        return isinstance(signal.get("path"), list | tuple) and signal.get("check", "exists") in (
            "exists", "non-empty", "available")
    return True


def _evaluate(node: Mapping[str, JSON], ctx: AvailabilityContext) -> list[Diagnostic]:
    if "kind" in node:
        found = _evaluate_signal(node, ctx)
        return [] if found is None else [found]
    if "allOf" in node:
        children = node["allOf"]
        if not children:
            return [Diagnostic("unsupported-signal", "Empty availability allOf group")]
        return [d for child in children for d in _evaluate(child, ctx)]
    children = node["anyOf"]
    if not children:
        return [Diagnostic("unsupported-signal", "Empty availability anyOf group")]
    results = [_evaluate(child, ctx) for child in children]
    if any(not r for r in results):
        # One branch passed, but a malformed sibling still hides the tool.
        return [d for r in results for d in r if d.reason == "unsupported-signal"]
    return [d for r in results for d in r]


def _evaluate_signal(signal: Mapping[str, JSON], ctx: AvailabilityContext) -> Diagnostic | None:
    kind = signal["kind"]
    if kind == "always":
        return None
    if kind == "config":
        return _config_signal(signal, ctx)
    value = signal[_SIGNAL_STRING_FIELDS[kind]]
    if not value:
        return Diagnostic("unsupported-signal", f"Malformed {kind} signal: missing {_SIGNAL_STRING_FIELDS[kind]}",
                          signal)
    if kind == "auth":
        ok = value in ctx.auth_provider_ids
        return None if ok else Diagnostic("auth-missing", f"Missing auth provider: {value}", signal)
    if kind == "env":
        found = ctx.env.get(value)
        ok = isinstance(found, str) and found.strip() != ""
        return None if ok else Diagnostic("env-missing", f"Missing env var: {value}", signal)
    if kind == "plugin-enabled":
        ok = value in ctx.enabled_plugin_ids
        return None if ok else Diagnostic("plugin-disabled", f"Plugin is not enabled: {value}", signal)
    return _context_signal(value, signal, ctx)


def _context_signal(key: str, signal: Mapping[str, JSON], ctx: AvailabilityContext) -> Diagnostic | None:
    found = ctx.values.get(key, _MISSING)
    if "equals" not in signal:
        return None if found is not _MISSING else Diagnostic("context-mismatch", f"Missing context value: {key}",
                                                             signal)
    if found is not _MISSING and strictly_equal(found, signal["equals"]):
        return None
    return Diagnostic("context-mismatch", f"Context value did not match: {key}", signal)


def strictly_equal(a: JSON, b: JSON) -> bool:
    """JavaScript `===` on JSON primitives: `1` is not `True`, and `1` is not `1.0` (Python says both are)."""
    return type(a) is type(b) and a == b


def _config_signal(signal: Mapping[str, JSON], ctx: AvailabilityContext) -> Diagnostic | None:
    path = [str(p) for p in signal["path"]]
    value: Any = ctx.config
    for part in path:
        value = value.get(part) if isinstance(value, Mapping) else None
        if value is None:
            break
    if _has_configured_value(value, path, signal, ctx):
        return None
    return Diagnostic("config-missing", f"Missing config path: {'.'.join(path)}", signal)


def _has_configured_value(value: JSON, path: Sequence[str], signal: Mapping[str, JSON],
                          ctx: AvailabilityContext) -> bool:
    if value is None:
        return False
    check = signal.get("check", "exists")
    if check == "exists":
        return True
    if check == "non-empty":
        if isinstance(value, str):
            return value.strip() != ""
        if isinstance(value, list | tuple | Mapping):
            return len(value) > 0
        return True
    callback = ctx.is_config_value_available
    return callback is not None and callback(value, path, signal) is True
