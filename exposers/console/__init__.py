"""The web console for operators at `/console` on the HTTP listener (off unless `console: {enabled: true}`).

Owners sign in with their bearer token; the pages show upstreams (state, why, a child's last stderr lines),
the registry and any client's view of it (`triad plan` and `triad explain`), calls in flight and recent ones,
reloads, and pinned definitions waiting for approval. See `app` for the routes and `auth` for who may use them.
"""

from exposers.console.app import build_console

__all__ = ["build_console"]
