"""Serving one client over stdio (what Claude Desktop launches): the SDK server on this process's stdin/stdout.

Triad's own logs go to stderr, never stdout, which carries the protocol.
"""

from __future__ import annotations

from mcp.server.stdio import stdio_server

from exposers._wire import StrictMessages
from exposers.server import GatewayServer


async def serve_stdio(server: GatewayServer) -> None:
    async with stdio_server() as (read, write):
        await server.run(StrictMessages(read, write), write, server.create_initialization_options())
