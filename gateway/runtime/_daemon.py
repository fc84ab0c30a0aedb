"""Assembling the daemon: pool, dispatcher, notifier, exposers, and the one root task group that owns them.

`running_gateway` opens the root task group, starts every upstream's owner task and the notifier in it, and on
exit stops them all (stdio children and their process trees are ended by the transport's shielded cleanup).
`serve_http` and `serve_stdio_client` run an exposer inside it; SIGTERM and SIGINT end the exposer, then the
group: calls in flight get `listen.shutdown_grace` to finish, then a JSON-RPC error each. Nothing here calls
`asyncio.create_task`.
"""

from __future__ import annotations

import contextlib
import gc
import importlib.util
import logging
import math
import signal
import socket
import sys
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit

import anyio
import uvicorn
from anyio.abc import TaskGroup

from consumers import ChildGroups, Upstream, UpstreamPool, UpstreamState
from consumers.oauth import Redirects
from exposers import (
    InputRounds,
    ListenerConfig,
    ListenerServer,
    Notifier,
    Sessions,
    build_app,
    build_server,
    serve_stdio,
)
from gateway.calls import Dispatcher
from gateway.config import TriadConfig, is_loopback
from gateway.identity import LOCAL, Identity
from gateway.observe import JsonFormatter, TextFormatter, mask_logs
from gateway.runtime._pin_watch import watch_pins
from gateway.runtime._reload import Reloader
from gateway.state import NameLedger, NameLedgerUnreadable

if TYPE_CHECKING:  # with `cluster:` only: redis-py and cryptography are optional (`_cluster`)
    from gateway.cluster import Cluster

logger = logging.getLogger("triad")
GC_THRESHOLDS = (50_000, 20, 100)
"""Allocations between young collections, and young (then middle) collections between older ones. Python's
defaults (700, 10, 10) made a client's body of 100,000 small values set off some 140 collections while the SDK
parsed and validated it (45 ms of 60 ms in a daemon-sized heap, 15 ms with these); a judgment call: cyclic
garbage now waits for 50,000 allocations (a few MB at most) instead of 700."""

LISTEN_BACKLOG = 2048
"""Pending connections the kernel keeps before uvicorn accepts them (uvicorn's own default backlog)."""

CHILDREN_SUFFIX = ".children"
"""`<state_dir>/<config name>.children/`: one file per run, the process groups of its stdio children."""
SHUTDOWN_REASON = "stopped because Triad is shutting down"
ANSWER_TIME = 10.0
"""After the shutdown grace, how long the calls still running may take to be cancelled upstream and answered with
an error, before uvicorn cancels whatever is left."""


@dataclass
class Gateway:
    config: TriadConfig
    pool: UpstreamPool
    dispatcher: Dispatcher
    notifier: Notifier
    rounds: InputRounds
    reloader: Reloader | None
    task_group: TaskGroup
    cluster: Cluster | None = None
    """With `cluster:`, this replica's `gateway.cluster.Cluster`."""


@contextlib.asynccontextmanager
async def running_gateway(config: TriadConfig, host: str | None = None, *, watch: bool = False,
                          transport: str = "http", address: str | None = None) -> AsyncIterator[Gateway]:
    """`host` is where the exposer listens (default: the config's); off loopback the remote deny list applies.
    With `watch`, the config file is watched and reloaded on change. With `cluster:` in the config, the replica
    joins the cluster; `address` (where its HTTP listener is) makes it announce itself to the others."""
    dispatcher: Dispatcher | None = None
    cluster_changed: Callable[[Any], None] | None = None

    def on_change(upstream: Upstream) -> None:
        if dispatcher is not None:
            dispatcher.on_upstream_change(upstream)
        if cluster_changed is not None:
            cluster_changed(upstream)

    mask_logs(config.secret_mask())
    try:
        names = NameLedger.for_config(config, persist=watch)
    except NameLedgerUnreadable as exc:  # before anything starts: one ERROR line and exit 1, no traceback
        logger.error("%s", exc)
        raise SystemExit(1) from None
    cluster = _cluster(config)
    # the daemons (serve, stdio) end what a run of theirs that was killed left of its children, and record theirs
    directory = config.state_directory() if watch and config.source is not None else None
    groups = ChildGroups.start(directory / f"{config.source.stem}{CHILDREN_SUFFIX}") \
        if directory is not None and config.source is not None else None
    pool = UpstreamPool(config, on_change, groups=groups)
    dispatcher = Dispatcher(config, pool, remote=not is_loopback(host or config.listen.host), names=names,
                            shared=cluster, record_pins=watch)
    notifier = Notifier(dispatcher, Sessions(), cluster)
    rounds = InputRounds(cluster.replica_id if cluster is not None else None)
    announce = None
    if cluster is not None:  # only with `cluster:` are redis-py and cryptography imported (`_cluster`)
        from gateway.cluster import Heartbeat
        from gateway.runtime._cluster_wiring import join, reload_announcer

        announce = reload_announcer(cluster)
    reloader = Reloader(config.source, config, pool, dispatcher, announce) if config.source is not None else None
    heartbeat: Any = False
    if cluster is not None:
        joined = join(cluster, pool, notifier, reloader)
        cluster_changed = joined.changed
        if address is not None:
            heartbeat = Heartbeat(config.cluster.address if config.cluster and config.cluster.address else address,
                                  lambda: {"sessions": notifier.open_sessions, "version": dispatcher.registry.version,
                                           "upstreams_ready": sum(up.state is UpstreamState.READY
                                                                  for up in pool.upstreams.values())})
    # each callback is set once, here (`consumers` and `exposers` objects still take them by assignment)
    pool.on_updated = joined.resource_updated if cluster is not None else notifier.resource_updated
    pool.on_task_status = notifier.task_status
    pool.on_own_updated = notifier.own_resource_updated
    dispatcher.metrics.watch(lambda: {
        "upstreams": {name: up.state.value for name, up in pool.upstreams.items()},
        "states": [state.value for state in UpstreamState],
        "tools": len(dispatcher.registry.tools),
        "version": dispatcher.registry.version,
        "reloads": reloader.status.reloads if reloader else 0,
        "reload_failures": reloader.status.failures if reloader else 0,
        "sessions": {("handshake", transport): notifier.open_sessions},
        "quotas": quota_use(dispatcher.quotas.use(), pool),
        "quota_refusals": dispatcher.quotas.refusals(),
    })
    membership = cluster.running(heartbeat) if cluster is not None else contextlib.nullcontext()
    async with membership, anyio.create_task_group() as tg:
        tg.start_soon(dispatcher.run, name="registry")
        tg.start_soon(notifier.run, name="notifier")
        tg.start_soon(rounds.run, name="input-rounds")
        tg.start_soon(dispatcher.tasks.run, name="task-questions")
        await pool.start(tg)
        if watch and reloader is not None:
            tg.start_soon(reloader.watch, name="config-watch")
        if watch:
            tg.start_soon(watch_pins, dispatcher, name="pin-watch")
        try:
            yield Gateway(config, pool, dispatcher, notifier, rounds, reloader, tg, cluster)
        finally:
            pool.stop()
            if reloader is not None:
                reloader.stop()
            tg.cancel_scope.cancel()


def quota_use(held: dict[tuple[str, str], int], pool: UpstreamPool) -> dict[tuple[str, str], int]:
    """What each identity class holds of each quota: the exposers' counts and the per-client upstreams' slots."""
    use = dict(held)
    for upstream in pool.upstreams.values():
        for holder, count in upstream.client_slots().items():
            use["upstream_slots", holder] = use.get(("upstream_slots", holder), 0) + count
    return use


def _redirects(config: TriadConfig, host: str, address: str, replica: str | None) -> Redirects | None:
    """Where a person's own upstream authorization comes back to this listener (`/oauth/callback/<upstream>`):
    `listen.public_url`, else the origin of `auth.oauth.audience`, else the listen address when it is loopback
    (its Host is then the only one HostGuard lets in). None: no address people can reach is known (the loopback
    redirect then, for a person on Triad's machine)."""
    base = config.listen.public_url
    if base is None and config.auth.oauth is not None:
        parts = urlsplit(config.auth.oauth.audience)
        base = f"{parts.scheme}://{parts.netloc}"
    if base is None and is_loopback(host):
        base = address
    if base is None:
        if any(up.auth is not None and up.auth.mode == "per_user" for up in config.upstreams.values()):
            logger.warning("per-user upstream authorizations come back on the loopback redirect (a person on "
                           "this machine only): set listen.public_url")
        return None
    return Redirects(base, replica)


def _cluster(config: TriadConfig) -> Cluster | None:
    """This replica's `gateway.cluster.Cluster`, or None without `cluster:` (Redis is then never imported)."""
    if config.cluster is None:
        return None
    try:
        from gateway.cluster import Cluster
    except ImportError as exc:
        raise SystemExit(f"triad: cluster: needs redis-py and cryptography ({exc.name} is missing); install "
                         "them with `pip install 'mcp-triad[cluster]'`") from None
    return Cluster(config.cluster)


def run_http(config: TriadConfig, host: str, port: int) -> None:
    """`triad serve`: on uvloop where it is installed (it comes with `uvicorn[standard]`; about a tenth less CPU per
    call than asyncio's loop), else asyncio's. Connections are accepted by `exposers.Listener` on both,
    since uvloop's own server stops for good when descriptors run out. (`triad stdio` stays on asyncio's loop:
    libuv aborts the process on a stdin that is a regular file.)"""
    anyio.run(serve_http, config, host, port,
              backend_options={"use_uvloop": importlib.util.find_spec("uvloop") is not None})


async def serve_http(config: TriadConfig, host: str, port: int) -> None:
    # Bound before the task group starts anything: a taken port is one line on stderr and exit 1, not a traceback
    # of the exception group (nor upstreams started for nothing).
    missing = config.cluster_address_missing(host)  # `--host` may differ from listen.host, checked in the config
    if missing is not None:
        raise SystemExit(f"triad: {missing}")
    if (open_listener := config.unauthenticated_off_loopback(host)) is not None:
        if not config.listen.allow_unauthenticated:
            raise SystemExit(f"triad: {open_listener}")
        logger.warning("%s", open_listener)
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    # Accepted connections inherit this; without it, a keep-alive client waits out delayed ACKs (~40 ms).
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    try:
        sock.bind((host, port))
        # Listening from here on: a client that connects once "listening on" is logged waits in the backlog until
        # uvicorn accepts, instead of being refused.
        sock.listen(LISTEN_BACKLOG)
    except OSError as exc:
        sock.close()
        raise SystemExit(f"triad: cannot listen on {host}:{port}: {exc.strerror}") from None
    with sock:
        await _serve_http_on(config, host, sock)


async def _serve_http_on(config: TriadConfig, host: str, sock: socket.socket) -> None:
    actual_port = sock.getsockname()[1]
    address = f"http://{'[' + host + ']' if ':' in host else host}:{actual_port}"
    async with running_gateway(config, host, watch=True, address=address) as gw:
        server = build_server(gw.dispatcher, gw.notifier, LOCAL, gw.rounds)
        redirects = _redirects(config, host, address, gw.cluster.replica_id if gw.cluster is not None else None)
        gw.pool.for_users.redirects = redirects
        app = build_app(server, gw.dispatcher, gw.notifier, host, gw.reloader, gw.rounds, gw.cluster, redirects)
        proxies = list(config.listen.trusted_proxies)
        userver = ListenerServer(ListenerConfig(app, log_config=None, lifespan="on", access_log=False,
                                                timeout_graceful_shutdown=5, proxy_headers=bool(proxies),
                                                forwarded_allow_ips=proxies or None))
        gw.task_group.start_soon(_handle_signals, _stopper(userver, gw), gw.reloader)
        shown = f"[{host}]" if ":" in host else host
        logger.info("listening on http://%s:%d/mcp (legacy SSE at /sse); %d upstream(s): %s", shown, actual_port,
                    len(gw.pool.upstreams), ", ".join(gw.pool.upstreams) or "none")
        gw.task_group.start_soon(_report_when_settled, gw)
        gw.task_group.start_soon(_freeze_when_settled, gw)
        await userver.serve(sockets=[sock])
        logger.info("shutting down")


async def serve_stdio_client(config: TriadConfig, identity: Identity) -> None:
    async with running_gateway(config, watch=True, transport="stdio") as gw:
        server = build_server(gw.dispatcher, gw.notifier, identity, gw.rounds)
        gw.task_group.start_soon(_handle_signals, _stdio_stopper(gw), gw.reloader)
        gw.task_group.start_soon(_freeze_when_settled, gw)
        await serve_stdio(server)


async def _freeze_when_settled(gw: Gateway) -> None:
    """Tunes the cyclic garbage collector for a daemon that parses what clients send (`GC_THRESHOLDS`), and once
    every upstream has connected or failed once, moves the heap so far (modules, pydantic's schemas, the first
    registry) out of its sight (`gc.freeze`): a full collection walked all of it. Garbage is collected first, so
    none is kept for good; objects freed later by reference counting are freed as before."""
    gc.set_threshold(*GC_THRESHOLDS)
    await gw.pool.wait_settled()
    gc.collect()
    gc.freeze()


async def _report_when_settled(gw: Gateway) -> None:
    """Once every upstream has connected or failed once: their states and the number of tools, in one line."""
    await gw.pool.wait_settled()
    states = ", ".join(f"{name} {up.state.value}" + (f" ({up.reason})" if up.reason else "")
                       for name, up in gw.pool.upstreams.items())
    logger.info("upstreams: %s; %d tools", states or "none", len(gw.dispatcher.registry.tools))


def _stopper(userver: uvicorn.Server, gw: Gateway) -> Callable[[], None]:
    """The first signal stops listening and drains the calls in flight (`listen.shutdown_grace`), answering those
    still running after it with an error; uvicorn waits for those answers to be sent. A second one stops at once."""
    def stop() -> None:
        if userver.should_exit or (gw.cluster is not None and gw.cluster.draining):
            userver.should_exit = userver.force_exit = True  # a second signal: stop waiting for open connections
            return
        # idle GET streams end now, cleanly (a client reopens its stream elsewhere); they would hold the exit
        gw.notifier.end_streams()
        if gw.cluster is not None:  # out of the load balancer first (`cluster.drain_delay`), then stop
            gw.task_group.start_soon(drain_then_stop, name="leave-cluster")
            return
        stop_now()

    def stop_now() -> None:
        grace = gw.dispatcher.config.listen.shutdown_grace
        userver.config.timeout_graceful_shutdown = math.ceil(grace + ANSWER_TIME)
        userver.should_exit = True
        gw.task_group.start_soon(gw.pool.drain, grace, SHUTDOWN_REASON, name="drain")

    async def drain_then_stop() -> None:
        if gw.cluster is not None:  # started only with a cluster (above)
            await gw.cluster.drain()  # still forwarded to by the others while it serves its sessions
            await gw.cluster.leave()  # its socket closes next: nothing is forwarded to it any more
        if not userver.should_exit:
            stop_now()
    return stop


def _stdio_stopper(gw: Gateway) -> Callable[[], None]:
    """As `_stopper`, for the stdio client: drain the calls in flight, then stop; a second signal stops at once."""
    draining = False

    async def drain_then_stop() -> None:
        await gw.pool.drain(gw.dispatcher.config.listen.shutdown_grace, SHUTDOWN_REASON)
        gw.task_group.cancel_scope.cancel()

    def stop() -> None:
        nonlocal draining
        if draining:
            gw.task_group.cancel_scope.cancel()
            return
        draining = True
        gw.task_group.start_soon(drain_then_stop, name="drain")
    return stop


async def _handle_signals(stop: Callable[[], None], reloader: Reloader | None) -> None:
    """SIGHUP reloads the config; SIGTERM and SIGINT stop the exposer."""
    with anyio.open_signal_receiver(signal.SIGTERM, signal.SIGINT, signal.SIGHUP) as signals:
        async for signum in signals:
            logger.info("received %s", signal.Signals(signum).name)
            if signum != signal.SIGHUP:
                stop()
            elif reloader is not None:
                await reloader.reload("SIGHUP", announce=True)


def configure_logging(level: str = "INFO", log_format: str = "text") -> None:
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(JsonFormatter() if log_format == "json" else TextFormatter())
    logging.basicConfig(level=getattr(logging, level.upper(), logging.INFO), handlers=[handler])
    for noisy in ("httpx", "httpx2", "mcp", "uvicorn.error"):
        logging.getLogger(noisy).setLevel(logging.WARNING)
    # The SDK's OAuth client logs each failed flow with a traceback; Triad logs the failure once, where it handles
    # it (the upstream's state and reason), without one.
    logging.getLogger("mcp.client.auth").setLevel(logging.CRITICAL)
