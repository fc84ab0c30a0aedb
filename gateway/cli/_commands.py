"""The `triad` command line: serve, stdio, check, plan, explain, search, approve, login, import, init. Bad input: a
clear error, exit 1."""

from __future__ import annotations

import argparse
import json
import os
import sys
from collections.abc import Sequence
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path

import anyio

from consumers import LoginError, UserAuthorization, describe_failure, login, sandbox_problems
from consumers.errors import UpstreamError
from gateway.cli import _reports as reports
from gateway.cli._importer import FORMATS, ImportFailed, convert
from gateway.config import TriadConfig, format_problem
from gateway.errors import ConfigError, ToolPlanContractError
from gateway.hooks import HookConfigError
from gateway.identity import LOCAL_CLIENT, credential_owner, identity_for
from gateway.observe import configure_tracing
from gateway.registry import prefix_active, sanitize_server_names
from gateway.runtime import configure_logging, load_config, run_http, serve_stdio_client
from gateway.starter import DEFAULT_PATH, write_starter
from policy.lint import regex_patterns, spanning_patterns, unknown_patterns

LOG_LEVELS = ("DEBUG", "INFO", "WARNING", "ERROR")


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="triad", description="An MCP gateway: consume, expose, route.")
    parser.add_argument("--version", action="version", version=f"triad {_version()}")
    verbs = parser.add_subparsers(dest="verb", required=True, metavar="VERB")

    serve = verbs.add_parser("serve", help="run the daemon over streamable HTTP (/mcp) and legacy SSE (/sse)")
    _config_arg(serve)
    _host_arg(serve)
    serve.add_argument("--port", type=int, help="listen port (default: listen.port; 0 picks a free port)")
    _log_args(serve, "INFO")

    stdio = verbs.add_parser("stdio", help="serve one client over stdin/stdout (what Claude Desktop launches)")
    _config_arg(stdio)
    _client_arg(stdio)
    _log_args(stdio, "WARNING")

    check = verbs.add_parser("check", help="validate the config without connecting anything")
    _config_arg(check)

    plan = verbs.add_parser("plan", help="connect, then print visible and hidden tools with diagnostics")
    _config_arg(plan)
    _client_arg(plan)
    plan.add_argument("--json", action="store_true", help="print JSON instead of text")
    _host_arg(plan)
    _log_args(plan, "ERROR", formats=False)

    explain = verbs.add_parser("explain", help="the policy decision for one tool, layer by layer (exit 1: hidden)")
    _config_arg(explain)
    _client_arg(explain)
    explain.add_argument("tool", help="the exposed tool name")
    explain.add_argument("--json", action="store_true", help="print JSON instead of text")
    _host_arg(explain)
    _log_args(explain, "ERROR", formats=False)

    search = verbs.add_parser("search", help="connect, then print the tools a client's search would find, with scores")
    _config_arg(search)
    search.add_argument("--client", help="search among this client's tools (default: local)")
    search.add_argument("--limit", type=int, default=10, help="how many tools to print (default: 10, at most 50)")
    search.add_argument("--json", action="store_true", help="print JSON instead of text")
    search.add_argument("query", nargs="+", help="what the client wants to do, in words")
    _host_arg(search)

    approve = verbs.add_parser("approve", help="approve the current definitions of tools pinned by pin_definitions")
    _config_arg(approve)
    approve.add_argument("tools", nargs="*", help="exposed tool names (none: show what waits for approval as diffs, "
                                                  "approve nothing, exit 3 if something does)")
    approve.add_argument("--all", dest="approve_all", action="store_true",
                         help="approve the current definition of every tool")

    login = verbs.add_parser("login", help="authorize Triad at an OAuth-protected upstream once: prints the URL to "
                                           "open, waits for the redirect, keeps the tokens in the state directory")
    _config_arg(login)
    login.add_argument("upstream", help="the upstream's name (it has an auth block)")
    login.add_argument("--client", help="with auth mode per_user: log in for this configured client (its own "
                                        "upstream identity) instead of for Triad")

    importer = verbs.add_parser("import", help="convert an MCP client's server list (Claude Desktop, Claude Code, "
                                               "Cursor, VS Code, Windsurf, Gemini CLI, Cline, Zed) to Triad YAML")
    importer.add_argument("file", help="claude_desktop_config.json, .cursor/mcp.json, .vscode/mcp.json, "
                                       "~/.claude.json, .gemini/settings.json, Zed's settings.json...")
    importer.add_argument("--from", dest="source_format", choices=sorted(FORMATS),
                          help="the client that wrote the file (default: told by its keys and its path)")
    importer.add_argument("--force", action="store_true",
                          help="write the YAML even when some settings could not be converted (they are listed)")

    init = verbs.add_parser("init", help="write a starter config (the example config: a demo upstream, "
                                         "server-everything through npx)")
    init.add_argument("path", nargs="?", default=DEFAULT_PATH, help=f"where to write it (default: {DEFAULT_PATH})")
    init.add_argument("--force", action="store_true", help="overwrite the file if it exists")

    args = parser.parse_args(argv)
    if args.verb == "import":
        return _import(args.file, args.source_format, args.force)
    if args.verb == "init":
        return _init(Path(args.path), args.force)
    try:
        config = load_config(args.config)
    except ConfigError as exc:
        print(f"triad: {args.config}: {len(exc.problems)} problem(s)", file=sys.stderr)
        for problem in exc.problems:
            print(f"  {problem}", file=sys.stderr)
        return 1
    if args.verb == "check":
        if (open_listener := config.unauthenticated_off_loopback(config.listen.host)) is not None:
            if not config.listen.allow_unauthenticated:
                line = config.line_of(("listen", "host"))
                print(f"triad: {args.config}: listen.host: {open_listener}" + (f" (line {line})" if line else ""),
                      file=sys.stderr)
                return 1
            print(f"warning: listen.host: {open_listener}", file=sys.stderr)
        for warning in policy_warnings(config):
            print(f"warning: {args.config}: {warning}", file=sys.stderr)
        if found := _sandbox_problems(config):
            print(f"triad: {args.config}: {len(found)} problem(s)", file=sys.stderr)
            for problem in found:
                print(f"  {problem}", file=sys.stderr)
            return 1
        print(f"{args.config}: valid ({len(config.upstreams)} upstream(s), {len(config.clients)} client(s))")
        return 0
    if args.verb == "login":
        return _login(config, args.upstream, args.client)
    try:
        return _run_verb(args, config)
    except HookConfigError as exc:
        print(f"triad: {args.config}: {config.hide_values(f'hooks: {exc}')}", file=sys.stderr)
        return 1


def _run_verb(args: argparse.Namespace, config: TriadConfig) -> int:
    if args.verb == "serve":
        configure_logging(args.log_level, args.log_format)
        configure_tracing()
        host = args.host or config.listen.host
        port = config.listen.port if args.port is None else args.port
        run_http(config, host, port)
        return 0
    try:
        identity = identity_for(config, getattr(args, "client", None))
    except KeyError:
        known = [LOCAL_CLIENT, *(c for c in config.clients if c != LOCAL_CLIENT)]
        print(f"triad: unknown client {args.client!r} (clients: {', '.join(known)})", file=sys.stderr)
        return 2
    if args.verb == "stdio":
        configure_logging(args.log_level, args.log_format)
        if os.environ.get("OTEL_TRACES_EXPORTER", "").strip().lower() == "console":
            print("triad: OTEL_TRACES_EXPORTER=console would write on stdout, which carries the protocol over stdio",
                  file=sys.stderr)
            return 2
        configure_tracing()
        anyio.run(serve_stdio_client, config, identity)  # asyncio: uvloop aborts on a stdin that is a file
        return 0
    configure_logging(getattr(args, "log_level", "ERROR"))
    if args.verb == "approve":
        if args.approve_all and args.tools:
            print("triad: approve: give tool names or --all, not both", file=sys.stderr)
            return 2
        return anyio.run(reports.approve, config, args.tools, args.approve_all)
    if args.verb == "search":
        return anyio.run(reports.print_search, config, identity, " ".join(args.query), args.limit, args.json, args.host)
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

    upstreams = config.enabled_upstreams()
    prefixed = prefix_active(config.naming, len(upstreams))
    client_rules = {cid: c.tools for cid, c in config.clients.items()}
    parts = sanitize_server_names(list(upstreams))
    separator = config.naming.separator if prefixed else None
    renamed = ["listen.lean_path is deprecated: it is now listen.direct_path"] if config.listen.lean_path is not None \
        else []
    where = config.line_of
    return [*renamed, *_missing_tls_files(config), *regex_patterns(config.policy, client_rules, where),
            *unknown_patterns(config.policy, client_rules, parts, separator, where),
            *spanning_patterns(config.policy, client_rules, parts, separator, where)]


def _missing_tls_files(config: TriadConfig) -> list[str]:
    """A `tls` file that is not there yet (a secret still to be mounted): the upstream stays down until it is."""
    return [format_problem(("upstreams", name, "tls", key), f"file not found: {value} (the upstream stays down "
                           "until it exists)", config.line_of(("upstreams", name, "tls", key)))
            for name, upstream in config.enabled_upstreams().items() if upstream.tls is not None
            for key, value in upstream.tls.files().items() if not Path(value).is_file()]


def _sandbox_problems(config: TriadConfig) -> list[str]:
    """What keeps a stdio upstream's sandbox from being set up on this machine (its upstream would be down): not in
    the config's validation, which must not depend on the machine the file is read on (a reload applies it)."""
    found = []
    for name, upstream in config.enabled_upstreams().items():
        if (sandbox := upstream.sandboxed) is None:
            continue
        own = config.upstreams[name].sandbox is not None
        base: tuple[str | int, ...] = ("upstreams", name, "sandbox") if own else ("sandbox_default",)
        for key, message in sandbox_problems(sandbox):
            where = (*base, *(int(p) if p.isdigit() else p for p in key.split(".") if p))
            found.append(format_problem(where, message + ("" if own else f" (for upstream {name!r})"),
                                        config.line_of(where)))
    return found


def _login(config: TriadConfig, name: str, client: str | None) -> int:

    upstream = config.enabled_upstreams().get(name)
    if upstream is None:
        print(f"triad: no enabled upstream {name!r} (upstreams: {', '.join(config.enabled_upstreams())})",
              file=sys.stderr)
        return 2

    try:
        user = credential_owner(identity_for(config, client)) if client is not None else None
    except KeyError:
        print(f"triad: unknown client {client!r} (clients: {', '.join(config.clients)})", file=sys.stderr)
        return 2
    whom = f" for client {client!r}" if client is not None else ""

    async def show(url: str) -> None:
        print(f"Open this URL in a browser to authorize Triad{whom} at upstream {name!r}:\n\n  {url}\n\n"
              "Waiting for the authorization server to redirect back...", file=sys.stderr, flush=True)

    async def run() -> str:
        if config.cluster is None or user is None:
            return await login(name, upstream, show, user)
        from gateway.cluster import Cluster, vault_stores

        cluster = Cluster(config.cluster)
        async with cluster.running(heartbeat=False):  # a user's tokens are the cluster's: kept in Redis
            return await login(name, upstream, show, user, UserAuthorization(stores=vault_stores(cluster.vault)))

    try:
        where = anyio.run(run)
    except (LoginError, UpstreamError) as exc:
        print(f"triad: login: {config.hide_values(str(exc))}", file=sys.stderr)
        return 1
    except Exception as exc:  # the SDK's transport wraps failures in groups: one line, no traceback, no token
        print(f"triad: login to upstream {name!r} failed: {config.hide_values(describe_failure(exc))}",
              file=sys.stderr)
        return 1
    print(f"Logged in{whom}: the tokens for upstream {name!r} are kept in {where}.")
    return 0


def _init(path: Path, force: bool) -> int:
    try:
        write_starter(path, force=force)
    except FileExistsError:
        print(f"triad: {path} exists; pass --force to overwrite it", file=sys.stderr)
        return 1
    except OSError as exc:
        print(f"triad: {path}: cannot write ({exc.strerror})", file=sys.stderr)
        return 1
    print(f"wrote {path}\nnext: triad check -c {path}   then   triad serve -c {path}  (or triad stdio -c {path})")
    return 0


def _import(path: str, source_format: str | None, force: bool) -> int:
    """The YAML on stdout; on stderr the format detected, the variables to set, and every loss. Exit 1 when
    something could not be converted (nothing is written then, unless `force`)."""
    try:
        with open(path, encoding="utf-8") as stream:
            result = convert(stream.read(), path, source_format)
    except OSError as exc:
        print(f"triad: {path}: cannot read ({exc.strerror})", file=sys.stderr)
        return 1
    except ImportFailed as exc:
        print(f"triad: {path}: {exc}", file=sys.stderr)
        return 1
    print(f"triad: read {path} as a {result.format} file: {result.servers} server(s) converted", file=sys.stderr)
    if result.variables:
        print("triad: the result reads these environment variables (secrets are referenced, never copied); set "
              "them where Triad runs:", file=sys.stderr)
        width = max(len(name) for name in result.variables)
        for name, where in result.variables.items():
            print(f"  {name:<{width}}  {where}", file=sys.stderr)
    for note in result.notes:
        print(f"triad: note: {note}", file=sys.stderr)
    for loss in result.lost:
        print(f"triad: not converted: {loss}", file=sys.stderr)
    if result.lost and not force:
        print(f"triad: {len(result.lost)} setting(s) could not be converted; nothing written (--force writes the "
              "rest, with the losses as comments)", file=sys.stderr)
        return 1
    print(result.yaml, end="")
    return 0


def _host_arg(parser: argparse.ArgumentParser) -> None:
    """serve's listen address; plan and explain take it too, since policy depends on it (off loopback, the
    built-in remote deny list applies)."""
    parser.add_argument("--host", help="listen address (default: listen.host from the config)")


def _client_arg(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--client", help=f"the configured client to act as (default: {LOCAL_CLIENT}, an owner "
                                         "unless configured otherwise)")


def _log_args(parser: argparse.ArgumentParser, default: str, *, formats: bool = True) -> None:
    parser.add_argument("--log-level", default=default, type=str.upper, choices=LOG_LEVELS,
                        help=f"{', '.join(LOG_LEVELS)} (default: {default}; logs go to stderr)")
    if formats:
        parser.add_argument("--log-format", choices=["text", "json"], default="text", help="log lines as text or JSON")


def _version() -> str:
    try:
        return version("mcp-triad")
    except PackageNotFoundError:  # run from a checkout that was never installed
        return "unknown"


def _config_arg(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("-c", "--config", required=True, help="the Triad YAML config file")

