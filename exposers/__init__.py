"""The MCP server(s) Triad offers: the SDK server object, stdio, the streamable HTTP + SSE app with its listener,
the directory of downstream sessions and the notifier that tells them of changes."""

from exposers._listener import ListenerConfig, ListenerServer
from exposers.http import build_app
from exposers.input_rounds import InputRounds
from exposers.notify import Notifier
from exposers.server import build_server
from exposers.sessions import Sessions
from exposers.stdio import serve_stdio

__all__ = [
    "InputRounds",
    "ListenerConfig",
    "ListenerServer",
    "Notifier",
    "Sessions",
    "build_app",
    "build_server",
    "serve_stdio",
]
