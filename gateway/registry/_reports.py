"""The reports of `triad plan`, `triad explain` and the web console: a client's view, one tool's decision layer by
layer. Pure functions of a view, the upstreams' states and the policy; the CLI connects and prints them
(`gateway.cli`), the console shows them of the running daemon.
"""

from __future__ import annotations

import difflib
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING

from consumers import JSONObject
from gateway.registry._availability import Diagnostic
from gateway.registry._catalog import upstream_of_key
from gateway.registry._pinning import pin_diagnostic
from gateway.registry._views import ClientView, tool_facts
from policy import LAYER_NAMES, Decision, Identity, ToolFacts

if TYPE_CHECKING:
    from consumers import Upstream


def upstream_states(upstreams: Mapping[str, Upstream]) -> JSONObject:
    """Each upstream's state, reason, transport and sandbox (what its child may reach); for a stdio child that is
    down, its exit and last stderr lines."""
    return {name: {"state": up.state.value, "reason": up.reason, "transport": up.config.kind,
                   **({"sandbox": sandbox.describe()} if (sandbox := up.config.sandboxed) is not None else {}),
                   **({"exit": up.child.ended_exit, "stderr": up.child.ended_lines}
                      if up.config.kind == "stdio" and up.state.value == "down" else {})}
            for name, up in upstreams.items()}


def plan_report(view: ClientView, upstreams: JSONObject, registry_notes: list[str]) -> JSONObject:
    hidden = [{"name": h.descriptor.name, "owner": str(h.descriptor.owner),
               "diagnostics": _upstream_reasons(h.diagnostics, upstreams)} for h in view.plan.hidden]
    hidden += [{"name": d.name, "owner": str(d.owner), "diagnostics": [_policy_reason(decision)]}
               for d, decision in view.denied]
    return {
        "client": view.identity.client_id,
        "registry_version": view.version,
        "upstreams": upstreams,
        "visible": [{"name": e.descriptor.name, "upstream": e.executor.id, "tool": e.executor.tool}
                    for e in view.tools.values()],
        "hidden": sorted(hidden, key=lambda h: h["name"].casefold()),
        "registry_diagnostics": registry_notes,
    }


def explain(view: ClientView, name: str, decide: Callable[[Identity, ToolFacts], Decision],
            upstreams: JSONObject) -> JSONObject:
    descriptor = view.tools[name].descriptor if name in view.tools else None
    availability: list[JSONObject] = []
    for hidden in view.plan.hidden:
        if hidden.descriptor.name == name:
            descriptor = hidden.descriptor
            availability = _upstream_reasons(hidden.diagnostics, upstreams)
    for denied, _decision in view.denied:
        if denied.name == name:
            descriptor = denied
    if descriptor is None:  # no layer has anything to say of a name nobody offers
        known = [*view.tools, *(h.descriptor.name for h in view.plan.hidden), *(d.name for d, _ in view.denied)]
        return {"client": view.identity.client_id, "tool": name, "known": False, "upstream": None, "raw": None,
                "availability": [], "layers": [], "visible": False,
                "suggestions": difflib.get_close_matches(name, known, n=3, cutoff=0.6)}
    facts = tool_facts(descriptor)
    decision: Decision = decide(view.identity, facts)
    visible = not availability and decision.allowed
    applied = {step.layer for step in decision.steps}
    layers = [{"layer": s.layer, "name": LAYER_NAMES[s.layer], "source": s.source, "allowed": s.allowed,
               "pattern": s.pattern, "detail": s.detail} for s in decision.steps]
    layers += [{"layer": n, "name": LAYER_NAMES[n], "source": None, "allowed": True, "pattern": None,
                "detail": "no rule applies to this client"} for n in LAYER_NAMES if n not in applied]
    return {
        "client": view.identity.client_id,
        "tool": name,
        "known": True,
        "upstream": facts.upstream or None,
        "raw": facts.raw or None,
        "availability": availability,
        "layers": sorted(layers, key=lambda layer: layer["layer"]),
        "visible": visible,
    }


def _upstream_reasons(diagnostics: Sequence[Diagnostic], upstreams: JSONObject) -> list[JSONObject]:
    """Name the upstream and its failure when a tool is hidden because its upstream is not serving (one line per
    upstream, though its availability expression fails once per serving state), and why `pin_definitions`
    withholds a tool."""
    out: list[JSONObject] = []
    for diagnostic in (d.as_dict() for d in diagnostics):
        if (pinned := pin_diagnostic(diagnostic.get("signal") or {})) is not None:
            diagnostic = {**diagnostic, **pinned}
        upstream = upstream_of_key((diagnostic.get("signal") or {}).get("key", ""))
        if upstream is not None:
            state = upstreams.get(upstream, {})
            reason = f": {state['reason']}" if state.get("reason") else ""
            message = f"upstream {upstream!r} is {state.get('state', 'unknown')}{reason}"
            diagnostic = {**diagnostic, "message": message}
        if all(d["message"] != diagnostic["message"] for d in out):
            out.append(diagnostic)
    return out


def _policy_reason(decision: Decision) -> JSONObject:
    step = decision.denied_by
    assert step is not None
    return {"reason": "policy-denied", "layer": step.layer, "pattern": step.pattern, "message": step.describe()}
