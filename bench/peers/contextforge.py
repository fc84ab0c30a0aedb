"""IBM ContextForge (`mcp-contextforge-gateway`) as a benchmark peer: how to start it headless on loopback with SQLite,
and the admin setup that puts the bench's echo upstream behind one of its virtual servers.

It runs from its own venv (bench/.venv-contextforge, made by `make bench`), never Triad's: this module only builds
its command line and environment and talks to it over HTTP, so it imports nothing of it.

Settings changed from ContextForge's defaults, and why:
- RATE_LIMITING_ENABLED=false: by default MCP calls are limited to 100 a minute per user (burst 20), which the bench
  passes in its first second; the issue asks for the run without it.
- SSRF_ALLOW_LOCALHOST=true: by default it refuses to register an upstream on a loopback address, and the bench's
  echo upstream is on 127.0.0.1 (nothing leaves loopback).
- HOST=127.0.0.1, PORT, DATABASE_URL (a fresh SQLite file in the run's temporary folder), JWT_SECRET_KEY,
  AUTH_ENCRYPTION_SECRET, PLATFORM_ADMIN_PASSWORD, BASIC_AUTH_PASSWORD (required; random for each run, never
  shown), PLATFORM_ADMIN_EMAIL (the user the bench's token names).
- PLUGINS_ENABLED=false: its default, stated so that a plugin config lying around cannot turn plugins on.
Left at their defaults: stateless streamable HTTP with JSON responses (USE_STATEFUL_SESSIONS=false: without a
downstream session id each call opens an upstream session of its own: initialize, call, close), log level ERROR,
admin UI and admin API off, token usage logging, the database cache, observability off.

Two servers:
- its default multi-worker server, what its `make serve` (run-gunicorn.sh) starts: gunicorn with uvicorn workers,
  min(2 x CPUs + 1, 16) of them, the app preloaded, access log off;
- one worker: `mcpgateway --host --port`, its PyPI quick start (one uvicorn process).
"""

from __future__ import annotations

import os
import secrets
import subprocess
from pathlib import Path
from typing import Any

import anyio
import httpx2

HERE = Path(__file__).resolve().parent
BIN = HERE.parent / ".venv-contextforge" / "bin"
VERSION = "1.0.7.post20260921"
"""Pinned in the Makefile: the newest release that runs on Python 3.11 (1.0.8 and later need 3.12+)."""
ADMIN = "admin@example.com"


def installed() -> bool:
    return (BIN / "mcpgateway").exists() and (BIN / "gunicorn").exists()


def default_workers() -> int:
    """run-gunicorn.sh's GUNICORN_WORKERS=auto: 2 x CPUs + 1, at most 16."""
    return min(2 * len(os.sched_getaffinity(0)) + 1, 16)


def environment(workdir: Path, port: int) -> dict[str, str]:
    return {
        "HOST": "127.0.0.1", "PORT": str(port), "DATABASE_URL": f"sqlite:///{workdir / 'contextforge.db'}",
        "JWT_SECRET_KEY": secrets.token_urlsafe(32), "AUTH_ENCRYPTION_SECRET": secrets.token_urlsafe(32),
        "PLATFORM_ADMIN_EMAIL": ADMIN, "PLATFORM_ADMIN_PASSWORD": secrets.token_urlsafe(16) + "-A1",
        "BASIC_AUTH_PASSWORD": secrets.token_urlsafe(16) + "-A1",
        "RATE_LIMITING_ENABLED": "false", "SSRF_ALLOW_LOCALHOST": "true", "PLUGINS_ENABLED": "false",
    }


def command(port: int, workers: int | None) -> list[str]:
    """`workers=None`: the one-worker quick start; otherwise run-gunicorn.sh's command line with that many."""
    if workers is None:
        return [str(BIN / "mcpgateway"), "--host", "127.0.0.1", "--port", str(port)]
    return [str(BIN / "gunicorn"), "-c", str(HERE / "contextforge_gunicorn.py"),
            "--worker-class", "uvicorn.workers.UvicornWorker", "--workers", str(workers), "--timeout", "600",
            "--max-requests", "100000", "--max-requests-jitter", "100", "--preload",
            "--access-logfile", "/dev/null", "--error-logfile", "-", "--bind", f"127.0.0.1:{port}",
            "mcpgateway.main:app"]


async def wait_healthy(base: str, popen: subprocess.Popen[bytes], log: Path, seconds: float = 180) -> None:
    """Until /health answers 200 (its first start runs the database migrations: tens of seconds)."""
    deadline = anyio.current_time() + seconds
    async with httpx2.AsyncClient() as http:
        while True:
            try:
                if (await http.get(f"{base}/health")).status_code == 200:
                    return
            except httpx2.HTTPError:
                pass
            if popen.poll() is not None or anyio.current_time() > deadline:
                raise RuntimeError(f"ContextForge did not start ({base}); the end of its log:\n{tail(log)}")
            await anyio.sleep(0.25)


def tail(log: Path) -> str:
    return log.read_text()[-2000:]


def mint_token(env: dict[str, str]) -> str:
    """A JWT for the admin user from ContextForge's own utility (with the expiry and `jti` it requires)."""
    done = subprocess.run([str(BIN / "python"), "-m", "mcpgateway.utils.create_jwt_token", "--username", ADMIN,
                           "--exp", "120", "--secret", env["JWT_SECRET_KEY"]], capture_output=True, text=True,
                          env={**os.environ, **env}, check=False)
    if done.returncode != 0 or not done.stdout.strip():
        raise RuntimeError(f"ContextForge's create_jwt_token failed: {done.stderr[-1000:]}")
    return done.stdout.strip().splitlines()[-1]


async def publish(base: str, upstream: str, token: str) -> tuple[str, dict[str, str]]:
    """Register `upstream` (streamable HTTP) as a gateway and put its tools in a virtual server. Returns the virtual
    server's MCP URL and the names it gives the upstream's tools (its gateway prefix: `echo` becomes `echo-echo`)."""
    auth = {"Authorization": f"Bearer {token}"}
    async with httpx2.AsyncClient(headers=auth, timeout=60) as http:
        gateway = await _json(await http.post(f"{base}/gateways", json={
            "name": "echo", "url": upstream, "transport": "STREAMABLEHTTP"}))
        tools = [t for t in await _json(await http.get(f"{base}/tools")) if t.get("gatewayId") == gateway["id"]]
        names = {t["originalName"]: t["name"] for t in tools}
        if not {"echo", "echo_slow"} <= names.keys():
            raise RuntimeError(f"ContextForge listed {sorted(names)} for the echo upstream")
        server = await _json(await http.post(f"{base}/servers", json={"server": {
            "name": "bench", "description": "the bench's echo upstream",
            "associated_tools": [t["id"] for t in tools]}}))
    return f"{base}/servers/{server['id']}/mcp", names


async def _json(response: httpx2.Response) -> Any:
    if response.status_code >= 300:
        raise RuntimeError(f"ContextForge {response.request.method} {response.request.url.path}: "
                           f"HTTP {response.status_code} {response.text[:500]}")
    return response.json()
