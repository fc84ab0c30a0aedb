"""Approval: calls that wait for a person's yes (`approval:`), after policy and before the before-hooks.

`ApprovalGate` decides each call (asking the caller by elicitation, or the console's queue, `gateway.state.Approvals`);
`ApprovalRules` says which rule applies to a tool (the call path, `explain`, `plan`).
"""

from gateway.approval._gate import REMEMBERED, ApprovalCall, ApprovalGate
from gateway.approval._rules import ApprovalRules, RuleMatch

__all__ = ["REMEMBERED", "ApprovalCall", "ApprovalGate", "ApprovalRules", "RuleMatch"]
