"""Where a client's file keeps its servers, for `triad import`: every block, not only the first one found.

A file may hold several server lists: Claude Code's `~/.claude.json` has the user's `mcpServers` and one
`projects.<folder>.mcpServers` per project; a VS Code settings file may hold `mcp.servers` beside an older
`mcpServers`. Each becomes a `Block`, and `name_servers` gives every server one upstream name: its own, unless
another block uses it for a different server, in which case a project's server is prefixed with its folder's name.
Whether a server is off is read here too (Claude Code's per-project `disabledMcpServers`, Gemini CLI's
`mcp.allowed` / `mcp.excluded`), so that it comes in disabled rather than silently on.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import PurePath

from consumers import JSON


@dataclass(frozen=True)
class Block:
    where: str
    """The block's key path in the file (`mcpServers`, `projects["/home/me/app"].mcpServers`)."""
    servers: Mapping[str, JSON]
    project: str | None = None
    """The project folder a Claude Code project block belongs to (its servers run there)."""
    off: Mapping[str, str] = field(default_factory=dict)
    """Server name -> why the client has it off."""


@dataclass
class Found:
    blocks: list[Block]
    notes: list[str] = field(default_factory=list)
    lost: list[str] = field(default_factory=list)


def find_blocks(data: Mapping[str, JSON]) -> Found:
    """Every server block of the file; Gemini CLI's allow and exclude lists applied to them."""
    found = Found([])
    mcp = data.get("mcp")
    for key, servers in (("mcpServers", data.get("mcpServers")), ("servers", data.get("servers")),
                         ("mcp.servers", mcp.get("servers") if isinstance(mcp, Mapping) else None),
                         ("context_servers", data.get("context_servers"))):
        if isinstance(servers, Mapping):
            found.blocks.append(Block(key, servers))
        elif servers is not None:
            found.lost.append(f"{key}: not an object")
    projects = data.get("projects")
    if isinstance(projects, Mapping):  # Claude Code's ~/.claude.json: one entry per project folder
        for folder, project in projects.items():
            if isinstance(project, Mapping):
                found.blocks += _project_block(str(folder), project, found)
    _gemini_lists(data, found)
    return found


def _project_block(folder: str, project: Mapping[str, JSON], found: Found) -> list[Block]:
    where = f"projects[{folder!r}]"
    for key in ("enabledMcpjsonServers", "disabledMcpjsonServers"):
        if isinstance(project.get(key), list) and project[key]:
            found.notes.append(f"{where}.{key}: refers to servers in {folder}/.mcp.json, which is another file "
                               f"(import it too: triad import {folder}/.mcp.json)")
    servers = project.get("mcpServers")
    if servers is None:
        return []
    if not isinstance(servers, Mapping):
        found.lost.append(f"{where}.mcpServers: not an object")
        return []
    disabled = project.get("disabledMcpServers")
    off = {str(name): f"{where}.disabledMcpServers" for name in disabled} if isinstance(disabled, list) else {}
    return [Block(f"{where}.mcpServers", servers, folder, off)]


def _gemini_lists(data: Mapping[str, JSON], found: Found) -> None:
    """Gemini CLI: `mcp.allowed` / `mcp.excluded` (settings v2), `allowMCPServers` / `excludeMCPServers` (v1)."""
    mcp = data.get("mcp")
    mcp = mcp if isinstance(mcp, Mapping) else {}
    for allowed_key, excluded_key, allowed, excluded in (
            ("mcp.allowed", "mcp.excluded", mcp.get("allowed"), mcp.get("excluded")),
            ("allowMCPServers", "excludeMCPServers", data.get("allowMCPServers"), data.get("excludeMCPServers"))):
        for key, value in ((allowed_key, allowed), (excluded_key, excluded)):
            if value is not None and not (isinstance(value, list) and all(isinstance(v, str) for v in value)):
                found.lost.append(f"{key}: not a list of server names")
        allow = set(allowed) if isinstance(allowed, list) else None
        exclude = set(excluded) if isinstance(excluded, list) else set()
        for index, block in enumerate(found.blocks):
            off = dict(block.off)
            for name in block.servers:
                if name in exclude:
                    off.setdefault(name, excluded_key)
                elif allow is not None and name not in allow:
                    off.setdefault(name, f"{allowed_key} (not listed)")
            found.blocks[index] = Block(block.where, block.servers, block.project, off)


def name_servers(blocks: list[Block]) -> list[tuple[str, str, Block]]:
    """(upstream name, the server's name in the file, its block) for every server, names unique.

    A server keeps its name unless another block gives that name to a different server (a project's stdio server
    runs in the project's folder, so the same command in two projects is two servers): then a project's one is
    `<folder>-<name>` (`-2`, `-3`... if that is taken too). The same server in two blocks is imported once."""
    firsts: dict[str, tuple[JSON, str | None]] = {}
    for block in blocks:
        for name, server in block.servers.items():
            firsts.setdefault(name, _effective(server, block))
    clashing = {name for block in blocks for name, server in block.servers.items()
                if _effective(server, block) != firsts[name]}
    out: list[tuple[str, str, Block]] = []
    taken: set[str] = set()
    for block in sorted(blocks, key=lambda b: b.project is not None):  # the user's own names first
        for name in block.servers:
            if name in taken and name not in clashing:
                continue  # the same server again
            upstream = name
            if name in clashing and block.project is not None:
                upstream = f"{_folder_part(block.project)}-{name}"
            base, n = upstream, 1
            while upstream in taken:
                n += 1
                upstream = f"{base}-{n}"
            taken.add(upstream)
            out.append((upstream, name, block))
    return out


def _effective(server: JSON, block: Block) -> tuple[JSON, str | None]:
    """A server as it runs: a stdio one without `cwd` in a project block runs in the project's folder."""
    runs_in = block.project if isinstance(server, Mapping) and "command" in server and "cwd" not in server else None
    return server, runs_in


def _folder_part(folder: str) -> str:
    return re.sub(r"[^A-Za-z0-9_-]", "-", PurePath(folder).name).strip("-") or "project"
