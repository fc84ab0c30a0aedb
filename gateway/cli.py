"""The `triad` command line: serve, stdio, check, plan, explain, search, approve, import. Bad input: a clear
error, exit 1."""

from __future__ import annotations

import argparse
import json
import os
import sys
from collections.abc import Sequence
from typing import Any

import anyio

from gateway.config import TriadConfig, load_config
from gateway.errors import ConfigError, ToolPlanContractError
from gateway.identity import identity_for


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="triad", description="An MCP gateway: consume, expose, route.")
    verbs = parser.add_subparsers(dest="verb", required=True, metavar="VERB")

    serve = verbs.add_parser("serve", help="run the daemon over streamable HTTP (/mcp) and legacy SSE (/sse)")
    _config_arg(serve)
    _host_arg(serve)
    serve.add_argument("--port", type=int, help="listen port (default: listen.port; 0 picks a free port)")
    serve.add_argument("--log-level", default="INFO", help="DEBUG, INFO, WARNING or ERROR")
    serve.add_argument("--log-format", choices=["text", "json"], default="text", help="log lines as text or JSON")

    stdio = verbs.add_parser("stdio", help="serve one client over stdin/stdout (what Claude Desktop launches)")
    _config_arg(stdio)
    stdio.add_argument("--client", help="the configured client to act as (default: local, an owner)")
    stdio.add_argument("--log-level", default="WARNING", help="DEBUG, INFO, WARNING or ERROR (logs go to stderr)")
    stdio.add_argument("--log-format", choices=["text", "json"], default="text", help="log lines as text or JSON")

    check = verbs.add_parser("check", help="validate the config without connecting anything")
    _config_arg(check)

    plan = verbs.add_parser("plan", help="connect, then print visible and hidden tools with diagnostics")
    _config_arg(plan)
    plan.add_argument("--client", help="show this client's view (default: local)")
    plan.add_argument("--json", action="store_true", help="print JSON instead of text")
    _host_arg(plan)

    explain = verbs.add_parser("explain", help="the policy decision for one tool, layer by layer (exit 1: hidden)")
    _config_arg(explain)
    explain.add_argument("--client", required=True, help="the configured client (or local)")
    explain.add_argument("tool", help="the exposed tool name")
    explain.add_argument("--json", action="store_true", help="print JSON instead of text")
    _host_arg(explain)

    search = verbs.add_parser("search", help="connect, then print the tools a client's search would find, with scores")
    _config_arg(search)
    search.add_argument("--client", help="search among this client's tools (default: local)")
    search.add_argument("--limit", type=int, default=10, help="how many tools to print (default: 10, at most 50)")
    search.add_argument("--json", action="store_true", help="print JSON instead of text")
    search.add_argument("query", nargs="+", help="what the client wants to do, in words")
    _host_arg(search)

    approve = verbs.add_parser("approve", help="approve the current definitions of tools pinned by pin_definitions")
    _config_arg(approve)
    approve.add_argument("tools", nargs="*", help="exposed tool names (default: every tool)")

    importer = verbs.add_parser("import", help="convert a Claude Desktop, Cursor or VS Code MCP file to Triad YAML")
    importer.add_argument("file", help="claude_desktop_config.json, .cursor/mcp.json, .vscode/mcp.json...")

    args = parser.parse_args(argv)
    if args.verb == "import":
        return _import(args.file)
    try:
        config = load_config(args.config)
    except ConfigError as exc:
        print(f"triad: {args.config}: {len(exc.problems)} problem(s)", file=sys.stderr)
        for problem in exc.problems:
            print(f"  {problem}", file=sys.stderr)
        return 1
    if args.verb == "check":
        for warning in policy_warnings(config):
            print(f"warning: {warning}", file=sys.stderr)
        print(f"{args.config}: valid ({len(config.upstreams)} upstream(s), {len(config.clients)} client(s))")
        return 0
    from gateway import daemon  # imported late: `check` must not pay for uvicorn and the SDK server
    from gateway.hooks import HookConfigError

    try:
        return _run_verb(args, config, daemon)
    except HookConfigError as exc:
        print(f"triad: {args.config}: {config.hide_values(f'hooks: {exc}')}", file=sys.stderr)
        return 1


def _run_verb(args: argparse.Namespace, config: TriadConfig, daemon: Any) -> int:
    from gateway.tracing import configure_tracing

    if args.verb == "serve":
        daemon.configure_logging(args.log_level, args.log_format)
        configure_tracing()
        host = args.host or config.listen.host
        port = config.listen.port if args.port is None else args.port
        anyio.run(daemon.serve_http, config, host, port)
        return 0
    try:
        identity = identity_for(config, getattr(args, "client", None))
    except KeyError:
        print(f"triad: unknown client {args.client!r} (clients: {', '.join(config.clients) or 'none'})",
              file=sys.stderr)
        return 2
    if args.verb == "stdio":
        daemon.configure_logging(args.log_level, args.log_format)
        if os.environ.get("OTEL_TRACES_EXPORTER", "").strip().lower() == "console":
            print("triad: OTEL_TRACES_EXPORTER=console would write on stdout, which carries the protocol over stdio",
                  file=sys.stderr)
            return 2
        configure_tracing()
        anyio.run(daemon.serve_stdio_client, config, identity)
        return 0
    from gateway import report as reports

    daemon.configure_logging("ERROR")
    if args.verb == "approve":
        return anyio.run(reports.approve, config, args.tools)
    if args.verb == "search":
        from gateway.search_tools import print_search

        return anyio.run(print_search, config, identity, " ".join(args.query), args.limit, args.json, args.host)
    tool = args.tool if args.verb == "explain" else None
    try:
        report = anyio.run(reports.collect, config, identity, tool, args.host)
    except ToolPlanContractError as exc:
        print(f"triad: {exc.contract_code}: {exc.message}", file=sys.stderr)
        return 1
    if args.json:
        print(json.dumps(report, indent=2))
    else:
        print(reports.format_explain(report) if tool is not None else reports.format_plan(report))
    return 0 if tool is None or report["visible"] else 1


def policy_warnings(config: TriadConfig) -> list[str]:
    from gateway.naming import prefix_active, sanitize_server_names
    from policy.lint import spanning_patterns, unknown_patterns

    upstreams = config.enabled_upstreams()
    prefixed = prefix_active(config.naming, len(upstreams))
    client_rules = {cid: c.tools for cid, c in config.clients.items()}
    parts = sanitize_server_names(list(upstreams))
    separator = config.naming.separator if prefixed else None
    return [*unknown_patterns(config.policy, client_rules, parts, separator),
            *spanning_patterns(config.policy, client_rules, parts, separator)]


def _import(path: str) -> int:
    from gateway.importer import ImportFailed, convert

    try:
        with open(path, encoding="utf-8") as stream:
            print(convert(stream.read()), end="")
    except OSError as exc:
        print(f"triad: {path}: cannot read ({exc.strerror})", file=sys.stderr)
        return 1
    except ImportFailed as exc:
        print(f"triad: {path}: {exc}", file=sys.stderr)
        return 1
    return 0


def _host_arg(parser: argparse.ArgumentParser) -> None:
    """serve's listen address; plan and explain take it too, since policy depends on it (off loopback, the
    built-in remote deny list applies)."""
    parser.add_argument("--host", help="listen address (default: listen.host from the config)")


def _config_arg(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("-c", "--config", required=True, help="the Triad YAML config file")


if __name__ == "__main__":
    raise SystemExit(main())
