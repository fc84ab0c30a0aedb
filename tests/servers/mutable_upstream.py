"""A stdio MCP upstream whose tools are read from a JSON file: a tool rewritten while it is served.

    python mutable_upstream.py --tools tools.json

`tools.json` is a list of tool definitions, read again for every `tools/list`; when the file changes, the upstream
sends `notifications/tools/list_changed` (its own client then re-lists). Each call answers `called <name>`.
For the tests of pinned definitions (`pin_definitions`): a description, title, schema or annotations changed after
the tool was listed or called.
"""

from __future__ import annotations

import argparse
import json
import os
from typing import Any

import anyio
from mcp.server import Server
from mcp.server.stdio import stdio_server

POLL = 0.05
"""Seconds between looks at the tools file (a fixture: polling keeps it free of a watcher dependency)."""


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--tools", required=True)
    parser.add_argument("--name", default="mutable")
    options = parser.parse_args()
    sessions: list[Any] = []

    async def list_tools(ctx: Any, params: Any) -> dict[str, Any]:
        if not sessions:
            sessions.append(ctx.session)
        return {"tools": json.loads(await anyio.Path(options.tools).read_text(encoding="utf-8"))}

    async def call_tool(ctx: Any, params: Any) -> dict[str, Any]:
        return {"content": [{"type": "text", "text": f"called {params.name}"}]}

    server = Server(options.name, version="1.0", on_list_tools=list_tools, on_call_tool=call_tool)

    async def watch() -> None:
        seen = os.stat(options.tools).st_mtime_ns
        while True:
            await anyio.sleep(POLL)
            now = os.stat(options.tools).st_mtime_ns
            if now != seen and sessions:
                seen = now
                await sessions[0].send_tool_list_changed()

    async def run() -> None:
        async with stdio_server() as (read, write), anyio.create_task_group() as tg:
            tg.start_soon(watch)
            await server.run(read, write, server.create_initialization_options())
            tg.cancel_scope.cancel()

    anyio.run(run)


if __name__ == "__main__":
    main()
