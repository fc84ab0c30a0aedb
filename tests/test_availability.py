"""Availability: the six signals and allOf/anyOf, exactly as reference section 2 and checklist item 1 say."""

from __future__ import annotations

from typing import Any

import pytest

from gateway.registry._availability import AvailabilityContext, evaluate, has_valid_shape

CTX = AvailabilityContext(
    auth_provider_ids=frozenset({"github"}),
    config={"a": {"b": 1, "empty": "", "blank": "   ", "zero": 0, "false": False, "list": [], "dict": {},
                  "full": [1], "none": None}},
    env={"SET": "x", "BLANK": "   ", "EMPTY": ""},
    enabled_plugin_ids=frozenset({"p1"}),
    values={"one": 1, "true": True, "float": 1.0, "null": None, "s": "ready"},
)


def reasons(expression: Any, ctx: AvailabilityContext = CTX) -> list[str]:
    return [d.reason for d in evaluate(expression, ctx)]


@pytest.mark.parametrize(("expression", "expected"), [
    # malformed shapes: one diagnostic, no signal
    ([], ["unsupported-signal"]),
    ("always", ["unsupported-signal"]),
    ({}, ["unsupported-signal"]),
    ({"kind": "nope"}, ["unsupported-signal"]),
    ({"kind": "auth"}, ["unsupported-signal"]),
    ({"kind": "auth", "providerId": 3}, ["unsupported-signal"]),
    ({"kind": "config", "path": "a.b"}, ["unsupported-signal"]),
    ({"kind": "config", "path": ["a"], "check": "bogus"}, ["unsupported-signal"]),
    ({"allOf": "x"}, ["unsupported-signal"]),
    ({"anyOf": [{"kind": "always"}, {"kind": "weird"}]}, ["unsupported-signal"]),
    ({"allOf": [{"kind": "env", "name": "MISSING"}, {"bad": 1}]}, ["unsupported-signal"]),
    # a signal key wins over allOf/anyOf
    ({"kind": "always", "allOf": "not checked"}, []),
    # None means always
    (None, []),
    ({"kind": "always"}, []),
])
def test_shape_is_checked_before_anything_is_evaluated(expression: Any, expected: list[str]) -> None:
    assert reasons(expression) == expected


def test_malformed_expression_gives_exactly_one_diagnostic_without_signal() -> None:
    [diagnostic] = evaluate({"allOf": [{"kind": "env", "name": "MISSING"}, 5]}, CTX)
    assert diagnostic.message == "Unsupported availability expression"
    assert diagnostic.signal is None


def test_cyclic_expression_is_malformed() -> None:
    node: dict[str, Any] = {"allOf": []}
    node["allOf"].append(node)
    assert not has_valid_shape(node)
    assert reasons(node) == ["unsupported-signal"]


def test_shared_subtree_that_is_not_a_cycle_is_fine() -> None:
    shared = {"kind": "always"}
    assert reasons({"allOf": [shared, shared, {"anyOf": [shared]}]}) == []


@pytest.mark.parametrize(("signal", "expected"), [
    ({"kind": "auth", "providerId": "github"}, []),
    ({"kind": "auth", "providerId": "gitlab"}, ["auth-missing"]),
    ({"kind": "auth", "providerId": ""}, ["unsupported-signal"]),
    ({"kind": "env", "name": "SET"}, []),
    ({"kind": "env", "name": "BLANK"}, ["env-missing"]),
    ({"kind": "env", "name": "EMPTY"}, ["env-missing"]),
    ({"kind": "env", "name": "MISSING"}, ["env-missing"]),
    ({"kind": "env", "name": ""}, ["unsupported-signal"]),
    ({"kind": "plugin-enabled", "pluginId": "p1"}, []),
    ({"kind": "plugin-enabled", "pluginId": "p2"}, ["plugin-disabled"]),
    ({"kind": "plugin-enabled", "pluginId": ""}, ["unsupported-signal"]),
    ({"kind": "context", "key": ""}, ["unsupported-signal"]),
])
def test_simple_signals(signal: dict[str, Any], expected: list[str]) -> None:
    assert reasons(signal) == expected


@pytest.mark.parametrize(("path", "check", "available"), [
    (["a", "b"], "exists", True),
    (["a", "empty"], "exists", True),        # exists: "" counts
    (["a", "zero"], "exists", True),         # exists: 0 counts
    (["a", "false"], "exists", True),        # exists: False counts
    (["a", "none"], "exists", False),        # None never counts
    (["a", "missing"], "exists", False),
    (["a", "b", "deeper"], "exists", False),  # a non-object in the middle of the path
    ([], "exists", True),                    # empty path: the config root itself
    (["a", "empty"], "non-empty", False),
    (["a", "blank"], "non-empty", False),    # whitespace-only string is empty
    (["a", "list"], "non-empty", False),
    (["a", "dict"], "non-empty", False),
    (["a", "full"], "non-empty", True),
    (["a", "zero"], "non-empty", True),      # any number counts
    (["a", "false"], "non-empty", True),     # any bool counts
    (["a", "b"], "available", False),        # no callback: unavailable
])
def test_config_signal_exists_differs_from_non_empty(path: list[str], check: str, available: bool) -> None:
    result = reasons({"kind": "config", "path": path, "check": check})
    assert result == ([] if available else ["config-missing"])


def test_config_available_check_needs_the_callback_to_return_exactly_true() -> None:
    yes = AvailabilityContext(config={"k": "v"}, is_config_value_available=lambda v, p, s: True)
    truthy = AvailabilityContext(config={"k": "v"}, is_config_value_available=lambda v, p, s: 1)  # type: ignore[arg-type,return-value]
    signal = {"kind": "config", "path": ["k"], "check": "available"}
    assert reasons(signal, yes) == []
    assert reasons(signal, truthy) == ["config-missing"]


def test_config_missing_message_names_the_path() -> None:
    [diagnostic] = evaluate({"kind": "config", "path": ["x", "y"]}, CTX)
    assert diagnostic.message == "Missing config path: x.y"
    assert diagnostic.signal == {"kind": "config", "path": ["x", "y"]}


@pytest.mark.parametrize(("signal", "expected"), [
    ({"kind": "context", "key": "null"}, []),                      # None is present without equals
    ({"kind": "context", "key": "absent"}, ["context-mismatch"]),
    ({"kind": "context", "key": "one", "equals": 1}, []),
    ({"kind": "context", "key": "one", "equals": True}, ["context-mismatch"]),   # 1 is not True
    ({"kind": "context", "key": "one", "equals": 1.0}, ["context-mismatch"]),    # 1 is not 1.0
    ({"kind": "context", "key": "true", "equals": 1}, ["context-mismatch"]),
    ({"kind": "context", "key": "float", "equals": 1}, ["context-mismatch"]),
    ({"kind": "context", "key": "null", "equals": None}, []),
    ({"kind": "context", "key": "absent", "equals": None}, ["context-mismatch"]),
    ({"kind": "context", "key": "s", "equals": "ready"}, []),
    ({"kind": "context", "key": "s", "equals": "READY"}, ["context-mismatch"]),
])
def test_context_signal_uses_strict_equality(signal: dict[str, Any], expected: list[str]) -> None:
    assert reasons(signal) == expected


def test_context_messages() -> None:
    assert evaluate({"kind": "context", "key": "k"}, CTX)[0].message == "Missing context value: k"
    assert evaluate({"kind": "context", "key": "s", "equals": "x"}, CTX)[0].message == "Context value did not match: s"


ENV_MISSING = {"kind": "env", "name": "MISSING"}
AUTH_MISSING = {"kind": "auth", "providerId": "gitlab"}
OK = {"kind": "always"}
BAD_AUTH = {"kind": "auth", "providerId": ""}


@pytest.mark.parametrize(("expression", "expected"), [
    ({"allOf": []}, ["unsupported-signal"]),
    ({"anyOf": []}, ["unsupported-signal"]),
    ({"allOf": [OK, OK]}, []),
    ({"allOf": [ENV_MISSING, AUTH_MISSING]}, ["env-missing", "auth-missing"]),  # no short circuit, tree order
    ({"anyOf": [ENV_MISSING, OK]}, []),
    ({"anyOf": [ENV_MISSING, AUTH_MISSING]}, ["env-missing", "auth-missing"]),
    ({"anyOf": [OK, BAD_AUTH]}, ["unsupported-signal"]),  # a passing sibling keeps the malformed one
    ({"anyOf": [OK, {"allOf": []}]}, ["unsupported-signal"]),
    ({"anyOf": [BAD_AUTH, ENV_MISSING]}, ["unsupported-signal", "env-missing"]),
    ({"allOf": [{"anyOf": [ENV_MISSING, OK]}, {"anyOf": [AUTH_MISSING]}]}, ["auth-missing"]),
])
def test_combinators(expression: dict[str, Any], expected: list[str]) -> None:
    assert reasons(expression) == expected


def test_empty_group_messages() -> None:
    assert evaluate({"allOf": []})[0].message == "Empty availability allOf group"
    assert evaluate({"anyOf": []})[0].message == "Empty availability anyOf group"


def test_missing_context_means_empty_context() -> None:
    assert reasons({"kind": "env", "name": "HOME"}, AvailabilityContext()) == ["env-missing"]
    assert [d.reason for d in evaluate({"kind": "env", "name": "HOME"})] == ["env-missing"]
