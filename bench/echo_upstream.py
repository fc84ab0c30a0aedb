"""The benchmark's upstream: a Python SDK server with `echo` and `echo_slow` (sleeps 10 ms).

    python echo_upstream.py --http PORT     streamable HTTP on 127.0.0.1
    python echo_upstream.py                 stdio
"""

from __future__ import annotations

import argparse

import anyio
from mcp.server import MCPServer

server = MCPServer("bench-echo")


@server.tool(description="Echo the text back.")
def echo(text: str) -> str:
    return text


@server.tool(description="Echo the text back after 10 ms.")
async def echo_slow(text: str) -> str:
    await anyio.sleep(0.010)
    return text


def add_synthetic_tools(count: int) -> None:
    for i in range(count):
        server.add_tool(lambda x: x, name=f"synthetic_{i:03d}", description=f"Synthetic tool {i}.")


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("--http", type=int)
    parser.add_argument("--extra-tools", type=int, default=0)
    args = parser.parse_args()
    add_synthetic_tools(args.extra_tools)
    if args.http is None:
        server.run()
    else:
        server.run("streamable-http", host="127.0.0.1", port=args.http)
