"""Gunicorn hook for ContextForge's multi-worker row (run in its venv, not Triad's): with the app preloaded, each
worker drops the database pool it inherited from the master (SQLAlchemy's recipe for forking), as ContextForge's own
gunicorn config does."""


def post_fork(server, worker):  # gunicorn's hook signature
    from mcpgateway.db import engine

    engine.dispose(close=False)
