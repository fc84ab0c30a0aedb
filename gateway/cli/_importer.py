"""`triad import FILE`: an MCP client's server list as Triad YAML, losing nothing silently.

Read: Claude Desktop, Claude Code, Cursor, Windsurf, Gemini CLI and Cline (`mcpServers`), VS Code (`servers`,
or `mcp.servers` in settings.json) and Zed (`context_servers`), as JSON with comments and trailing commas (JSONC,
which VS Code writes); every server block of the file (`_import_sources`: Claude Code's projects too). The format
is told by `--from`, else by the blocks and the servers' own keys, else by the file's path, and is always named.

Every setting becomes its Triad equivalent (`serverUrl` and `httpUrl` a `url`, Gemini's millisecond `timeout` a
duration, `includeTools` / `excludeTools` / `disabledTools` the upstream's `tools` filter, an `envFile` one
`${VAR}` per variable it defines, `${workspaceFolder}` / `${userHome}` / `${env:X}` / `${input:x}` what they
stand for). A literal secret (an env value, a header, a query parameter or an argument that looks like one) is
replaced by a `${VAR}` reference, and every variable the result needs is listed for the user. A setting a gateway
has no use for (auto-approval lists, trust prompts) is a note; one that cannot be converted is a loss, and
`Conversion.lost` is what makes `triad import` exit non-zero unless `--force`.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import PurePath

import yaml

from consumers import JSON, JSONObject
from gateway.cli._import_secrets import Secrets
from gateway.cli._import_sources import Found, find_blocks, name_servers
from gateway.cli._jsonc import loads_jsonc

FORMATS = {
    "claude-desktop": "Claude Desktop", "claude-code": "Claude Code", "cursor": "Cursor", "vscode": "VS Code",
    "windsurf": "Windsurf", "gemini": "Gemini CLI", "cline": "Cline / Roo Code", "zed": "Zed",
}
"""`--from` values and the names shown for them."""

_PATH_HINTS = (("claude_desktop_config", "claude-desktop"), (".cursor/", "cursor"), (".vscode/", "vscode"),
               ("/code/user/", "vscode"), ("windsurf", "windsurf"), ("codeium", "windsurf"), (".gemini/", "gemini"),
               ("cline_mcp_settings", "cline"), ("mcp_settings.json", "cline"), (".mcp.json", "claude-code"),
               (".claude.json", "claude-code"))
_TOP_BLOCKS = ("mcpServers", "servers", "mcp.servers", "context_servers")
"""Blocks whose servers are named by their bare name in messages (a project block's carry its key path)."""
_WORKSPACE_DIRS = (".vscode", ".cursor", ".gemini", ".windsurf", ".roo", ".zed")
"""A file in one of these folders belongs to the workspace that holds the folder (`${workspaceFolder}`)."""
_TIMEOUT_UNITS = {"gemini": "ms", "cline": "s"}
"""A bare number as `timeout`: Gemini CLI counts milliseconds, Cline seconds; elsewhere it is not documented."""
CLIENT_SIDE = {"autoApprove": "auto-approval is the client's business; Triad's policy decides what is visible",
               "alwaysAllow": "auto-approval is the client's business; Triad's policy decides what is visible",
               "trust": "Gemini CLI's confirmation prompts are the client's business",
               "dev": "VS Code's watch-and-debug mode for server development",
               "description": "a label for people", "gallery": "VS Code's gallery entry",
               "version": "VS Code's gallery entry",
               "watchPaths": "Roo Code restarts the server when these files change; Triad does not watch them",
               "source": "Zed's record of where the server came from"}
"""Keys with no meaning in a gateway: noted, not lost."""
_TRANSPORTS = {"stdio": "stdio", "sse": "sse", "http": "streamable-http", "streamable-http": "streamable-http",
               "streamable_http": "streamable-http", "streamablehttp": "streamable-http"}
_PLACEHOLDER = re.compile(r"\$\{([^}]*)\}")
_BARE_VARIABLE = re.compile(r"\$([A-Za-z_][A-Za-z0-9_]*)")
_TRIAD_VARIABLE = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*(:-.*)?$")


class ImportFailed(ValueError):
    """The file cannot be read as any client's server list."""


@dataclass
class Conversion:
    yaml: str
    format: str
    servers: int
    variables: dict[str, str]
    """Every `${VAR}` the result reads, with where it came from (`github.env.GITHUB_TOKEN`, an envFile...)."""
    lost: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)


def convert(text: str, path: str | None = None, source_format: str | None = None) -> Conversion:
    try:
        data = loads_jsonc(text)
    except json.JSONDecodeError as exc:
        raise ImportFailed(f"not valid JSON: {exc.msg} (line {exc.lineno})") from None
    fmt, found = find_servers(data, path, source_format)
    run = _Run(fmt, _workspace(path), Secrets(), list(found.lost), list(found.notes))
    upstreams: JSONObject = {}
    for upstream, name, block in name_servers(found.blocks):
        where = name if block.where in _TOP_BLOCKS else f"{block.where}.{name}"
        if upstream != name:
            run.notes.append(f"{where}: imported as {upstream!r} (another block has a different {name!r})")
        entry = run.server(upstream, block.servers[name], where)
        if entry is None:
            continue
        if block.project is not None and "command" in entry and "cwd" not in entry:
            entry["cwd"] = block.project  # Claude Code starts a project's servers in the project's folder
        if name in block.off:
            entry["enabled"] = False
            run.notes.append(f"{where}: imported disabled ({block.off[name]} has it off)")
        upstreams[upstream] = entry
    if isinstance(data, Mapping) and isinstance(data.get("inputs"), list):
        for item in data["inputs"]:
            if isinstance(item, Mapping) and isinstance(item.get("id"), str):
                run.secrets.variables.setdefault(_input_variable(item["id"]), f"VS Code input {item['id']!r}")
    body = yaml.safe_dump({"upstreams": upstreams}, sort_keys=False, allow_unicode=True, width=120)
    needed = {name: where for name, where in run.secrets.variables.items()
              if re.search(r"\$\{" + re.escape(name) + r"(\}|:-)", body)}
    header = [f"# Converted by `triad import` from a {FORMATS[fmt]} file.",
              "# Check it with `triad check -c <this file>`."]
    if needed:
        header.append("# Set these environment variables before starting Triad: " + ", ".join(needed))
    header += [f"# note: {note}" for note in run.notes] + [f"# NOT CONVERTED: {loss}" for loss in run.lost]
    return Conversion("\n".join(header) + "\n" + body, FORMATS[fmt], len(upstreams), needed, run.lost, run.notes)


def find_servers(data: JSON, path: str | None = None, source_format: str | None = None) -> tuple[str, Found]:
    """The format (a `FORMATS` key) and every server block of the file."""
    if not isinstance(data, Mapping):
        raise ImportFailed("the file is not a JSON object")
    found = find_blocks(data)
    if not found.blocks:
        raise ImportFailed("no mcpServers (Claude Desktop, Cursor) or servers (VS Code) block found, nor Zed's "
                           "context_servers (Claude Code, Windsurf, Gemini CLI and Cline write mcpServers too)")
    if source_format is not None:
        return source_format, found
    where = {block.where for block in found.blocks}
    if "context_servers" in where:
        return "zed", found
    if where & {"servers", "mcp.servers"}:
        return "vscode", found
    if any(block.project is not None for block in found.blocks):
        return "claude-code", found
    servers = {name: server for block in found.blocks for name, server in block.servers.items()}
    return _detect(servers, path), found


def _detect(servers: Mapping[str, JSON], path: str | None) -> str:
    keys = {key for server in servers.values() if isinstance(server, Mapping) for key in server}
    if "serverUrl" in keys or "disabledTools" in keys:
        return "windsurf"
    if keys & {"httpUrl", "trust", "includeTools", "excludeTools"}:
        return "gemini"
    if keys & {"transportType", "alwaysAllow", "watchPaths"}:
        return "cline"
    where = PurePath(path).as_posix().lower() if path else ""
    for hint, fmt in _PATH_HINTS:
        if hint in where:
            return fmt
    return "claude-desktop"


def _workspace(path: str | None) -> PurePath | None:
    if path is None:
        return None
    from pathlib import Path

    folder = Path(path).resolve().parent
    return folder.parent if folder.name in _WORKSPACE_DIRS else None


def _input_variable(input_id: str) -> str:
    return re.sub(r"[^A-Za-z0-9_]", "_", input_id).upper()


@dataclass
class _Run:
    fmt: str
    workspace: PurePath | None
    secrets: Secrets
    lost: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)

    def server(self, name: str, server: JSON, label: str | None = None) -> JSONObject | None:
        """The upstream `name` (variables are named after it) from `server`; messages call it `label`."""
        label = label or name
        if not name.strip():
            self.lost.append(f"{label!r}: a server with an empty name (Triad names every tool after its upstream)")
            return None
        if not isinstance(server, Mapping):
            self.lost.append(f"{label}: not an object")
            return None
        if self.fmt == "zed" and isinstance(command := server.get("command"), Mapping):  # Zed's older shape
            server = {**{k: v for k, v in server.items() if k != "command"},
                      **{("command" if k == "path" else k): v for k, v in command.items()}}
        entry: JSONObject = {}
        tools: dict[str, list[str]] = {}
        for key, value in server.items():
            where = f"{label}.{key}"
            if key in ("command", "cwd") and isinstance(value, str):
                entry[key] = self.text(value, where)
            elif key == "args" and isinstance(value, list):
                entry["args"] = self.secrets.args(name, [self.text(str(v), f"{where}[{i}]")
                                                         for i, v in enumerate(value)])
            elif key == "env" and isinstance(value, Mapping):
                env = {str(k): self.text(_scalar(v), f"{where}.{k}") for k, v in value.items()}
                entry["env"] = {**entry.get("env", {}), **self.secrets.env(name, env)}
            elif key == "envFile" and isinstance(value, str):
                self.env_file(name, self.text(value, where), entry)
            elif key == "headers" and isinstance(value, Mapping):
                headers = {str(k): self.text(_scalar(v), f"{where}.{k}") for k, v in value.items()}
                entry["headers"] = self.secrets.headers(name, headers)
            elif key in ("url", "serverUrl", "httpUrl") and isinstance(value, str):
                entry["url"] = self.secrets.url(name, self.text(value, where))
                if key == "httpUrl":
                    entry["transport"] = "streamable-http"
                elif key == "url" and self.fmt == "gemini":  # Gemini CLI: `url` is SSE, `httpUrl` streamable HTTP
                    entry["transport"] = "sse"
            elif key in ("type", "transport", "transportType") and isinstance(value, str):
                if (spelled := _TRANSPORTS.get(value.strip().lower())) is None:
                    self.lost.append(f"{where}: unknown transport {value!r}")
                else:
                    entry.setdefault("transport", spelled)
            elif key == "timeout" and isinstance(value, str | int | float) and not isinstance(value, bool):
                self.timeout(where, value, entry)
            elif key == "settings" and self.fmt == "zed" and value in ({}, None):
                pass  # Zed writes an empty `settings` for custom servers
            elif key in ("disabled", "enabled") and isinstance(value, bool):
                entry["enabled"] = value if key == "enabled" else not value
            elif key in ("includeTools", "excludeTools", "disabledTools") and isinstance(value, list):
                side = "include" if key == "includeTools" else "exclude"
                tools.setdefault(side, []).extend(str(v) for v in value)
            elif key in CLIENT_SIDE:
                self.notes.append(f"{where}: left out ({CLIENT_SIDE[key]})")
            else:
                self.lost.append(f"{where}: Triad has no such setting: {json.dumps(value)[:80]}")
        if tools:
            entry["tools"] = tools
        if "command" not in entry and "url" not in entry:
            extension = self.fmt == "zed" and server.get("source") == "extension"
            self.lost.append(f"{label}: " + ("a Zed extension's server (its command lives in the extension)"
                                            if extension else "neither a command nor a url"))
            return None
        if entry.get("transport") == "stdio" and "command" in entry:
            del entry["transport"]  # a command means stdio
        return entry

    def text(self, value: str, where: str) -> str:
        """Client placeholders as Triad writes them; one with no Triad equivalent is a loss."""
        if self.fmt == "gemini":  # Gemini CLI expands `$VAR` as well as `${VAR}`
            value = _BARE_VARIABLE.sub(lambda m: "${" + m.group(1) + "}", value)

        def one(match: re.Match[str]) -> str:
            inner = match.group(1)
            kind, _, arg = inner.partition(":")
            if kind == "env" and arg:
                self.secrets.variables.setdefault(arg, f"{where} (${{env:{arg}}})")
                return "${" + arg + "}"
            if kind == "input" and arg:
                variable = _input_variable(arg)
                self.secrets.variables.setdefault(variable, f"VS Code input {arg!r}")
                return "${" + variable + "}"
            if inner == "userHome":
                self.secrets.variables.setdefault("HOME", f"{where} (${{userHome}})")
                return "${HOME}"
            if inner in ("pathSeparator", "/"):
                return "/"
            if inner in ("workspaceFolder", "workspaceFolderBasename"):
                if self.workspace is None:
                    self.lost.append(f"{where}: ${{{inner}}} (the file is not in a workspace's .vscode or .cursor "
                                     "folder, so which folder it means is unknown)")
                    return match.group(0)
                return str(self.workspace) if inner == "workspaceFolder" else self.workspace.name
            if _TRIAD_VARIABLE.match(inner):
                self.secrets.variables.setdefault(inner.split(":-")[0], where)
                return match.group(0)
            self.lost.append(f"{where}: ${{{inner}}} has no Triad equivalent")
            return match.group(0)

        # every other `$` was literal to the client, and is to Triad once written `$$` (else `$HOME` in an argument
        # would be a near-miss reference, refused at load)
        out, at = [], 0
        for match in _PLACEHOLDER.finditer(value):
            out += [value[at:match.start()].replace("$", "$$"), one(match)]
            at = match.end()
        return "".join([*out, value[at:].replace("$", "$$")])

    def timeout(self, where: str, value: str | float, entry: JSONObject) -> None:
        if isinstance(value, str):
            entry["timeout"] = value
        elif (unit := _TIMEOUT_UNITS.get(self.fmt)) is not None:
            entry["timeout"] = f"{value:g}{unit}"
        else:
            self.lost.append(f"{where}: {value} in an unknown unit ({FORMATS[self.fmt]} does not document it; "
                             "Gemini CLI counts milliseconds, Cline seconds: say which with --from)")

    def env_file(self, name: str, path: str, entry: JSONObject) -> None:
        """Each variable the file defines becomes `${VAR}` (Triad reads the environment, not env files)."""
        from pathlib import Path

        if "${" in path:  # a placeholder that could not be resolved: a loss reported already
            return
        file = Path(path)
        if not file.is_absolute() and self.workspace is not None:
            file = Path(self.workspace) / file
        try:
            lines = file.read_text(encoding="utf-8").splitlines()
        except OSError as exc:
            self.lost.append(f"{name}.envFile: cannot read {path} ({exc.strerror})")
            return
        env = entry.setdefault("env", {})
        for line in lines:
            key, sep, _value = line.strip().removeprefix("export ").partition("=")
            key = key.strip()
            if sep and re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", key) and not line.lstrip().startswith("#"):
                env.setdefault(key, "${" + key + "}")
                self.secrets.variables.setdefault(key, f"{name}.envFile ({file})")


def _scalar(value: JSON) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    return value if isinstance(value, str) else json.dumps(value)
