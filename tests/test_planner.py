"""The planner: sort, uniqueness over all descriptors first, visible/hidden split, missing executor (section 3)."""

from __future__ import annotations

from typing import Any

import pytest

from gateway.errors import ToolPlanContractError
from gateway.registry._availability import AvailabilityContext, Diagnostic
from gateway.registry._descriptors import ExecutorRef, OwnerRef, ToolDescriptor
from gateway.registry._planner import build_plan

HIDDEN = {"kind": "env", "name": "NOT_SET"}


def tool(name: str, *, executor: bool = True, availability: Any = None, sort_key: str | None = None) -> ToolDescriptor:
    return ToolDescriptor(name=name, description="", input_schema={"type": "object"}, owner=OwnerRef("core"),
                          executor=ExecutorRef("core", name) if executor else None, availability=availability,
                          sort_key=sort_key)


def names(entries: Any) -> list[str]:
    return [e.descriptor.name for e in entries]


def test_empty_plan() -> None:
    plan = build_plan([])
    assert plan.visible == () and plan.hidden == ()


def test_sorted_case_insensitively_with_upper_case_first_on_ties() -> None:
    plan = build_plan([tool("b"), tool("echo"), tool("B"), tool("a"), tool("Echo"), tool("_x"), tool("a1")])
    assert names(plan.visible) == ["_x", "a", "a1", "B", "b", "Echo", "echo"]


def test_sort_key_overrides_name_and_name_breaks_ties() -> None:
    plan = build_plan([tool("z", sort_key="a"), tool("b"), tool("y", sort_key="a")])
    assert names(plan.visible) == ["y", "z", "b"]


def test_duplicate_name_raises_even_when_hidden() -> None:
    with pytest.raises(ToolPlanContractError) as raised:
        build_plan([tool("x", availability=HIDDEN), tool("x")])
    assert raised.value.contract_code == "duplicate-tool-name"
    assert raised.value.message == "Duplicate tool descriptor name: x"


def test_names_differing_in_case_are_not_duplicates() -> None:
    assert names(build_plan([tool("X"), tool("x")]).visible) == ["X", "x"]


def test_duplicates_are_checked_before_availability_is_evaluated() -> None:
    malformed = {"kind": "bogus"}
    with pytest.raises(ToolPlanContractError, match="Duplicate"):
        build_plan([tool("a", availability=malformed), tool("a", executor=False)])


def test_visible_without_executor_raises_and_gives_no_partial_plan() -> None:
    with pytest.raises(ToolPlanContractError) as raised:
        build_plan([tool("a"), tool("b", executor=False), tool("c")])
    assert raised.value.contract_code == "missing-executor"
    assert raised.value.message == "Visible tool descriptor has no executor ref: b"


def test_hidden_without_executor_is_fine() -> None:
    plan = build_plan([tool("a", executor=False, availability=HIDDEN)])
    assert names(plan.hidden) == ["a"] and plan.visible == ()


def test_hidden_entries_carry_every_diagnostic_and_the_callback_fires_per_diagnostic() -> None:
    seen: list[tuple[str, Diagnostic]] = []
    expression = {"allOf": [HIDDEN, {"kind": "auth", "providerId": "x"}]}
    plan = build_plan([tool("h", availability=expression), tool("v")], AvailabilityContext(),
                      on_hidden_diagnostic=lambda d, diag: seen.append((d.name, diag)))
    assert names(plan.visible) == ["v"]
    [hidden] = plan.hidden
    assert [d.reason for d in hidden.diagnostics] == ["env-missing", "auth-missing"]
    assert [(n, d.reason) for n, d in seen] == [("h", "env-missing"), ("h", "auth-missing")]


def test_visible_entries_carry_their_executor() -> None:
    [entry] = build_plan([tool("a")]).visible
    assert entry.executor == ExecutorRef("core", "a")
    assert str(ExecutorRef("mcp", "srv", "t")) == "mcp:srv:t"
