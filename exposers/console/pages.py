"""What each console page shows, as plain data for the templates: read from the running daemon, never changed.

The views of clients are `triad plan` and `triad explain`'s own reports (`gateway.cli`), computed on the
daemon's live registry; upstream states and a stdio child's last stderr lines are the pool's; call counts and
latency are the Prometheus metrics; the calls in flight and the recent ones are the dispatcher's call log. Every
text that could hold an interpolated `${VAR}` value (reasons, stderr lines, reload errors) passes through the
config's `hide_values`. No argument or result value, no token and no session id is ever read here.
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass

from consumers import JSON, JSONObject, describe_sandbox
from gateway.calls import Dispatcher, pin_hooks
from gateway.identity import LOCAL_CLIENT, identity_for
from gateway.observe import CallRecord, Reloads
from gateway.registry import explain, plan_report, upstream_states
from gateway.state import Answer, PinStatus, definition_hash, pin_diff

RATE_WINDOW = 60.0
"""Seconds over which the call rate is counted (from the call log, as far as it reaches)."""
DEFINITION_FIELDS = ("inputSchema", "outputSchema", "annotations")
"""Parts of a tool's definition shown each on its own on the tool's page (the whole definition follows)."""


class StateClock:
    """Since when each upstream is in its state, and how often it went down: the pool keeps the state, not its
    history. Told of every change by the dispatcher's listener (synchronously, in the upstream's owner task);
    states it saw before it was created date from its creation."""

    def __init__(self, dispatcher: Dispatcher) -> None:
        self._dispatcher = dispatcher
        self._seen: dict[str, tuple[str, float]] = {}
        self.downs: dict[str, int] = {}
        self.changed()
        dispatcher.add_listener(self.changed)

    def changed(self) -> None:
        now = time.time()
        for name, upstream in self._dispatcher.pool.upstreams.items():
            state = upstream.state.value
            if self._seen.get(name, ("", 0.0))[0] != state:
                self._seen[name] = (state, now)
                if state == "down":
                    self.downs[name] = self.downs.get(name, 0) + 1

    def since(self, name: str) -> float | None:
        seen = self._seen.get(name)
        return seen[1] if seen is not None else None


def client_ids(dispatcher: Dispatcher) -> list[str]:
    """Every client a view can be shown for: `local` and each configured one."""
    return [LOCAL_CLIENT, *(c for c in dispatcher.config.clients if c != LOCAL_CLIENT)]


def upstreams(dispatcher: Dispatcher, clock: StateClock) -> list[JSONObject]:
    config, totals = dispatcher.config, _call_totals(dispatcher)
    rows = []
    for name, upstream in dispatcher.pool.upstreams.items():
        catalog, child = upstream.catalog, upstream.child
        down = upstream.state.value == "down"  # explained by the child that ended, not by its successor starting
        calls, seconds = totals.get(name, (0.0, 0.0))
        recent = dispatcher.metrics.call_log.since(name, RATE_WINDOW)
        rows.append({
            "name": name, "transport": upstream.config.kind, "state": upstream.state.value,
            "sandbox": describe_sandbox(upstream.config.sandboxed),
            "since": clock.since(name), "reason": config.hide_values(upstream.reason),
            "exit": child.ended_exit if down else child.exit,
            "stderr": [config.hide_values(line) for line in (child.ended_lines if down else child.lines)],
            "breaker": "open" if upstream.state.value == "degraded" else "closed",
            "downs": clock.downs.get(name, 0), "sessions": upstream.client_sessions,
            "era": catalog.protocol_version if catalog is not None else "",
            "tools": len(catalog.tools) if catalog else 0, "resources": len(catalog.resources) if catalog else 0,
            "prompts": len(catalog.prompts) if catalog else 0,
            "calls": int(calls), "mean_ms": 1000 * seconds / calls if calls else None,
            "per_minute": len(recent) * 60.0 / RATE_WINDOW,
        })
    return rows


def _call_totals(dispatcher: Dispatcher) -> dict[str, tuple[float, float]]:
    """Per upstream: requests forwarded, and seconds spent on them, all kinds and outcomes (the metrics')."""
    totals: dict[str, list[float]] = {}
    for metric in dispatcher.metrics.duration.collect():
        for sample in metric.samples:
            entry = totals.setdefault(sample.labels["upstream"], [0.0, 0.0])
            if sample.name.endswith("_count"):
                entry[0] += sample.value
            elif sample.name.endswith("_sum"):
                entry[1] += sample.value
    return {name: (count, seconds) for name, (count, seconds) in totals.items()}


def tools(dispatcher: Dispatcher) -> list[JSONObject]:
    """Every tool in the registry, visible to anyone or not: exposed name, owner, upstream and raw name."""
    out = []
    for name, descriptor in sorted(dispatcher.registry.tools.items(), key=lambda item: item[0].casefold()):
        executor = descriptor.executor
        out.append({"name": name, "owner": str(descriptor.owner), "upstream": executor.id if executor else "",
                    "raw": executor.tool if executor else ""})
    return out


def definition(dispatcher: Dispatcher, name: str) -> JSONObject | None:
    """The full definition of the registry's tool `name`, as clients are served it (overrides applied): the
    description, schemas and annotations an operator checks before approving a pin. None: no such tool."""
    descriptor = dispatcher.registry.tools.get(name)
    if descriptor is None:
        return None
    wire = descriptor.to_wire()
    executor = descriptor.executor
    fields = {key: json.dumps(wire[key], indent=2, sort_keys=True) for key in DEFINITION_FIELDS if key in wire}
    return _hidden_values(dispatcher, {
        "name": name, "title": str(wire.get("title") or ""), "description": str(wire.get("description") or ""),
        "owner": str(descriptor.owner), "upstream": executor.id if executor else "",
        "raw": executor.tool if executor else "", "fields": fields,
        "whole": json.dumps(wire, indent=2, sort_keys=True, default=str)})


def plan(dispatcher: Dispatcher, client_id: str) -> JSONObject:
    """What `triad plan --client <client_id>` prints, of the running daemon (KeyError: no such client)."""
    view = dispatcher.view(identity_for(dispatcher.config, client_id))
    states = upstream_states(dispatcher.pool.upstreams)
    return _hidden_values(dispatcher, plan_report(view, states, [d.message for d in dispatcher.registry.diagnostics]))


def explanation(dispatcher: Dispatcher, client_id: str, tool: str) -> JSONObject:
    """What `triad explain --client <client_id> <tool>` prints, of the running daemon."""
    view = dispatcher.view(identity_for(dispatcher.config, client_id))
    report = explain(view, tool, dispatcher.pipeline.decide, upstream_states(dispatcher.pool.upstreams))
    return _hidden_values(dispatcher, report)


def _hidden_values(dispatcher: Dispatcher, report: JSONObject) -> JSONObject:
    """The report with every interpolated value replaced by its `${NAME}` (reasons may quote a URL or a line)."""
    hide = dispatcher.config.hide_values

    def walk(value: JSON) -> JSON:
        if isinstance(value, str):
            return hide(value)
        if isinstance(value, list):
            return [walk(item) for item in value]
        if isinstance(value, dict):
            return {key: walk(item) for key, item in value.items()}
        return value

    return walk(report)  # type: ignore[no-any-return]


def calls(dispatcher: Dispatcher) -> dict[str, list[JSONObject]]:
    exposed = {(d.executor.id, d.executor.tool): name for name, d in dispatcher.registry.tools.items()
               if d.executor is not None and d.executor.kind == "mcp"}
    now = time.time()

    def row(record: CallRecord) -> JSONObject:
        name = record.exposed or (exposed.get((record.upstream, record.raw))
                                  if record.kind == "tool" and record.raw is not None else None)
        return {"number": record.number, "kind": record.kind, "tool": name or record.raw or "",
                "client": record.client or "", "upstream": record.upstream, "started": record.started,
                "ms": 1000 * (record.duration if record.duration is not None else now - record.started),
                "outcome": record.outcome or "running", "stopped_by": _stopped_by(record)}

    log = dispatcher.metrics.call_log
    return {"in_flight": [row(r) for r in log.in_flight()], "recent": [row(r) for r in log.recent()]}


def _stopped_by(record: CallRecord) -> str:
    """Who refused a call that never left: the policy layer (and its pattern), or the hook by its name."""
    if record.outcome == "denied":
        return f"policy: {record.layer}" + (f" ({record.pattern})" if record.pattern else "")
    return record.blocked_by or ""


def reloads(dispatcher: Dispatcher, reloader: Reloads | None) -> JSONObject:
    if reloader is None:
        return {"watched": None, "reloads": 0, "failures": 0, "history": []}
    hide, status = dispatcher.config.hide_values, reloader.status
    history = [{"time": e.time, "trigger": e.trigger, "ok": e.ok, "errors": [hide(err) for err in e.errors],
                "changes": [(kind, names) for kind, names in e.changes if names and kind != "kept"]}
               for e in reversed(status.history)]
    return {"watched": str(reloader.path), "reloads": status.reloads, "failures": status.failures,
            "history": history}


@dataclass(frozen=True)
class PinRow:
    tool: str
    upstream: str
    raw: str
    state: str
    diff: list[str]
    """Unified diff of the approved definition's fields against the current ones (empty: not recorded)."""
    digest: str
    """Of the definition shown: what its Approve button approves, and nothing else (`approve`)."""


async def pending_pins(dispatcher: Dispatcher) -> tuple[bool, list[PinRow]]:
    """(whether any pin_definitions hook is configured, tools whose definition waits for approval)."""
    hooks = pin_hooks(dispatcher.hooks)
    registry = dispatcher.registry

    rows = []
    for name, descriptor in sorted(registry.tools.items()):
        executor = descriptor.executor
        if executor is None or executor.kind != "mcp":
            continue
        for hook in hooks:
            status = await hook.pins.status(executor.id, executor.tool, descriptor.current)
            if status.state == "changed" or (status.state == "new" and not hook.options.trust_new):
                rows.append(PinRow(name, executor.id, executor.tool, status.state, _diff(status),
                                   definition_hash(descriptor.current)))
                break
    return bool(hooks), rows


def _diff(status: PinStatus) -> list[str]:
    return pin_diff(status.approved, status.current)


async def approve(dispatcher: Dispatcher, tool: str, digest: str) -> str | None:
    """Approve the current definition of `tool` in every pin_definitions hook if it is the one the operator was
    shown (`digest`: the upstream may have changed it since the page was drawn); else why not."""
    hooks = pin_hooks(dispatcher.hooks)
    descriptor = dispatcher.registry.tools.get(tool)
    executor = descriptor.executor if descriptor is not None else None
    if not hooks or descriptor is None or executor is None or executor.kind != "mcp":
        return "no such tool, or no pin_definitions hook"
    if definition_hash(descriptor.current) != digest:
        return (f"the definition of {tool} changed since the page was shown; nothing was approved: review it "
                "again")

    for hook in hooks:
        await hook.pins.approve(executor.id, executor.tool, descriptor.current)
    dispatcher.invalidate()  # listed from now on as approved
    return None


MAX_REASON = 500
"""An approver's reason is cut to this many characters (it reaches the model as part of a tool error)."""


async def approvals(dispatcher: Dispatcher) -> list[JSONObject]:
    """The calls waiting for an approver, oldest first: who calls what, the redacted arguments, the annotations."""
    waiting, now = await dispatcher.approvals.pending(), time.time()
    return [{"id": w.id, "client": w.client, "tool": w.tool, "upstream": w.upstream, "summary": w.summary,
             "notes": w.notes, "rule": w.rule, "waiting": round(now - w.since)} for w in waiting]


async def answer(dispatcher: Dispatcher, approver: str, id: JSON, decision: JSON, reason: JSON) -> str | None:
    """Answer a waiting call for `approver`; None when done, else why not."""
    if not isinstance(id, str) or decision not in ("approve", "deny"):
        return "the form needs a call and a decision (approve or deny)"
    said = reason.strip()[:MAX_REASON] if isinstance(reason, str) else ""
    if not await dispatcher.approvals.answer(id, Answer(decision == "approve", approver, said)):
        return "that call is not waiting any more (answered, timed out, or its caller went away)"
    return None
