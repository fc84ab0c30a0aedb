"""`triad import` of real client files loses nothing silently (issue 21, "Imports that lose nothing silently")."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

from gateway.cli._jsonc import loads_jsonc
from gateway.runtime._loading import parse_config
from tests.conftest import TRIAD

ENV = {"GITHUB_PERSONAL_ACCESS_TOKEN": "g", "REMOTE_AUTHORIZATION": "r", "HOME": "/home/me", "API_KEY": "k",
       "SEARCH_API_KEY": "s", "DB_URL": "d", "API_TOKEN": "t", "LOCAL_TOKEN": "l", "WS_TOKEN": "w",
       "REMOTE_API_KEY": "q"}


def triad_import(path: Path, *extra: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([*TRIAD, "import", str(path), *extra], capture_output=True, text=True, timeout=60)


def write(path: Path, text: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    return path


def test_windsurf_server_url_becomes_a_url(tmp_path: Path) -> None:
    path = write(tmp_path / ".codeium/windsurf/mcp_config.json", json.dumps({"mcpServers": {
        "remote": {"serverUrl": "https://mcp.example.com/mcp", "disabledTools": ["drop_table"]},
        "legacy": {"serverUrl": "https://mcp.example.com/sse"}}}))
    done = triad_import(path)
    assert done.returncode == 0, done.stderr
    assert "as a Windsurf file: 2 server(s) converted" in done.stderr
    config = parse_config(done.stdout)
    assert config.upstreams["remote"].kind == "streamable-http" and config.upstreams["legacy"].kind == "sse"
    assert config.upstreams["remote"].tools.exclude == ("drop_table",)


def test_gemini_http_url_timeout_and_tool_filters(tmp_path: Path) -> None:
    path = write(tmp_path / ".gemini/settings.json", json.dumps({"theme": "dark", "mcpServers": {
        "remote": {"httpUrl": "https://api.example/mcp", "timeout": 600000, "trust": True,
                   "includeTools": ["read", "search"], "excludeTools": ["delete"]},
        "events": {"url": "http://localhost:9000/events", "env": {"WHERE": "$HOME/data"}}}}))
    done = triad_import(path)
    assert done.returncode == 0, done.stderr
    assert "as a Gemini CLI file" in done.stderr
    assert "note: remote.trust: left out" in done.stderr
    config = parse_config(done.stdout, environ=ENV)
    remote, events = config.upstreams["remote"], config.upstreams["events"]
    assert remote.kind == "streamable-http" and remote.timeout == 600.0  # milliseconds, not seconds
    assert (remote.tools.include, remote.tools.exclude) == (("read", "search"), ("delete",))
    assert events.kind == "sse"  # Gemini CLI's `url` is SSE, whatever the path
    assert events.env["WHERE"].get_secret_value() == "/home/me/data"


def test_cursor_workspace_and_home_placeholders_are_resolved(tmp_path: Path) -> None:
    workspace = tmp_path / "project"
    path = write(workspace / ".cursor/mcp.json", json.dumps({"mcpServers": {
        "local": {"command": "node", "args": ["${workspaceFolder}/server.js", "${userHome}/.config/x.json"],
                  "env": {"WS_TOKEN": "${env:WS_TOKEN}"}}}}))
    done = triad_import(path)
    assert done.returncode == 0, done.stderr
    assert "as a Cursor file" in done.stderr
    local = parse_config(done.stdout, environ=ENV).upstreams["local"]
    assert local.args == (f"{workspace}/server.js", "/home/me/.config/x.json")
    assert local.env["WS_TOKEN"].get_secret_value() == "w"
    assert "WS_TOKEN" in done.stderr and "HOME" in done.stderr  # the variables the result reads are listed


def test_a_workspace_placeholder_outside_a_workspace_is_a_loss(tmp_path: Path) -> None:
    path = write(tmp_path / "mcp.json", json.dumps({"mcpServers": {
        "local": {"command": "node", "args": ["${workspaceFolder}/server.js"]}}}))
    done = triad_import(path)
    assert done.returncode == 1 and done.stdout == ""
    assert "not converted: local.args[0]: ${workspaceFolder}" in done.stderr
    forced = triad_import(path, "--force")
    assert forced.returncode == 0
    assert "# NOT CONVERTED: local.args[0]: ${workspaceFolder}" in forced.stdout


VSCODE_JSONC = """{
  // VS Code writes comments and trailing commas
  "inputs": [{"type": "promptString", "id": "api-key", "password": true},],
  "servers": {
    "search": {"type": "http", "url": "https://search.example/mcp", "headers": {"X-Key": "${input:api-key}"},},
    /* a local server, its variables in an env file */
    "local": {"type": "stdio", "command": "python", "args": ["server.py"], "envFile": "${workspaceFolder}/.env",
              "dev": {"watch": "**/*.py"}},
  },
}
"""


def test_vscode_jsonc_and_its_env_file(tmp_path: Path) -> None:
    path = write(tmp_path / ".vscode/mcp.json", VSCODE_JSONC)
    write(tmp_path / ".env", "# comment\nDB_URL=postgres://me:pw@db/x\nexport API_TOKEN=zzz\n")
    done = triad_import(path)
    assert done.returncode == 0, done.stderr
    assert "as a VS Code file: 2 server(s) converted" in done.stderr
    config = parse_config(done.stdout, environ=ENV)
    assert config.upstreams["search"].headers["X-Key"].get_secret_value() == "k"
    local = config.upstreams["local"]
    assert {k: v.get_secret_value() for k, v in local.env.items()} == {"DB_URL": "d", "API_TOKEN": "t"}
    assert "postgres://me:pw" not in done.stdout and "zzz" not in done.stdout
    for variable in ("API_KEY", "DB_URL", "API_TOKEN"):
        assert variable in done.stderr


def test_jsonc_keeps_strings_that_look_like_comments() -> None:
    assert loads_jsonc('{"url": "http://x//y", "s": "/* no */", "a": [1, 2, ], } // end') == \
        {"url": "http://x//y", "s": "/* no */", "a": [1, 2]}


def test_literal_secrets_become_variables(tmp_path: Path) -> None:
    path = write(tmp_path / "claude_desktop_config.json", json.dumps({"mcpServers": {
        "github": {"command": "docker", "args": ["run", "-i", "ghcr.io/github/github-mcp-server"],
                   "env": {"GITHUB_PERSONAL_ACCESS_TOKEN": "ghp_abcdefghijklmnop1234", "LOG_LEVEL": "debug"}},
        "remote": {"url": "https://api.example/mcp?api_key=abc123def456&region=eu",
                   "headers": {"Authorization": "Bearer abcdef0123456789"}},
        "local": {"command": "server", "args": ["--token", "sk-abcdefghijkl123", "--verbose"]}}}))
    done = triad_import(path)
    assert done.returncode == 0, done.stderr
    assert "as a Claude Desktop file" in done.stderr
    for secret in ("ghp_abcdefghijklmnop1234", "abc123def456", "abcdef0123456789", "sk-abcdefghijkl123"):
        assert secret not in done.stdout
    config = parse_config(done.stdout, environ=ENV)
    github, remote, local = (config.upstreams[n] for n in ("github", "remote", "local"))
    assert github.env["GITHUB_PERSONAL_ACCESS_TOKEN"].get_secret_value() == "g"
    assert github.env["LOG_LEVEL"].get_secret_value() == "debug"  # not a secret: kept as it is
    assert remote.headers["Authorization"].get_secret_value() == "Bearer r"
    assert remote.url == "https://api.example/mcp?api_key=q&region=eu"
    assert local.args == ("--token", "l", "--verbose")
    for variable in ("GITHUB_PERSONAL_ACCESS_TOKEN", "REMOTE_AUTHORIZATION", "REMOTE_API_KEY", "LOCAL_TOKEN"):
        assert variable in done.stderr


def test_an_empty_server_name_and_unknown_settings_fail_unless_forced(tmp_path: Path) -> None:
    path = write(tmp_path / "mcp.json", json.dumps({"mcpServers": {
        "": {"command": "x"}, "ok": {"command": "y", "oauth": {"enabled": True}}}}))
    done = triad_import(path)
    assert done.returncode == 1 and done.stdout == ""
    assert "not converted: '': a server with an empty name" in done.stderr
    assert "not converted: ok.oauth: Triad has no such setting" in done.stderr
    assert "2 setting(s) could not be converted; nothing written" in done.stderr
    forced = triad_import(path, "--force")
    assert forced.returncode == 0
    assert list(parse_config(forced.stdout).upstreams) == ["ok"]


@pytest.mark.parametrize(("source", "expected"), [("gemini", 30.0), ("cline", 30000.0)])
def test_a_bare_timeout_needs_a_known_unit(tmp_path: Path, source: str, expected: float) -> None:
    path = write(tmp_path / "servers.json", json.dumps({"mcpServers": {"s": {"command": "x", "timeout": 30000}}}))
    done = triad_import(path)
    assert done.returncode == 1
    assert "s.timeout: 30000 in an unknown unit" in done.stderr
    known = triad_import(path, "--from", source)
    assert known.returncode == 0, known.stderr
    assert parse_config(known.stdout).upstreams["s"].timeout == expected
