"""`triad import FILE`: a Claude Desktop, Cursor or VS Code MCP file as Triad YAML, on stdout.

Claude Desktop and Cursor keep servers under `mcpServers`, VS Code under `servers` (settings.json: `mcp.servers`).
What has no Triad equivalent is kept as a comment saying why, never dropped silently. VS Code `${input:x}`
placeholders become `${X}` environment references (Triad reads secrets from the environment).
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from typing import Any

import yaml

KNOWN = {"command", "args", "env", "cwd", "url", "headers", "type", "transport", "timeout", "disabled", "enabled"}
_INPUT = re.compile(r"\$\{input:([^}]+)\}")
_ENV = re.compile(r"\$\{env:([^}]+)\}")


class ImportFailed(ValueError):
    pass


def find_servers(data: Any) -> tuple[str, Mapping[str, Any]]:
    if not isinstance(data, Mapping):
        raise ImportFailed("the file is not a JSON object")
    for shape, servers in (("Claude Desktop / Cursor", data.get("mcpServers")), ("VS Code", data.get("servers")),
                           ("VS Code settings", (data.get("mcp") or {}).get("servers")
                            if isinstance(data.get("mcp"), Mapping) else None)):
        if isinstance(servers, Mapping):
            return shape, servers
    raise ImportFailed("no mcpServers (Claude Desktop, Cursor) or servers (VS Code) block found")


def convert(text: str) -> str:
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        raise ImportFailed(f"not valid JSON: {exc.msg} (line {exc.lineno})") from None
    shape, servers = find_servers(data)
    upstreams: dict[str, Any] = {}
    notes: list[str] = []
    for name, server in servers.items():
        if not isinstance(server, Mapping):
            notes.append(f"{name}: not converted (not an object)")
            continue
        entry: dict[str, Any] = {}
        for key, value in server.items():
            if key in KNOWN:
                entry[key] = _placeholders(value)
            else:
                notes.append(f"{name}.{key}: not converted (Triad has no such setting): {json.dumps(value)}")
        if "disabled" in entry:
            entry["enabled"] = not entry.pop("disabled")
        if "command" not in entry and "url" not in entry:
            notes.append(f"{name}: not converted (neither command nor url)")
            continue
        upstreams[name] = entry
    if isinstance(data.get("inputs"), list) and data["inputs"]:
        ids = ", ".join(str(i.get("id")) for i in data["inputs"] if isinstance(i, Mapping))
        notes.append(f"inputs ({ids}): VS Code prompts for these; Triad reads them from the environment instead")
    header = [f"# Converted by `triad import` from a {shape} file.", "# Check it with `triad check -c <this file>`."]
    header += [f"# {note}" for note in notes]
    body = yaml.safe_dump({"upstreams": upstreams}, sort_keys=False, allow_unicode=True, width=120)
    return "\n".join(header) + "\n" + body


def _placeholders(value: Any) -> Any:
    if isinstance(value, str):
        value = _INPUT.sub(lambda m: "${" + re.sub(r"[^A-Za-z0-9_]", "_", m.group(1)).upper() + "}", value)
        return _ENV.sub(lambda m: "${" + m.group(1) + "}", value)
    if isinstance(value, list):
        return [_placeholders(v) for v in value]
    if isinstance(value, Mapping):
        return {k: _placeholders(v) for k, v in value.items()}
    return value
