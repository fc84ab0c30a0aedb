"""What `triad plan`, `triad explain`, `triad search` and `triad approve` do: connect to every upstream (bounded by
their timeouts), build the registry, then print a report (`gateway.registry`'s, as the web console shows them) or
record approvals; nothing is served.
"""

from __future__ import annotations

import json
import re
import sys
from collections.abc import Iterable, Mapping

from consumers import JSON, JSONObject, SandboxConfig, describe_sandbox
from gateway.approval import ApprovalRules
from gateway.config import TriadConfig
from gateway.hooks import PinDefinitions
from gateway.registry import (
    MAX_LIMIT,
    MAX_QUERY_CHARS,
    ClientView,
    ToolDescriptor,
    explain,
    plan_report,
    upstream_states,
)
from gateway.runtime import running_gateway
from gateway.search import find
from gateway.state import PinStateUnreadable, SharedStateUnavailable, definition_hash, pin_diff
from policy import Identity

PLAN_MARGIN = 5.0
"""Extra seconds to wait beyond the slowest upstream timeout before reporting what is there."""


async def collect(config: TriadConfig, identity: Identity, tool: str | None = None,
                  host: str | None = None) -> JSONObject:
    """`host`: where `serve` would listen (default: the config's), so the remote deny list applies the same."""

    async with running_gateway(config, host) as gw:
        await gw.pool.wait_settled(PLAN_MARGIN)
        view = gw.dispatcher.view(identity)
        upstreams = upstream_states(gw.pool.upstreams)
        rules = gw.dispatcher.approval.rules(gw.dispatcher.config)
        if tool is not None:
            report = explain(view, tool, gw.dispatcher.pipeline.decide, upstreams)
            report["approval"] = approval_of(rules, view, tool)
            return report
        report = plan_report(view, upstreams, [d.message for d in gw.dispatcher.registry.diagnostics])
        for entry in report["visible"]:
            entry["approval"] = approval_of(rules, view, entry["name"])
        return report


def approval_of(rules: ApprovalRules, view: ClientView, name: str) -> JSON:
    """The `approval:` rule that applies to `name` for the view's client ({index, pattern, ask, timeout,
    remember}), or None: no rule asks about it, or the policy hides it (a hidden tool is never asked about)."""
    entry = view.tools.get(name)
    if entry is None or entry.executor.kind != "mcp" or not rules:
        return None
    match = rules.rule_for(name, entry.executor.id, entry.executor.tool, entry.descriptor.annotations)
    if match is None:
        return None
    return {"rule": match.index, "pattern": match.pattern, "ask": match.rule.ask, "timeout": match.rule.timeout,
            "remember": match.rule.remember, "describe": match.describe()}


DIGEST_SHOWN = 32
"""Hex digits of a definition's digest that `triad approve` shows and takes back (`TOOL@DIGEST`), no fewer: an
upstream that controls a definition can find two with the same 12 (a birthday search of 2^24 hashes, minutes on
one core, found by an outside attack); 128 bits leave it none."""
PENDING_EXIT = 3
"""`triad approve` without tool names: definitions wait for approval (shown as diffs; nothing was approved)."""


async def approve(config: TriadConfig, names: list[str], approve_all: bool = False) -> int:
    """Without `names` (nor `approve_all`): print each definition that waits for approval as a unified diff against
    the approved one, approve nothing, exit `PENDING_EXIT` if there is one. With `names`, or every tool with
    `approve_all`: pin their current definitions in each pin_definitions hook's approvals (with `cluster:`, the
    cluster's, seen at once by every replica, and the state file)."""
    if not any(spec.name == "pin_definitions" for spec in config.hooks):
        print("triad: no pin_definitions hook in this config; nothing to approve", file=sys.stderr)
        return 1
    async with running_gateway(config) as gw:
        await gw.pool.wait_settled(PLAN_MARGIN)
        hooks = [entry.hook for entry in gw.dispatcher.hooks.entries if isinstance(entry.hook, PinDefinitions)]
        tools = {name: d for name, d in gw.dispatcher.registry.tools.items()
                 if d.executor is not None and d.executor.kind == "mcp"}
        reviewed = {tool: digest for tool, at, digest in (name.partition("@") for name in names)
                    if at or tool}  # TOOL@DIGEST: approve what was reviewed
        unknown = [name for name in reviewed if name not in tools]
        if unknown:
            print(f"triad: unknown tool(s): {', '.join(unknown)}", file=sys.stderr)
            return 1
        short = [f"{tool}@{digest}" for tool, at, digest in (name.partition("@") for name in names)
                 if at and not re.fullmatch(f"[0-9a-f]{{{DIGEST_SHOWN},64}}", digest)]
        if short:
            print(f"triad: {', '.join(short)}: a digest is {DIGEST_SHOWN} to 64 hex digits, as `triad approve -c "
                  "FILE` shows it; nothing was approved", file=sys.stderr)
            return 1
        moved = [f"{name} (now @{definition_hash(tools[name].current)[:DIGEST_SHOWN]})"
                 for name, digest in reviewed.items()
                 if digest and not definition_hash(tools[name].current).startswith(digest)]
        if moved:  # the upstream changed it after it was shown: approving it now would approve unreviewed text
            print(f"triad: the definition of {', '.join(moved)} changed since the digest given; nothing was "
                  "approved. Review it again (`triad approve -c FILE`)", file=sys.stderr)
            return 1
        try:
            if not names and not approve_all:
                return await _show_pending(hooks, tools)
            for name in reviewed or sorted(tools):
                executor, current = tools[name].executor, tools[name].current
                assert executor is not None
                changed = [await hook.pins.approve(executor.id, executor.tool, current) for hook in hooks]
                print(f"{name}: {'approved' if any(changed) else 'already approved'} "
                      f"(@{definition_hash(current)[:DIGEST_SHOWN]})")
        except PinStateUnreadable as exc:  # never written over: the operator decides what it held
            print(f"triad: cannot approve: {exc}", file=sys.stderr)
            return 1
        except SharedStateUnavailable:
            print("triad: cannot approve: the cluster's approvals are in Redis, which is unreachable",
                  file=sys.stderr)
            return 1
    return 0


async def _show_pending(hooks: list[PinDefinitions], tools: Mapping[str, ToolDescriptor]) -> int:
    pending = 0
    for name, descriptor in sorted(tools.items()):
        executor = descriptor.executor
        assert executor is not None
        for hook in hooks:
            status = await hook.pins.status(executor.id, executor.tool, descriptor.current)
            if status.state == "approved" or (status.state == "new" and hook.options.trust_new):
                continue  # a new tool under trust_new is pinned when a client is first shown it
            pending += 1
            what = "changed since it was approved" if status.state == "changed" else "not approved yet"
            print(f"{name} ({executor.id}:{executor.tool}): {what}; approve this one with "
                  f"{name}@{definition_hash(descriptor.current)[:DIGEST_SHOWN]}")
            diff = pin_diff(status.approved if status.state == "changed" else {}, status.current)
            print("\n".join(f"  {line}" for line in diff) if diff or status.state == "new"
                  else "  (the approved definition was not kept, only its hash)")
            break
    if not pending:
        print("nothing waits for approval")
        return 0
    print(f"triad: {pending} tool(s) wait for approval; nothing was approved. Approve what you reviewed by "
          "name@digest as shown (`triad approve -c FILE TOOL@DIGEST ...`: refused if it changed since), by name, "
          "or all at once with --all", file=sys.stderr)
    return PENDING_EXIT


def format_plan(report: JSONObject) -> str:
    lines = [f"client {report['client']} (registry version {report['registry_version']})", "", "upstreams:"]
    width = _column(report["upstreams"], 24)
    for name, up in report["upstreams"].items():
        reason = f"  ({up['reason']})" if up["reason"] else ""
        lines.append(f"  {name:<{width}} {up['state']:<9} {up['transport']}{reason}")
        if up.get("sandbox"):
            lines.append(f"    {describe_sandbox(SandboxConfig.model_validate(up['sandbox']))}")
        if up.get("stderr"):
            lines.append(f"    last lines of its stderr{' (' + up['exit'] + ')' if up.get('exit') else ''}:")
            lines += [f"    | {line}" for line in up["stderr"]]
    width = _column([t["name"] for t in (*report["visible"], *report["hidden"])], 40)
    lines += ["", f"visible tools ({len(report['visible'])}):"]
    lines += [f"  {t['name']:<{width}} {t['upstream']}:{t['tool']}"
              + (f"  [approval: {t['approval']['describe']}]" if t.get("approval") else "") for t in report["visible"]]
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


def format_explain(report: JSONObject) -> str:
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
    if report["visible"]:
        approval = report.get("approval")
        lines.append(f"approval: {approval['describe']}" if approval else "approval: none (no approval rule asks "
                     "about it)")
    return "\n".join(lines)


async def print_search(config: TriadConfig, identity: Identity, query: str, limit: int, as_json: bool,
                       host: str | None) -> int:
    """`triad search`: connect, then print what `identity`'s search for `query` finds (whatever its tools mode),
    with scores. Exit 0 with matches, 1 with none or bad input."""
    if not 1 <= limit <= MAX_LIMIT or len(query) > MAX_QUERY_CHARS or not query.strip():
        print(f"triad: search needs a query of at most {MAX_QUERY_CHARS} characters and --limit from 1 to "
              f"{MAX_LIMIT}", file=sys.stderr)
        return 1
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
