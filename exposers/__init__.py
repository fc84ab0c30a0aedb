"""The MCP server(s) Triad offers: the SDK server object, stdio, and the streamable HTTP + SSE app."""

from exposers._listener import ListenerConfig, ListenerServer
from exposers.http import build_app
from exposers.input_rounds import InputRounds
from exposers.server import build_server
from exposers.stdio import serve_stdio

__all__ = [
    "InputRounds",
    "ListenerConfig",
    "ListenerServer",
    "build_app",
    "build_server",
    "serve_stdio",
]
