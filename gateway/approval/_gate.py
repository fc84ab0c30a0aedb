"""The approval gate: between policy and the before-hooks, a call that an `approval:` rule matches waits for a
person's yes before any upstream sees it.

Who is asked (`ask`): the caller, by a form-mode elicitation sent to the client that made the call (the request's
downstream, `CURRENT_DOWNSTREAM`; for a 2026-07-28 client the exposer runs the call in `input_required` rounds,
so the same question becomes a round); or the console's queue (`gateway.state.Approvals`), where an approver
answers while the caller gets progress notifications. A client that did not declare form-mode elicitation goes to
the console (`caller_then_console`) or is refused with an error that says approval is required. No answer within
the rule's `timeout` is a denial (fail closed). "Allow for this session" (`remember: session`) is kept in the
session's state and answers later calls of the same tool in that session.

Every decision is counted (`triad_approvals`), logged, and told to the hooks' `on_approval` (the audit record).

Ownership: the dispatcher creates one gate with its metrics and queue; the rules are compiled once per config.
"""

from __future__ import annotations

import json
import logging
import re
from collections.abc import Mapping
from dataclasses import dataclass

import anyio
import mcp_types as types

from consumers import CURRENT_DOWNSTREAM, JSON, Downstream, JSONObject, ProgressFn, undeclared
from gateway.approval._rules import ApprovalRules, RuleMatch
from gateway.config import TriadConfig
from gateway.hooks import CallContext, HookChain, Redact, Session
from gateway.identity import Identity, subject_of
from gateway.observe import Metrics
from gateway.state import Approvals, QueueFull, SharedStateUnavailable, Waiting
from policy import ToolFacts

logger = logging.getLogger("triad.approval")

REMEMBERED = "triad.approval.remembered"
"""The session-state key of the tools a person allowed for the rest of the session."""
PROGRESS_EVERY = 2.0
"""While a call waits in the console's queue, its caller gets a progress notification this often (if it asked for
progress): a client that shows progress shows that the call is waiting, not hung."""
MAX_SUMMARY = 2000
"""The arguments' summary in a question is cut to this many characters (the approver reads it; it is not the call)."""
REDACTED = "[REDACTED]"
_SECRET_NAME = re.compile(r"(?i)(pass(word|phrase)?|secret|token|api[_-]?key|auth(orization)?|credential|"
                          r"private[_-]?key|cookie)")
"""An argument whose name says it holds a secret is shown as `REDACTED`, whatever its value looks like."""


@dataclass(frozen=True, slots=True)
class ApprovalCall:
    """What the gate knows of a call: who calls which tool, on which upstream, with what."""

    identity: Identity
    tool: str
    upstream: str
    raw: str
    arguments: JSONObject
    annotations: Mapping[str, JSON]


class ApprovalGate:
    def __init__(self, metrics: Metrics, queue: Approvals) -> None:
        self.queue = queue
        self._metrics = metrics
        self._rules: ApprovalRules | None = None
        self._redact = Redact()

    def rules(self, config: TriadConfig) -> ApprovalRules:
        """`config`'s rules, compiled once per config (a reload brings a new one)."""
        if self._rules is None or self._rules.config is not config:
            self._rules = ApprovalRules(config)
        return self._rules

    async def check(self, config: TriadConfig, hooks: HookChain, call: ApprovalCall, session: Session | None,
                    progress: ProgressFn | None = None) -> str | None:
        """None when the call may go on (no rule applies, or a person said yes); else why it is refused."""
        rules = self.rules(config)
        match = rules.rule_for(call.tool, call.upstream, call.raw, call.annotations) if rules else None
        if match is None:
            return None
        rule = match.rule
        remembered = session.state.get(REMEMBERED) if session is not None else None
        if rule.remember == "session" and isinstance(remembered, set) and call.tool in remembered:
            await self._decided(hooks, call, session, match, "approved", "session", call.identity.client_id,
                                "allowed for this session earlier")
            return None
        summary = config.secret_mask()(_summary(self._redact, call.arguments))
        downstream = CURRENT_DOWNSTREAM.get()
        request = types.ElicitRequest(params=types.ElicitRequestFormParams(
            message=_question(call, match, summary), requested_schema=_form(match)))
        if rule.ask != "console" and downstream is not None and undeclared(request, downstream.capabilities) is None:
            return await self._ask_caller(hooks, call, session, match, downstream, request)
        if rule.ask == "caller":
            reason = ("this client did not declare form-mode elicitation, so it cannot be asked; use a client that "
                      "supports elicitation, or have the operator set ask: caller_then_console")
            await self._decided(hooks, call, session, match, "unanswerable", "none", "triad", reason)
            return _refusal(call, match, reason)
        return await self._ask_console(hooks, call, session, match, summary, progress)

    async def _ask_caller(self, hooks: HookChain, call: ApprovalCall, session: Session | None, match: RuleMatch,
                          downstream: Downstream, request: types.ElicitRequest) -> str | None:
        """The caller's answer to the form-mode elicitation `request` (accept, with "allow for this session")."""
        answer: types.ElicitResult | types.ErrorData | None = None
        with anyio.move_on_after(match.rule.timeout):
            answer = await downstream.ask(request, types.ElicitResult)
        if answer is None:
            return await self._timed_out(hooks, call, session, match)
        if isinstance(answer, types.ErrorData):
            reason = f"the client could not be asked ({answer.message})"
            await self._decided(hooks, call, session, match, "unanswerable", "none", "triad", reason)
            return _refusal(call, match, reason)
        if answer.action != "accept":
            reason = f"the caller answered {answer.action}"
            await self._decided(hooks, call, session, match, "denied", "caller", call.identity.client_id, reason)
            return _refusal(call, match, reason)
        remember = match.rule.remember == "session" and (answer.content or {}).get("remember") is True
        if remember and session is not None:
            allowed = session.state.setdefault(REMEMBERED, set())
            if isinstance(allowed, set):
                allowed.add(call.tool)
        await self._decided(hooks, call, session, match, "approved", "caller", call.identity.client_id,
                            "allowed for this session" if remember else "allowed once")
        return None

    async def _ask_console(self, hooks: HookChain, call: ApprovalCall, session: Session | None, match: RuleMatch,
                           summary: str, progress: ProgressFn | None) -> str | None:
        item = Waiting(call.identity.client_id, call.tool, call.upstream, summary, _notes(call), match.index)

        async def tick(elapsed: float) -> None:
            if progress is not None:
                await progress({"progress": round(elapsed, 1), "total": match.rule.timeout,
                                "message": "waiting for an approver in Triad's console"})

        logger.info("approval: %s's call of %s waits in the console queue (%s)", call.identity.client_id,
                    call.tool, match.describe())
        try:
            answer = await self.queue.wait(item, match.rule.timeout, tick, PROGRESS_EVERY)
        except (QueueFull, SharedStateUnavailable) as exc:
            await self._decided(hooks, call, session, match, "unanswerable", "none", "triad", str(exc))
            return _refusal(call, match, str(exc))
        if answer is None:
            return await self._timed_out(hooks, call, session, match)
        reason = answer.reason or "no reason given"
        if not answer.approved:
            await self._decided(hooks, call, session, match, "denied", "console", answer.by, reason)
            return _refusal(call, match, f"approver {answer.by} denied it: {reason}")
        await self._decided(hooks, call, session, match, "approved", "console", answer.by, reason)
        return None

    async def _timed_out(self, hooks: HookChain, call: ApprovalCall, session: Session | None,
                         match: RuleMatch) -> str:
        reason = f"no answer within {match.rule.timeout:g}s, and a call nobody approved is refused"
        await self._decided(hooks, call, session, match, "timeout", "none", "triad", reason)
        return _refusal(call, match, reason)

    async def _decided(self, hooks: HookChain, call: ApprovalCall, session: Session | None, match: RuleMatch,
                       decision: str, via: str, by: str, reason: str) -> None:
        self._metrics.approvals.labels(decision, via).inc()
        logger.info("approval: %s's call of %s %s by %s (%s; %s)", call.identity.client_id, call.tool, decision, by,
                    reason, match.describe(),
                    extra={"kind": "tool", "client": call.identity.client_id, "tool": call.tool,
                           "upstream": call.upstream, "outcome": f"approval-{decision}", "approver": by})
        if hooks:
            ctx = CallContext("tool", call.identity.client_id, session or Session(), call.tool, call.upstream,
                              call.raw, dict(call.arguments), call.annotations, subject=subject_of(call.identity))
            await hooks.approval(ctx, decision, f"{via}:{by}", reason)


def _question(call: ApprovalCall, match: RuleMatch, summary: str) -> str:
    return (f"Approve this tool call? {call.identity.client_id} calls {call.tool} (upstream {call.upstream}, "
            f"tool {call.raw}).\nArguments: {summary}\nThe tool says it is: {_notes(call)}.\n"
            f"Asked by Triad's approval.rules.{match.index}; accept to allow it, decline to refuse it"
            + (", and tick \"allow for this session\" to allow its later calls too." if
               match.rule.remember == "session" else "."))


def _form(match: RuleMatch) -> JSONObject:
    """The form the caller answers: accept or decline, and where the rule allows it, "allow for this session"."""
    properties: JSONObject = {}
    if match.rule.remember == "session":
        properties["remember"] = {"type": "boolean", "title": "Allow for this session", "default": False,
                                  "description": "Later calls of this tool in this session are not asked about."}
    return {"type": "object", "properties": properties}


def _masked(redact: Redact, value: JSON, name: str = "") -> JSON:
    if name and _SECRET_NAME.search(name):
        return REDACTED
    if isinstance(value, dict):
        return {key: _masked(redact, item, key) for key, item in value.items()}
    if isinstance(value, list):
        return [_masked(redact, item) for item in value]
    return redact.mask(value)


def _summary(redact: Redact, arguments: JSONObject) -> str:
    """The arguments as a person reads them: JSON, secrets redacted (the `redact` hook's patterns, and arguments
    named like secrets), cut to `MAX_SUMMARY` characters."""
    text = json.dumps(_masked(redact, arguments), ensure_ascii=False, sort_keys=True, default=str)
    return text if len(text) <= MAX_SUMMARY else text[:MAX_SUMMARY] + f"… ({len(text)} characters in all)"


def _notes(call: ApprovalCall) -> str:
    """What the tool's annotations say (the spec's defaults where it says nothing)."""
    facts = ToolFacts.from_annotations(call.tool, call.upstream, call.raw, call.annotations)
    notes = ["read-only" if facts.read_only else "destructive (it may change or delete things)" if facts.destructive
             else "not destructive"]
    if call.annotations.get("openWorldHint") is not False:
        notes.append("open-world (it may reach systems outside)")
    if call.annotations.get("idempotentHint") is True:
        notes.append("idempotent")
    return ", ".join(notes)


def _refusal(call: ApprovalCall, match: RuleMatch, reason: str) -> str:
    return f"{call.tool} was not called: it needs a person's approval (approval.rules.{match.index}), and {reason}."
