"""What an operator relies on: /metrics, JSON logs, and `triad import` of the three client file shapes."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import httpx2
import pytest
from mcp.shared.exceptions import MCPError
from prometheus_client.parser import text_string_to_metric_families

from gateway.runtime._loading import parse_config
from tests.conftest import TRIAD, Proc, start_triad, stdio_upstream, write_config
from tests.test_gateway_e2e import call, http_session
from tests.test_policy_e2e import session_as

pytestmark = pytest.mark.anyio


def samples(text: str) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    return {(s.name, tuple(sorted(s.labels.items()))): s.value
            for family in text_string_to_metric_families(text) for s in family.samples}


async def test_metrics_count_the_calls_made(procs: list[Proc], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
                                            ) -> None:
    monkeypatch.setenv("TRIAD_TEST_METRICS_TOKEN", "metrics-secret-token-777")
    config = write_config(tmp_path, {
        "upstreams": {"fx": stdio_upstream("metrics"), "gx": stdio_upstream("metrics-2")},
        "clients": {"c": {"token": "${TRIAD_TEST_METRICS_TOKEN}", "tools": {"deny": ["gx__*"]}}}})
    url = start_triad(procs, config, wait_ready=2)
    async with session_as(url, "metrics-secret-token-777") as via:
        for i in range(3):
            await call(via, "fx__echo", {"text": f"secret-argument-{i}"})
        await call(via, "fx__fail")
        with pytest.raises(MCPError):
            await call(via, "gx__echo", {"text": "denied"})
        await via.read_resource("fixture://fx/static")
    async with httpx2.AsyncClient() as http:
        text = (await http.get(url.replace("/mcp", "/metrics"),
                               headers={"Authorization": "Bearer metrics-secret-token-777"})).text
    found = samples(text)
    assert found[("triad_calls_total", (("kind", "tool"), ("outcome", "ok"), ("upstream", "fx")))] == 3
    assert found[("triad_calls_total", (("kind", "tool"), ("outcome", "tool_error"), ("upstream", "fx")))] == 1
    assert found[("triad_calls_total", (("kind", "resource"), ("outcome", "ok"), ("upstream", "fx")))] == 1
    assert found[("triad_call_duration_seconds_count", (("kind", "tool"), ("upstream", "fx")))] == 4
    assert found[("triad_denied_calls_total", (("layer", "agent"),))] == 1
    assert found[("triad_upstream_state", (("state", "ready"), ("upstream", "gx")))] == 1
    assert found[("triad_registry_tools", ())] > 0
    assert "secret-argument" not in text and "metrics-secret-token" not in text


async def test_json_log_lines_parse(procs: list[Proc], tmp_path: Path) -> None:
    config = write_config(tmp_path, {"upstreams": {"fx": stdio_upstream("jsonlog")}})
    proc = Proc([*TRIAD, "serve", "-c", str(config), "--port", "0", "--log-format", "json"])
    procs.append(proc)
    match = await proc.until(r'"message": "listening on (http://127\.0\.0\.1:\d+/mcp)')
    await proc.until(r"upstream fx ready")
    async with http_session(match.group(1)) as via:
        await call(via, "echo", {"text": "x"})
    lines = [json.loads(line) for line in proc.stderr.splitlines() if line.strip()]
    assert {"time", "level", "logger", "message"} <= set(lines[0])
    assert any(line["logger"] == "triad.upstream" and "ready" in line["message"] for line in lines)


CLAUDE = {"mcpServers": {
    "filesystem": {"command": "npx", "args": ["-y", "@modelcontextprotocol/server-filesystem", "/home/me"]},
    "github": {"command": "docker", "args": ["run", "-i", "ghcr.io/github/github-mcp-server"],
               "env": {"GITHUB_PERSONAL_ACCESS_TOKEN": "${GITHUB_TOKEN}"}},
}}
CURSOR = {"mcpServers": {
    "remote": {"url": "https://mcp.example.com/mcp", "headers": {"Authorization": "Bearer ${env:API_KEY}"}},
    "legacy": {"url": "http://localhost:9000/sse", "disabled": True, "autoApprove": ["read"]},
}}
VSCODE = {"inputs": [{"type": "promptString", "id": "api-key", "password": True}], "servers": {
    "search": {"type": "http", "url": "https://search.example/mcp", "headers": {"X-Key": "${input:api-key}"}},
    "local": {"type": "stdio", "command": "python", "args": ["server.py"], "envFile": "${workspaceFolder}/.env"},
}}


@pytest.mark.parametrize(("name", "data", "expected"), [
    ("claude_desktop_config.json", CLAUDE, {"filesystem": "stdio", "github": "stdio"}),
    ("mcp.json", CURSOR, {"remote": "streamable-http", "legacy": "sse"}),
    (".vscode/mcp.json", VSCODE, {"search": "streamable-http", "local": "stdio"}),
])
def test_import_converts_the_three_shapes(tmp_path: Path, name: str, data: dict, expected: dict[str, str]) -> None:
    path = tmp_path / name
    path.parent.mkdir(exist_ok=True)
    path.write_text(json.dumps(data))
    (tmp_path / ".env").write_text("LOCAL_KEY=from-the-env-file\n")
    done = subprocess.run([*TRIAD, "import", str(path)], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    config = parse_config(done.stdout, environ={"GITHUB_TOKEN": "t", "API_KEY": "k", "LOCAL_KEY": "l"})
    assert {n: up.kind for n, up in config.upstreams.items()} == expected
    if name == "mcp.json":
        assert "# note: legacy.autoApprove: left out" in done.stdout
        assert config.upstreams["legacy"].enabled is False
        assert config.upstreams["remote"].headers["Authorization"].get_secret_value() == "Bearer k"
    if name == ".vscode/mcp.json":
        assert config.upstreams["local"].env["LOCAL_KEY"].get_secret_value() == "l"
        assert "API_KEY" in done.stderr and "${API_KEY}" in done.stdout


def test_import_of_a_file_without_servers(tmp_path: Path) -> None:
    path = tmp_path / "other.json"
    path.write_text('{"theme": "dark"}')
    done = subprocess.run([*TRIAD, "import", str(path)], capture_output=True, text=True, timeout=60)
    assert done.returncode == 1
    assert "no mcpServers (Claude Desktop, Cursor) or servers (VS Code) block found" in done.stderr


async def test_a_clients_trace_continues_through_triad_to_the_upstream(procs: list[Proc], tmp_path: Path) -> None:
    from mcp import Client

    config = write_config(tmp_path, {"upstreams": {"fx": stdio_upstream("trace")}})
    proc = Proc([*TRIAD, "serve", "-c", str(config), "--port", "0"], env={"OTEL_TRACES_EXPORTER": "console"})
    procs.append(proc)
    url = (await proc.until(r"listening on (http://127\.0\.0\.1:\d+/mcp)")).group(1)
    await proc.until(r"upstream fx ready")
    trace_id = "4bf92f3577b34da6a3ce929d0e0e4736"
    traceparent = f"00-{trace_id}-00f067aa0ba902b7-01"
    async with Client(url, mode="legacy", cache=None) as client:
        result = await client.call_tool("echo", {"text": "traced"}, meta={"traceparent": traceparent})
    received = (result.meta or {})["fixture/received-meta"]["traceparent"]
    assert received.split("-")[1] == trace_id  # the same trace, now with Triad's own span as the parent
    assert received != traceparent
    proc.terminate()
    spans = proc.popen.stdout.read().decode() if proc.popen.stdout else ""
    assert f'"trace_id": "0x{trace_id}"' in spans
