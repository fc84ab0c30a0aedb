"""The planner: sort descriptors, refuse duplicates, split visible from hidden, refuse a visible tool without
an executor. Reproduces OpenClaw's `src/tools/planner.ts` (reference section 3). Pure: no I/O, no clock, no log.

Ordering: OpenClaw sorts with JavaScript `localeCompare` (ICU collation). We use the documented approximation
`(key.casefold(), key)`: case-insensitive first, and for names that differ only in case the code-point order
decides, so upper case sorts first (`"Echo"` before `"echo"`); `"a"` sorts before `"B"` as in ICU.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass

from gateway.errors import ToolPlanContractError
from gateway.registry._availability import AvailabilityContext, Diagnostic, evaluate
from gateway.registry._descriptors import ExecutorRef, ToolDescriptor


@dataclass(frozen=True, slots=True)
class PlanEntry:
    descriptor: ToolDescriptor
    executor: ExecutorRef


@dataclass(frozen=True, slots=True)
class HiddenEntry:
    descriptor: ToolDescriptor
    diagnostics: tuple[Diagnostic, ...]


@dataclass(frozen=True, slots=True)
class ToolPlan:
    visible: tuple[PlanEntry, ...]
    hidden: tuple[HiddenEntry, ...]


def sort_key(descriptor: ToolDescriptor) -> tuple[str, str, str, str]:
    key = descriptor.sort_key if descriptor.sort_key is not None else descriptor.name
    return (key.casefold(), key, descriptor.name.casefold(), descriptor.name)


def build_plan(
    descriptors: Iterable[ToolDescriptor],
    context: AvailabilityContext | None = None,
    on_hidden_diagnostic: Callable[[ToolDescriptor, Diagnostic], None] | None = None,
) -> ToolPlan:
    ordered = sorted(descriptors, key=sort_key)
    seen: set[str] = set()
    for descriptor in ordered:  # over all descriptors, hidden ones included, before any evaluation
        if descriptor.name in seen:
            raise ToolPlanContractError("duplicate-tool-name", descriptor.name,
                                        f"Duplicate tool descriptor name: {descriptor.name}")
        seen.add(descriptor.name)
    visible: list[PlanEntry] = []
    hidden: list[HiddenEntry] = []
    for descriptor in ordered:
        diagnostics = evaluate(descriptor.availability, context)
        if diagnostics:
            if on_hidden_diagnostic is not None:
                for diagnostic in diagnostics:
                    on_hidden_diagnostic(descriptor, diagnostic)
            hidden.append(HiddenEntry(descriptor, tuple(diagnostics)))
            continue
        if descriptor.executor is None:
            raise ToolPlanContractError("missing-executor", descriptor.name,
                                        f"Visible tool descriptor has no executor ref: {descriptor.name}")
        visible.append(PlanEntry(descriptor, descriptor.executor))
    return ToolPlan(tuple(visible), tuple(hidden))
