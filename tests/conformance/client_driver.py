"""The client the conformance suite runs in client mode: Triad's consumer, driven through Triad.

    python client_driver.py URL      (the suite appends the scenario server's URL; it sets MCP_CONFORMANCE_SCENARIO
                                      and MCP_CONFORMANCE_PROTOCOL_VERSION)

It writes a config with the scenario server as Triad's only upstream (2026-07-28 scenarios: `protocol: auto`;
`auth/*` scenarios: OAuth, with `browser.py` as the person who approves, and the credentials the scenario's
context gives, if any), starts `triad stdio` under the Python SDK client, lists the tools and calls each one with
arguments made from its schema, answering elicitation with the schema's defaults. What the suite checks is what
Triad sent upstream.
"""

from __future__ import annotations

import json
import os
import socket
import sys
import tempfile
from pathlib import Path
from typing import Any

import anyio
import mcp_types as types
import yaml
from mcp import ClientSession, StdioServerParameters, stdio_client
from mcp.shared.exceptions import MCPError
from pydantic import TypeAdapter

ROOT = Path(__file__).resolve().parents[2]
BROWSER = Path(__file__).resolve().parent / "browser.py"
CIMD_URL = "https://conformance-test.local/client-metadata.json"
"""The client ID metadata document URL the suite's `auth/basic-cimd` expects (it does not fetch it)."""
SAMPLES = {"string": "conformance", "integer": 7, "number": 1.5, "boolean": True}
AWKWARD_STRINGS = {"non_ascii_val": "Grüße", "whitespace_val": " padded ", "leading_space_val": " lead",
                   "trailing_space_val": "trail ", "internal_space_val": "a b c", "control_char_val": "a\u0001b",
                   "crlf_val": "a\r\nb", "tab_val": "\tx"}
"""Values a header cannot carry as they are (the suite checks that they arrive Base64-encoded)."""


def arguments_for(tool: dict[str, Any], schemas: dict[str, Any]) -> dict[str, Any]:
    """Arguments from the tool's schema: every primitive property (only the required ones for a tool that tests
    omission), awkward strings where the suite wants them; the schema-echo tool gets the schema it asks for."""
    schema, name = tool.get("inputSchema") or {}, tool["name"]
    if name == "json_schema_echo":
        return {"schema": schemas.get("json_schema_2020_12_tool")}
    required = set(schema.get("required") or ())
    args: dict[str, Any] = {}
    for key, prop in (schema.get("properties") or {}).items():
        kind = prop.get("type") if isinstance(prop, dict) else None
        if not isinstance(kind, str) or kind not in SAMPLES or (name.endswith("_null") and key not in required):
            continue
        args[key] = AWKWARD_STRINGS.get(key, prop.get("default", SAMPLES[kind]))
    return args


async def elicit(_ctx: Any, params: Any) -> types.ElicitResult:
    properties = (getattr(params, "requested_schema", None) or {}).get("properties") or {}
    content = {name: prop["default"] for name, prop in properties.items() if "default" in prop}
    return types.ElicitResult(action="accept", content=content)


async def sample(_ctx: Any, _params: Any) -> types.CreateMessageResult:
    return types.CreateMessageResult(role="assistant", content=types.TextContent(text="Paris"), model="driver")


def oauth_settings(context: dict[str, Any]) -> dict[str, Any]:
    """The upstream's `auth`: the scenario's pre-registered client if it names one, else a client ID metadata
    document URL (used where the server supports them; dynamic registration otherwise)."""
    with socket.socket() as probe:  # a free loopback port for the redirect
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    settings: dict[str, Any] = {"type": "oauth", "redirect_port": port, "browser": f"{sys.executable} {BROWSER}"}
    if "client-credentials" in context.get("name", "") and "client_secret" in context:
        settings = {"type": "oauth", "grant": "client_credentials", "client_id": context["client_id"],
                    "client_secret": context["client_secret"]}
    elif "client_id" in context:
        settings.update({key: context[key] for key in ("client_id", "client_secret", "issuer") if key in context})
    else:
        settings["client_metadata_url"] = CIMD_URL
    return settings


async def drive(url: str) -> None:
    modern = os.environ.get("MCP_CONFORMANCE_PROTOCOL_VERSION", "") >= "2026-07-28"
    upstream: dict[str, Any] = {"url": url, "timeout": "20s"}
    if modern:
        upstream["protocol"] = "auto"
    if os.environ.get("MCP_CONFORMANCE_SCENARIO", "").startswith("auth/"):
        upstream["auth"] = oauth_settings(json.loads(os.environ.get("MCP_CONFORMANCE_CONTEXT") or "{}"))
    with tempfile.TemporaryDirectory() as tmp:
        config = Path(tmp) / "triad.yaml"
        config.write_text(yaml.safe_dump({"upstreams": {"scenario": upstream}, "naming": {"prefix": "never"}}))
        params = StdioServerParameters(command=sys.executable, args=["-m", "gateway.cli", "stdio", "-c", str(config)],
                                       env={"PYTHONPATH": str(ROOT)})
        async with stdio_client(params) as (read, write), \
                ClientSession(read, write, elicitation_callback=elicit, sampling_callback=sample) as session:
            await session.initialize()
            # Raw, so schemas reach the arguments exactly as Triad served them (the SDK's model trims keywords).
            listed = await session.send_request(types.ListToolsRequest(), TypeAdapter(dict[str, Any]))
            schemas = {tool["name"]: tool.get("inputSchema") for tool in listed["tools"]}
            for tool in listed["tools"]:
                try:
                    result = await session.call_tool(tool["name"], arguments_for(tool, schemas))
                except MCPError as exc:  # the suite judges what reached its server; go on with the next tool
                    print(f"{tool['name']}: {exc}", file=sys.stderr)
                else:
                    print(f"{tool['name']}: {'error' if result.is_error else 'ok'}", file=sys.stderr)


if __name__ == "__main__":
    anyio.run(drive, sys.argv[-1])
