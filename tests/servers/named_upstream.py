"""A stdio MCP upstream whose tools are named on the command line; each call answers with the raw name it ran.

    python named_upstream.py --name N --tool delete_file [--tool Delete_File ...]

For the tests of exposed names: which upstream tool an exposed name reaches, whatever the upstream adds.
"""

from __future__ import annotations

import argparse
from typing import Any

import anyio
from mcp.server import Server


def build_server(name: str, tools: list[str], tag: str | None = None) -> Server[Any]:
    listed = [{"name": tool, "description": f"The tool {tool}.", "inputSchema": {"type": "object"}}
              for tool in tools]

    async def list_tools(ctx: Any, params: Any) -> dict[str, Any]:
        return {"tools": listed}

    async def call_tool(ctx: Any, params: Any) -> dict[str, Any]:
        said = f"called {params.name}" + (f" on {tag}" if tag else "")
        return {"content": [{"type": "text", "text": said}]}

    return Server(name, version="1.0", on_list_tools=list_tools, on_call_tool=call_tool)


async def serve(server: Server[Any]) -> None:
    from mcp.server.stdio import stdio_server

    async with stdio_server() as (read, write):
        await server.run(read, write, server.create_initialization_options())


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--name", default="named")
    parser.add_argument("--tool", action="append", default=[], help="a tool name (repeatable)")
    parser.add_argument("--tag", help="answer `called <tool> on <tag>`, to tell upstreams with the same tools apart")
    args = parser.parse_args()
    anyio.run(serve, build_server(args.name, args.tool, args.tag))


if __name__ == "__main__":
    main()
