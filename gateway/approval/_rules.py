"""Which `approval:` rule applies to a tool: the config's rules compiled once per config (plain, no I/O), for the
call path, `explain` and `plan` alike."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from consumers import JSON
from gateway.config import ApprovalRule, TriadConfig
from policy import Matcher, ToolFacts, compile_patterns, first_matcher


@dataclass(frozen=True, slots=True)
class RuleMatch:
    """The rule that applies to a tool: its index in `approval.rules`, the rule, and the pattern that matched."""

    index: int
    rule: ApprovalRule
    pattern: str

    def describe(self) -> str:
        return (f"approval.rules.{self.index} (pattern {self.pattern!r}): ask {self.rule.ask}, timeout "
                f"{self.rule.timeout:g}s, remember {self.rule.remember}")


class ApprovalRules:
    def __init__(self, config: TriadConfig) -> None:
        groups = config.policy.tool_groups
        self.config = config
        self._rules: tuple[tuple[int, ApprovalRule, tuple[Matcher, ...]], ...] = tuple(
            (index, rule, compile_patterns(rule.tools, groups)) for index, rule in enumerate(config.approval.rules))

    def __bool__(self) -> bool:
        return bool(self._rules)

    def rule_for(self, name: str, upstream: str, raw: str, annotations: Mapping[str, JSON] | None) -> RuleMatch | None:
        """The first rule whose patterns match the tool (by its exposed name, `upstream:raw` and groups)."""
        facts = ToolFacts.from_annotations(name, upstream, raw, annotations)
        for index, rule, matchers in self._rules:
            if (matcher := first_matcher(matchers, facts)) is not None:
                return RuleMatch(index, rule, matcher.pattern)
        return None
