"""`triad import` round-trips a realistic file of every supported client (issue 31, points 4-6).

The table is (client format x server kind): each kind is written once, neutrally, then spelled the way each client
writes it, into one rich file per client. The conversion must lose nothing (no loss listed), and the result, read
back by Triad's own config loader with every variable it names set, must be the server the client had — with no
literal secret left in the YAML: every secret sits in a `${VAR}` at exactly its place.
"""

from __future__ import annotations

import json
import re
import subprocess
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import cache
from pathlib import Path
from typing import Any

import pytest

from gateway.cli import FORMATS, Conversion, convert
from gateway.config import TriadConfig
from gateway.runtime._loading import parse_config
from tests.conftest import TRIAD


@dataclass(frozen=True)
class Kind:
    command: str | None = None
    args: tuple[str, ...] = ()
    env: dict[str, str] = field(default_factory=dict)
    url: str | None = None
    transport: str = "stdio"
    headers: dict[str, str] = field(default_factory=dict)
    disabled: bool = False
    secrets: tuple[str, ...] = ()
    """The literal secrets this server holds: none may reach the YAML."""


KINDS = {
    "stdio": Kind("npx", ("-y", "@modelcontextprotocol/server-filesystem", "/srv/docs")),
    "env": Kind("docker", ("run", "-i", "--rm", "-e", "GITHUB_PERSONAL_ACCESS_TOKEN", "ghcr.io/github/mcp"),
                env={"GITHUB_PERSONAL_ACCESS_TOKEN": "ghp_Zq81mXc2Lp0aVw7yTt5K", "LOG_LEVEL": "debug"},
                secrets=("ghp_Zq81mXc2Lp0aVw7yTt5K",)),
    "http": Kind(url="https://api.example.com/mcp", transport="http",
                 headers={"Authorization": "Bearer h77tok3n-abc", "X-Region": "eu"}, secrets=("h77tok3n-abc",)),
    "sse": Kind(url="https://legacy.example.com/sse", transport="sse", headers={"X-Api-Key": "ssek3y998"},
                secrets=("ssek3y998",)),
    "remote": Kind("npx", ("-y", "mcp-remote", "https://remote.example.com/mcp?api_key=qk4455aa&team=core",
                           "--header", "Authorization: Bearer rt0k9z1", "--header=X-Client-Secret:cs88x1"),
                   secrets=("qk4455aa", "rt0k9z1", "cs88x1")),
    "flags": Kind("uvx", ("search-mcp", "--api-key", "ak5512xy", "--token=tk6623zz", "--verbose"),
                  secrets=("ak5512xy", "tk6623zz")),
    "dsn": Kind("npx", ("-y", "@modelcontextprotocol/server-postgres", "postgresql://app:pa55w0rd@db.internal/app"),
                env={"REDIS_URL": "redis://:r3dispw@cache:6379/0"}, secrets=("pa55w0rd", "r3dispw")),
    "disabled": Kind("uvx", ("mcp-server-time",), disabled=True),
}


def _stdio(kind: Kind) -> dict[str, Any]:
    return {"command": kind.command, "args": list(kind.args), **({"env": kind.env} if kind.env else {})}


def _remote(kind: Kind, url_key: str = "url", **extra: Any) -> dict[str, Any]:
    return {url_key: kind.url, **({"headers": kind.headers} if kind.headers else {}), **extra}


Spell = Callable[[Kind], dict[str, Any] | None]
"""A kind as one client writes it, or None where the client cannot express it (then the cell is `n/a`)."""


def claude_desktop(kind: Kind) -> dict[str, Any] | None:
    return _stdio(kind) if kind.command and not kind.disabled else None  # stdio only, no off switch


def typed(kind: Kind) -> dict[str, Any] | None:  # Claude Code, VS Code: `type` on every server
    if kind.disabled:
        return None  # kept outside the server list (Claude Code's is per project, tested below)
    return {"type": "stdio", **_stdio(kind)} if kind.command else {"type": kind.transport, **_remote(kind)}


def cursor(kind: Kind) -> dict[str, Any] | None:
    if kind.disabled:
        return None  # Cursor keeps its toggles in its own database
    return _stdio(kind) if kind.command else _remote(kind)


def windsurf(kind: Kind) -> dict[str, Any]:
    spelled = _stdio(kind) if kind.command else _remote(kind, "serverUrl")
    return {**spelled, "disabled": True} if kind.disabled else spelled


def gemini(kind: Kind) -> dict[str, Any]:  # `httpUrl` is streamable HTTP, `url` SSE; off through mcp.excluded
    if kind.command:
        return {**_stdio(kind), "trust": False, "timeout": 30000}
    return _remote(kind, "httpUrl" if kind.transport == "http" else "url")


def cline(kind: Kind) -> dict[str, Any]:
    common = {"disabled": kind.disabled, "autoApprove": [], "alwaysAllow": ["list_things"], "timeout": 60}
    if kind.command:
        return {**_stdio(kind), "transportType": "stdio", **common}
    transport = {"http": {"type": "streamableHttp"}, "sse": {"transportType": "sse"}}[kind.transport]
    return {**_remote(kind), **transport, **common}


def zed(kind: Kind) -> dict[str, Any] | None:
    if kind.disabled or kind.transport == "sse":
        return None  # no off switch in settings.json; remote servers speak streamable HTTP
    if kind.command == "docker":  # Zed's older shape: the command as an object
        return {"command": {"path": kind.command, "args": list(kind.args), "env": kind.env}, "settings": {}}
    return {"source": "custom", **_stdio(kind)} if kind.command else _remote(kind)


def _servers(spell: Spell) -> dict[str, Any]:
    return {name: spelled for name, kind in KINDS.items() if (spelled := spell(kind)) is not None}


def claude_code_file(root: Path) -> tuple[str, dict[str, Any]]:
    """~/.claude.json: the user's servers, then a project holding the rest (and one it switched off)."""
    servers = _servers(typed)
    user = {name: servers[name] for name in ("stdio", "env", "http", "sse")}
    project = {name: servers[name] for name in ("remote", "flags", "dsn")}
    project["disabled"] = {"type": "stdio", **_stdio(KINDS["disabled"])}
    return ".claude.json", {"numStartups": 12, "mcpServers": user, "projects": {
        str(root / "app"): {"allowedTools": [], "hasTrustDialogAccepted": True, "mcpServers": project,
                            "disabledMcpServers": ["disabled"]}}}


FILES: dict[str, Callable[[Path], tuple[str, dict[str, Any]]]] = {
    "claude-desktop": lambda root: ("claude_desktop_config.json",
                                    {"mcpServers": _servers(claude_desktop), "globalShortcut": ""}),
    "claude-code": claude_code_file,
    "cursor": lambda root: (".cursor/mcp.json", {"mcpServers": _servers(cursor)}),
    "vscode": lambda root: (".vscode/mcp.json", {"servers": _servers(typed), "inputs": []}),
    "windsurf": lambda root: (".codeium/windsurf/mcp_config.json", {"mcpServers": _servers(windsurf)}),
    "gemini": lambda root: (".gemini/settings.json", {"theme": "Default", "mcpServers": _servers(gemini),
                                                      "mcp": {"excluded": ["disabled"]}}),
    "cline": lambda root: ("cline_mcp_settings.json", {"mcpServers": _servers(cline)}),
    "zed": lambda root: (".zed/settings.json", {"theme": "One Dark", "context_servers": _servers(zed)}),
}
SPELLS: dict[str, Spell] = {"claude-desktop": claude_desktop, "claude-code": lambda k: typed(k) or {},
                            "cursor": cursor, "vscode": typed, "windsurf": windsurf, "gemini": gemini,
                            "cline": cline, "zed": zed}


CELLS = [(fmt, kind) for fmt in sorted(FILES) for kind in sorted(KINDS) if SPELLS[fmt](KINDS[kind]) is not None]
"""Every (client, kind) a client can write; the others (Claude Desktop has no remote servers...) are not cells."""
Converted = Callable[[str], tuple[Conversion, TriadConfig]]


@pytest.fixture(scope="module")
def converted(tmp_path_factory: pytest.TempPathFactory) -> Converted:
    root = tmp_path_factory.mktemp("clients")

    @cache
    def one(fmt: str) -> tuple[Conversion, TriadConfig]:
        return _convert(root, fmt)

    return one


def _convert(root: Path, fmt: str) -> tuple[Conversion, TriadConfig]:
    """One rich file per client; read back with every variable it names set to a marker, `<VAR>`."""
    name, data = FILES[fmt](root)
    path = root / name
    path.parent.mkdir(parents=True, exist_ok=True)
    (root / "app").mkdir(exist_ok=True)
    text = json.dumps(data, indent=2)
    if fmt in ("vscode", "zed"):  # both write JSONC
        text = "// my servers\n" + text.replace('"inputs": []', '"inputs": [],')
    path.write_text(text)
    result = convert(text, str(path))
    markers = {variable: f"<{variable}>" for variable in result.variables}
    return result, parse_config(result.yaml, environ=markers)


def test_every_supported_client_has_a_file_in_the_table() -> None:
    assert set(FILES) == set(FORMATS)


@pytest.mark.parametrize("fmt", sorted(FILES))
def test_a_clients_file_is_read_whole(converted: Converted, fmt: str) -> None:
    result, config = converted(fmt)
    assert result.lost == [], result.lost
    assert result.format == FORMATS[fmt]
    expected = {name for name, kind in KINDS.items() if SPELLS[fmt](kind) is not None}
    assert set(config.upstreams) == expected


def _matches(template: str, original: str, secrets: tuple[str, ...]) -> bool:
    """`template` (markers where variables were) is `original` with only whole secrets as variables."""
    pattern = "".join("(.+?)" if re.fullmatch(r"<[A-Z0-9_]+>", part) else re.escape(part)
                      for part in re.split(r"(<[A-Z0-9_]+>)", template))
    found = re.fullmatch(pattern, original)
    return found is not None and all(group in secrets for group in found.groups())


@pytest.mark.parametrize(("fmt", "kind"), CELLS)
def test_a_server_round_trips(converted: Converted, fmt: str, kind: str) -> None:
    spec = KINDS[kind]
    result, config = converted(fmt)
    for secret in spec.secrets:
        assert secret not in result.yaml, f"{secret} copied literally"
    upstream = config.upstreams[kind]
    assert upstream.enabled is not spec.disabled
    assert upstream.kind == ("stdio" if spec.command else
                             {"http": "streamable-http", "sse": "sse"}[spec.transport])
    if spec.command:
        assert upstream.command == spec.command and len(upstream.args) == len(spec.args)
        for got, want in zip(upstream.args, spec.args, strict=True):
            assert _matches(got, want, spec.secrets), (got, want)
        env = {key: value.get_secret_value() for key, value in upstream.env.items()}
        assert env.keys() == spec.env.keys()
        for key, want in spec.env.items():
            assert _matches(env[key], want, spec.secrets), (key, env[key], want)
    else:
        assert upstream.url == spec.url
        headers = {key: value.get_secret_value() for key, value in upstream.headers.items()}
        assert headers.keys() == spec.headers.keys()
        for key, want in spec.headers.items():
            assert _matches(headers[key], want, spec.secrets), (key, headers[key], want)


def test_claude_code_projects_are_converted_named_apart_and_run_in_their_folder(tmp_path: Path) -> None:
    path = tmp_path / ".claude.json"
    search = {"type": "http", "url": "https://search.example/mcp"}
    fs = {"type": "stdio", "command": "fs-mcp"}
    user = {"db": {"type": "stdio", "command": "pg-mcp", "args": ["--read-only"]}, "search": search}
    projects = {str(tmp_path / "shop"): {"mcpServers": {"db": {"type": "stdio", "command": "pg-mcp"}, "fs": fs,
                                                        "search": search}},
                str(tmp_path / "blog"): {"mcpServers": {"db": {"type": "stdio", "command": "sqlite-mcp"}},
                                         "disabledMcpjsonServers": ["x"]},
                str(tmp_path / "my app"): {"mcpServers": {"fs": fs}}}
    for folder in projects:
        Path(folder).mkdir()
    path.write_text(json.dumps({"mcpServers": user, "projects": projects}))
    done = subprocess.run([*TRIAD, "import", str(path)], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert "as a Claude Code file: 6 server(s) converted" in done.stderr
    config = parse_config(done.stdout)
    assert {name: (up.command or up.url, up.cwd) for name, up in config.upstreams.items()} == {
        "db": ("pg-mcp", None), "search": ("https://search.example/mcp", None),  # the same server: once
        "shop-db": ("pg-mcp", str(tmp_path / "shop")), "shop-fs": ("fs-mcp", str(tmp_path / "shop")),
        "blog-db": ("sqlite-mcp", str(tmp_path / "blog")), "my-app-fs": ("fs-mcp", str(tmp_path / "my app"))}
    for renamed in ("shop-db", "shop-fs", "blog-db", "my-app-fs"):
        assert f"imported as {renamed!r}" in done.stderr
    assert f"{tmp_path / 'blog'}/.mcp.json" in done.stderr  # the other file it refers to is named


@pytest.mark.parametrize(("settings", "off"), [
    ({"mcp": {"allowed": ["a"]}}, {"b", "c"}),
    ({"mcp": {"excluded": ["b"]}}, {"b"}),
    ({"mcp": {"allowed": ["a", "b"], "excluded": ["b"]}}, {"b", "c"}),
    ({"allowMCPServers": ["c"], "excludeMCPServers": ["a"]}, {"a", "b"}),
    ({}, set()),
])
def test_gemini_allowed_and_excluded_servers_come_in_disabled(settings: dict[str, Any], off: set[str]) -> None:
    data = {"mcpServers": {name: {"command": name} for name in "abc"}, **settings}
    result = convert(json.dumps(data), "/home/me/.gemini/settings.json")
    config = parse_config(result.yaml)
    assert {name for name, up in config.upstreams.items() if not up.enabled} == off
    assert len([note for note in result.notes if "imported disabled" in note]) == len(off)
