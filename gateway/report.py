"""What `triad plan` and `triad explain` print: a client's view, and one tool's decision layer by layer.

Both connect to every upstream (bounded by their timeouts), build the registry, and report; nothing is served.
The web console shows the same reports of the running daemon (`plan_report`, `explain`, `upstream_states`); so
that it can import them, the daemon is imported where a report starts one, not at the top.
"""

from __future__ import annotations

import difflib
import json
import sys
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from gateway.availability import Diagnostic
from gateway.catalog import upstream_of_key
from gateway.config import TriadConfig
from gateway.search_tools import MAX_LIMIT, MAX_QUERY_CHARS, find
from gateway.views import ClientView, tool_facts
from policy import LAYER_NAMES, Decision, Identity

if TYPE_CHECKING:
    from consumers import Upstream

PLAN_MARGIN = 5.0
"""Extra seconds to wait beyond the slowest upstream timeout before reporting what is there."""


async def collect(config: TriadConfig, identity: Identity, tool: str | None = None,
                  host: str | None = None) -> dict[str, Any]:
    """`host`: where `serve` would listen (default: the config's), so the remote deny list applies the same."""
    from gateway.daemon import running_gateway


    async with running_gateway(config, host) as gw:
        await gw.pool.wait_settled(PLAN_MARGIN)
        view = gw.dispatcher.view(identity)
        upstreams = upstream_states(gw.pool.upstreams)
        if tool is not None:
            return explain(view, tool, gw.dispatcher.pipeline.decide, upstreams)
        return plan_report(view, upstreams, [d.message for d in gw.dispatcher.registry.diagnostics])


async def approve(config: TriadConfig, names: list[str]) -> int:
    """Pin the current definitions of `names` (or of every tool) in each pin_definitions hook's state file."""
    from gateway.daemon import running_gateway
    from gateway.pinning import PinStore
    from gateway.shared import FilePins, Pins, SharedStateUnavailable

    states = [str(spec.options.get("state", "triad-pins.json")) for spec in config.hooks
              if spec.name == "pin_definitions"]
    if not states:
        print("triad: no pin_definitions hook in this config; nothing to approve", file=sys.stderr)
        return 1
    async with running_gateway(config) as gw:
        # with `cluster:`, approvals are the cluster's (in Redis), seen at once by every replica
        stores: list[Pins] = [gw.cluster.pins(state) if gw.cluster is not None else FilePins(PinStore(Path(state)))
                              for state in states]
        await gw.pool.wait_settled(PLAN_MARGIN)
        tools = gw.dispatcher.registry.tools
        unknown = [name for name in names if name not in tools]
        if unknown:
            print(f"triad: unknown tool(s): {', '.join(unknown)}", file=sys.stderr)
            return 1
        for name in names or sorted(tools):
            descriptor = tools[name]
            if descriptor.executor is None or descriptor.executor.kind != "mcp":
                continue
            try:
                changed = [await store.approve(descriptor.executor.id, descriptor.executor.tool, descriptor.wire)
                           for store in stores]
            except SharedStateUnavailable:
                print("triad: cannot approve: the cluster's approvals are in Redis, which is unreachable",
                      file=sys.stderr)
                return 1
            print(f"{name}: {'approved' if any(changed) else 'already approved'}")
    return 0


def upstream_states(upstreams: Mapping[str, Upstream]) -> dict[str, Any]:
    """Each upstream's state, reason and transport; for a stdio child that is down, its exit and last stderr lines."""
    return {name: {"state": up.state.value, "reason": up.reason, "transport": up.config.kind,
                   **({"exit": up.child.ended_exit, "stderr": up.child.ended_lines}
                      if up.config.kind == "stdio" and up.state.value == "down" else {})}
            for name, up in upstreams.items()}


def plan_report(view: ClientView, upstreams: dict[str, Any], registry_notes: list[str]) -> dict[str, Any]:
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


def explain(view: ClientView, name: str, decide: Any, upstreams: dict[str, Any]) -> dict[str, Any]:
    descriptor = view.tools[name].descriptor if name in view.tools else None
    availability: list[dict[str, Any]] = []
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


def _upstream_reasons(diagnostics: Sequence[Diagnostic], upstreams: dict[str, Any]) -> list[dict[str, Any]]:
    """Name the upstream and its failure when a tool is hidden because its upstream is not serving (one line per
    upstream, though its availability expression fails once per serving state)."""
    out: list[dict[str, Any]] = []
    for diagnostic in (d.as_dict() for d in diagnostics):
        upstream = upstream_of_key((diagnostic.get("signal") or {}).get("key", ""))
        if upstream is not None:
            state = upstreams.get(upstream, {})
            reason = f": {state['reason']}" if state.get("reason") else ""
            message = f"upstream {upstream!r} is {state.get('state', 'unknown')}{reason}"
            diagnostic = {**diagnostic, "message": message}
        if all(d["message"] != diagnostic["message"] for d in out):
            out.append(diagnostic)
    return out


def _policy_reason(decision: Decision) -> dict[str, Any]:
    step = decision.denied_by
    assert step is not None
    return {"reason": "policy-denied", "layer": step.layer, "pattern": step.pattern, "message": step.describe()}


def format_plan(report: dict[str, Any]) -> str:
    lines = [f"client {report['client']} (registry version {report['registry_version']})", "", "upstreams:"]
    width = _column(report["upstreams"], 24)
    for name, up in report["upstreams"].items():
        reason = f"  ({up['reason']})" if up["reason"] else ""
        lines.append(f"  {name:<{width}} {up['state']:<9} {up['transport']}{reason}")
        if up.get("stderr"):
            lines.append(f"    last lines of its stderr{' (' + up['exit'] + ')' if up.get('exit') else ''}:")
            lines += [f"    | {line}" for line in up["stderr"]]
    width = _column([t["name"] for t in (*report["visible"], *report["hidden"])], 40)
    lines += ["", f"visible tools ({len(report['visible'])}):"]
    lines += [f"  {t['name']:<{width}} {t['upstream']}:{t['tool']}" for t in report["visible"]]
    lines += ["", f"hidden tools ({len(report['hidden'])}):"]
    for hidden in report["hidden"]:
        reasons = "; ".join(f"{d['reason']}: {d['message']}" for d in hidden["diagnostics"])
        lines.append(f"  {hidden['name']:<{width}} {reasons}")
    if report["registry_diagnostics"]:
        lines += ["", "registry:"] + [f"  {m}" for m in report["registry_diagnostics"]]
    return "\n".join(lines)


def _column(names: Iterable[str], minimum: int) -> int:
    """The width of a name column: the longest name, so that the next column starts at one place."""
    return max([minimum, *(len(name) for name in names)])


def format_explain(report: dict[str, Any]) -> str:
    where = f" (upstream {report['upstream']}, raw name {report['raw']})" if report["upstream"] else ""
    lines = [f"tool {report['tool']}{where} for client {report['client']}"]
    if not report["known"]:
        lines.append("  not in the registry: no upstream offers this name (is its upstream down? see `triad plan`)")
        if report["suggestions"]:
            lines.append(f"  did you mean: {', '.join(report['suggestions'])}")
    for diagnostic in report["availability"]:
        lines.append(f"  availability: {diagnostic['reason']}: {diagnostic['message']}")
    for layer in report["layers"]:
        mark = "pass" if layer["allowed"] else "DENY"
        source = f" [{layer['source']}]" if layer["source"] else ""
        lines.append(f"  {mark}  layer {layer['layer']} {layer['name']}{source}: {layer['detail']}")
    lines.append(f"decision: {'visible' if report['visible'] else 'hidden'}")
    return "\n".join(lines)


async def print_search(config: TriadConfig, identity: Identity, query: str, limit: int, as_json: bool,
                       host: str | None) -> int:
    """`triad search`: connect, then print what `identity`'s search for `query` finds (whatever its tools mode),
    with scores. Exit 0 with matches, 1 with none or bad input."""
    if not 1 <= limit <= MAX_LIMIT or len(query) > MAX_QUERY_CHARS or not query.strip():
        print(f"triad: search needs a query of at most {MAX_QUERY_CHARS} characters and --limit from 1 to "
              f"{MAX_LIMIT}", file=sys.stderr)
        return 1
    from gateway.daemon import running_gateway  # the daemon imports this module (the console)

    async with running_gateway(config, host) as gw:
        await gw.pool.wait_settled(PLAN_MARGIN)
        view = gw.dispatcher.view(identity)
        found = await find(gw.dispatcher.search, view, query, limit)
        rows = [{"name": name, "score": round(score, 4), "description": view.tools[name].descriptor.description}
                for name, score in found]
    if as_json:
        print(json.dumps({"client": identity.client_id, "registry_version": view.version, "query": query,
                          "visible": len(view.tools), "results": rows}, indent=2))
    else:
        print(f"client {identity.client_id}: {len(rows)} of {len(view.tools)} visible tools match {query!r}")
        for name, score in found:
            summary = " ".join(view.tools[name].descriptor.description.split())
            print(f"  {score:8.3f}  {name}  {summary[:80] + '...' if len(summary) > 80 else summary}")
    return 0 if rows else 1
