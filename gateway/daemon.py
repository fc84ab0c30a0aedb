"""Assembling the daemon: pool, dispatcher, notifier, exposers, and the one root task group that owns them.

`running_gateway` opens the root task group, starts every upstream's owner task and the notifier in it, and on
exit stops them all (stdio children and their process trees are ended by the transport's shielded cleanup).
`serve_http` and `serve_stdio_client` run an exposer inside it; SIGTERM and SIGINT end the exposer, then the
group. Nothing here calls `asyncio.create_task`.
"""

from __future__ import annotations

import contextlib
import logging
import signal
import socket
import sys
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Any

import anyio
import uvicorn
from anyio.abc import TaskGroup

from consumers import UpstreamPool
from exposers import build_app, build_server, serve_stdio
from exposers.notify import Notifier
from gateway.config import TriadConfig, is_loopback
from gateway.dispatch import Dispatcher
from gateway.identity import LOCAL, Identity

logger = logging.getLogger("triad")


@dataclass
class Gateway:
    config: TriadConfig
    pool: UpstreamPool
    dispatcher: Dispatcher
    notifier: Notifier
    task_group: TaskGroup


@contextlib.asynccontextmanager
async def running_gateway(config: TriadConfig, host: str | None = None) -> AsyncIterator[Gateway]:
    """`host` is where the exposer listens (default: the config's); off loopback the remote deny list applies."""
    dispatcher: Dispatcher | None = None

    def on_change(upstream: Any) -> None:
        if dispatcher is not None:
            dispatcher.on_upstream_change(upstream)

    pool = UpstreamPool(config, on_change)
    dispatcher = Dispatcher(config, pool, remote=not is_loopback(host or config.listen.host))
    dispatcher.rebuild()
    notifier = Notifier(dispatcher)
    async with anyio.create_task_group() as tg:
        tg.start_soon(notifier.run, name="notifier")
        pool.start(tg)
        try:
            yield Gateway(config, pool, dispatcher, notifier, tg)
        finally:
            pool.stop()
            tg.cancel_scope.cancel()


class _Uvicorn(uvicorn.Server):
    """uvicorn's own signal capture re-raises the signal after shutdown, which would kill the process before the
    upstreams are closed; the daemon handles signals itself."""

    @contextlib.contextmanager
    def capture_signals(self) -> Any:
        yield


async def serve_http(config: TriadConfig, host: str, port: int) -> None:
    async with running_gateway(config, host) as gw:
        server = build_server(gw.dispatcher, gw.notifier, LOCAL)
        app = build_app(server, gw.dispatcher, host)
        family = socket.AF_INET6 if ":" in host else socket.AF_INET
        sock = socket.socket(family, socket.SOCK_STREAM)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind((host, port))
        except OSError as exc:
            sock.close()
            raise SystemExit(f"triad: cannot listen on {host}:{port}: {exc.strerror}") from None
        actual_port = sock.getsockname()[1]
        userver = _Uvicorn(uvicorn.Config(app, log_config=None, lifespan="on", access_log=False,
                                          timeout_graceful_shutdown=5))
        gw.task_group.start_soon(_stop_on_signals, userver)
        shown = f"[{host}]" if ":" in host else host
        logger.info("listening on http://%s:%d/mcp (legacy SSE at /sse); %d upstream(s): %s", shown, actual_port,
                    len(gw.pool.upstreams), ", ".join(gw.pool.upstreams) or "none")
        await userver.serve(sockets=[sock])
        logger.info("shutting down")


async def serve_stdio_client(config: TriadConfig, identity: Identity) -> None:
    async with running_gateway(config) as gw:
        server = build_server(gw.dispatcher, gw.notifier, identity)
        gw.task_group.start_soon(_cancel_on_signals, gw.task_group)
        await serve_stdio(server)


async def _stop_on_signals(userver: uvicorn.Server) -> None:
    with anyio.open_signal_receiver(signal.SIGTERM, signal.SIGINT) as signals:
        async for signum in signals:
            logger.info("received %s", signal.Signals(signum).name)
            if userver.should_exit:
                userver.force_exit = True
            userver.should_exit = True


async def _cancel_on_signals(task_group: TaskGroup) -> None:
    with anyio.open_signal_receiver(signal.SIGTERM, signal.SIGINT) as signals:
        async for _ in signals:
            task_group.cancel_scope.cancel()
            return


def configure_logging(level: str = "INFO") -> None:
    logging.basicConfig(stream=sys.stderr, level=getattr(logging, level.upper(), logging.INFO),
                        format="%(asctime)s %(levelname)-7s %(name)s: %(message)s")
    for noisy in ("httpx", "httpx2", "mcp", "uvicorn.error"):
        logging.getLogger(noisy).setLevel(logging.WARNING)
