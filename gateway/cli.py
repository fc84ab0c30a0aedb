"""The `triad` command line: serve, stdio, check, plan. Each verb exits non-zero with a clear message on bad input."""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence
from typing import Any

import anyio

from gateway.config import TriadConfig, load_config
from gateway.errors import ConfigError, ToolPlanContractError
from gateway.identity import identity_for

PLAN_MARGIN = 5.0
"""Extra seconds `triad plan` waits beyond the slowest upstream timeout before reporting what it has."""


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="triad", description="An MCP gateway: consume, expose, route.")
    verbs = parser.add_subparsers(dest="verb", required=True, metavar="VERB")

    serve = verbs.add_parser("serve", help="run the daemon over streamable HTTP (/mcp) and legacy SSE (/sse)")
    _config_arg(serve)
    serve.add_argument("--host", help="listen address (default: listen.host from the config)")
    serve.add_argument("--port", type=int, help="listen port (default: listen.port; 0 picks a free port)")
    serve.add_argument("--log-level", default="INFO", help="DEBUG, INFO, WARNING or ERROR")

    stdio = verbs.add_parser("stdio", help="serve one client over stdin/stdout (what Claude Desktop launches)")
    _config_arg(stdio)
    stdio.add_argument("--client", help="the configured client to act as (default: local, an owner)")
    stdio.add_argument("--log-level", default="WARNING", help="DEBUG, INFO, WARNING or ERROR (logs go to stderr)")

    check = verbs.add_parser("check", help="validate the config without connecting anything")
    _config_arg(check)

    plan = verbs.add_parser("plan", help="connect, then print visible and hidden tools with diagnostics")
    _config_arg(plan)
    plan.add_argument("--client", help="show this client's view (default: local)")
    plan.add_argument("--json", action="store_true", help="print JSON instead of text")

    args = parser.parse_args(argv)
    try:
        config = load_config(args.config)
    except ConfigError as exc:
        print(f"triad: {args.config}: {len(exc.problems)} problem(s)", file=sys.stderr)
        for problem in exc.problems:
            print(f"  {problem}", file=sys.stderr)
        return 1
    if args.verb == "check":
        print(f"{args.config}: valid ({len(config.upstreams)} upstream(s), {len(config.clients)} client(s))")
        return 0
    from gateway import daemon  # imported late: `check` must not pay for uvicorn and the SDK server

    if args.verb == "serve":
        daemon.configure_logging(args.log_level)
        host = args.host or config.listen.host
        port = config.listen.port if args.port is None else args.port
        anyio.run(daemon.serve_http, config, host, port)
        return 0
    try:
        identity = identity_for(config, args.client)
    except KeyError:
        print(f"triad: unknown client {args.client!r} (clients: {', '.join(config.clients) or 'none'})",
              file=sys.stderr)
        return 2
    if args.verb == "stdio":
        daemon.configure_logging(args.log_level)
        anyio.run(daemon.serve_stdio_client, config, identity)
        return 0
    daemon.configure_logging("ERROR")
    try:
        report = anyio.run(_plan, config, identity)
    except ToolPlanContractError as exc:
        print(f"triad: {exc.contract_code}: {exc.message}", file=sys.stderr)
        return 1
    print(json.dumps(report, indent=2) if args.json else _format_plan(report))
    return 0


def _config_arg(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("-c", "--config", required=True, help="the Triad YAML config file")


async def _plan(config: TriadConfig, identity: Any) -> dict[str, Any]:
    from consumers import wait_settled_or_timeout
    from gateway.daemon import running_gateway

    async with running_gateway(config) as gw:
        longest = max((up.timeout for up in config.enabled_upstreams().values()), default=0.0)
        await wait_settled_or_timeout(gw.pool, longest + PLAN_MARGIN)
        view = gw.dispatcher.view(identity)
        upstreams = {name: {"state": up.state.value, "reason": up.reason, "transport": up.config.kind}
                     for name, up in gw.pool.upstreams.items()}
        return {
            "client": identity.client_id,
            "registry_version": view.version,
            "upstreams": upstreams,
            "visible": [{"name": e.descriptor.name, "upstream": e.executor.id, "tool": e.executor.tool}
                        for e in view.plan.visible],
            "hidden": [{"name": h.descriptor.name, "owner": str(h.descriptor.owner),
                        "diagnostics": [_explain(d.as_dict(), upstreams) for d in h.diagnostics]}
                       for h in view.plan.hidden],
            "registry_diagnostics": [d.message for d in gw.dispatcher.registry.diagnostics],
        }


def _explain(diagnostic: dict[str, Any], upstreams: dict[str, dict[str, Any]]) -> dict[str, Any]:
    """Name the upstream and its failure when a tool is hidden because its upstream is not ready."""
    key = (diagnostic.get("signal") or {}).get("key", "")
    if key.startswith("upstream:"):
        name = key.removeprefix("upstream:")
        state = upstreams.get(name, {})
        reason = f": {state['reason']}" if state.get("reason") else ""
        diagnostic = {**diagnostic, "message": f"upstream {name!r} is {state.get('state', 'unknown')}{reason}"}
    return diagnostic


def _format_plan(report: dict[str, Any]) -> str:
    lines = [f"client {report['client']} (registry version {report['registry_version']})", "", "upstreams:"]
    for name, up in report["upstreams"].items():
        reason = f"  ({up['reason']})" if up["reason"] else ""
        lines.append(f"  {name:<24} {up['state']:<9} {up['transport']}{reason}")
    lines += ["", f"visible tools ({len(report['visible'])}):"]
    lines += [f"  {t['name']:<40} {t['upstream']}:{t['tool']}" for t in report["visible"]]
    lines += ["", f"hidden tools ({len(report['hidden'])}):"]
    for hidden in report["hidden"]:
        reasons = "; ".join(f"{d['reason']}: {d['message']}" for d in hidden["diagnostics"])
        lines.append(f"  {hidden['name']:<40} {reasons}")
    if report["registry_diagnostics"]:
        lines += ["", "registry:"] + [f"  {m}" for m in report["registry_diagnostics"]]
    return "\n".join(lines)


if __name__ == "__main__":
    raise SystemExit(main())
