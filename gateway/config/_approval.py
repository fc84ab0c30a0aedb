"""`approval:`: the calls that wait for a person's yes before any upstream sees them (`gateway.approval` asks).

A rule matches tools by the policy's patterns (globs, `group:<upstream>`, `group:destructive`, the user's
`policy.tool_groups`); the first rule that matches a tool is the one that applies. `ask` says who is asked,
`timeout` how long the call waits (no answer is a denial: fail closed), `remember: session` lets the person
answer "allow for this session", which answers later calls of the same tool in the same session.
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator

from consumers.config import Duration

AskMode = Literal["caller", "console", "caller_then_console"]
"""`caller`: a form-mode elicitation to the client that made the call (2026-07-28: an `input_required` round);
`console`: the console's approval queue, answered by an approver; `caller_then_console`: the caller when it
declared elicitation, else the console."""
Remember = Literal["none", "session"]

DEFAULT_APPROVAL_TIMEOUT = 120.0
"""Long enough for a person to read the question, short enough that a forgotten call does not hold its slot."""
MAX_APPROVAL_TIMEOUT = 3600.0
"""A call in flight holds a slot of its caller's quota; an hour is the most any rule may keep it waiting."""
MAX_RULES = 200


class ApprovalRule(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    tools: tuple[str, ...] = Field(min_length=1)
    """The tools this rule asks about: globs and groups, as in policy."""
    ask: AskMode = "caller"
    timeout: Duration = Field(default=DEFAULT_APPROVAL_TIMEOUT, gt=0, le=MAX_APPROVAL_TIMEOUT)
    remember: Remember = "none"

    @field_validator("tools")
    @classmethod
    def _no_empty_pattern(cls, tools: tuple[str, ...]) -> tuple[str, ...]:
        if any(not pattern.strip() for pattern in tools):
            raise ValueError("an empty pattern matches no tool; remove it")
        return tools


class ApprovalConfig(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    rules: tuple[ApprovalRule, ...] = Field(default=(), max_length=MAX_RULES)
    approvers: tuple[str, ...] = ()
    """Clients who may answer in the console's queue, besides the owners."""

    def console_rules(self) -> list[int]:
        """The indexes of the rules that may ask in the console."""
        return [index for index, rule in enumerate(self.rules) if rule.ask != "caller"]
