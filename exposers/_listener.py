"""The HTTP listener's defences against slow and greedy clients, as a uvicorn configuration.

uvicorn (0.54) bounds the idle time between requests of a keep-alive connection (`timeout_keep_alive`), but not
the time a client takes to send a request: a connection that sends half a header line, or a body one byte a
minute, holds a descriptor forever, and ~1,000 of them deny service. `DeadlineProtocol`, uvicorn's own httptools
protocol with two deadlines and a size limit, closes such connections:

- the request head (request line and headers) must be complete within `HEAD_TIMEOUT` of the connection or of the
  request's first byte, and within `MAX_HEAD_BYTES`; otherwise 408 or 431, and the connection is closed;
- the body must be complete within `BODY_TIMEOUT` of the head; otherwise the connection is closed (the app sees a
  disconnect). Answers are not timed: a long call or an event stream is the app's business.

Connections are accepted by `Listener`, not by the event loop's own server: when descriptors run out, uvloop's
server (libuv) closes its listening socket for good, and asyncio's logs every failed `accept()` with a traceback
(hundreds of thousands a minute under attack). `Listener` logs such failures once per `EXHAUSTION_LOG_INTERVAL`,
with the count and no traceback, and tries again a moment later. `ListenerServer` is uvicorn's server with it.
"""

from __future__ import annotations

import asyncio
import contextlib
import errno
import logging
import socket
import time
from collections.abc import Callable, Iterator
from typing import Any

import uvicorn
from starlette.types import ASGIApp
from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol
from uvicorn.server import ServerState

logger = logging.getLogger("triad.listener")

HEAD_TIMEOUT = 10.0
"""Seconds for a request line and headers: generous for any real client on any link, short for a slowloris."""
BODY_TIMEOUT = 30.0
"""Seconds for a whole body once the head is in: a 4 MiB body at ~1 Mbit/s fits."""
MAX_HEAD_BYTES = 256 * 1024
"""Bytes in a request head. A full-size `X-Triad-Tools` list (512 patterns of 256 characters) fits."""
EXHAUSTION_LOG_INTERVAL = 10.0
"""Seconds between two log lines about `accept()` failing for want of descriptors or memory."""
EXHAUSTION_ERRNOS = frozenset({errno.EMFILE, errno.ENFILE, errno.ENOBUFS, errno.ENOMEM})
PASSING_ERRNOS = frozenset({errno.ECONNABORTED, errno.EPROTO, errno.EPERM, errno.EINTR, errno.EAGAIN})
"""`accept()` failures that concern one client only."""
GONE_ERRNOS = frozenset({errno.EBADF, errno.EINVAL, errno.ENOTSOCK})
"""`accept()` failures that mean the socket is closed or no longer listening."""
ACCEPT_BATCH = 128
"""Connections taken up from the backlog at one wakeup, at most (uvicorn's backlog is 2048)."""
ACCEPT_RETRY = 1.0
"""Seconds before `accept()` is tried again after it failed for want of resources (asyncio's own delay)."""


class DeadlineProtocol(HttpToolsProtocol):
    """uvicorn's httptools protocol, with a deadline on each request's head and body and a limit on its head."""

    head_timeout = HEAD_TIMEOUT
    body_timeout = BODY_TIMEOUT
    max_head_bytes = MAX_HEAD_BYTES

    def __init__(self, config: uvicorn.Config, server_state: ServerState, app_state: dict[str, object],
                 _loop: asyncio.AbstractEventLoop | None = None) -> None:
        super().__init__(config, server_state, app_state, _loop)
        self._deadline: asyncio.TimerHandle | None = None
        self._in_head = True
        self._head_bytes = 0

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        super().connection_made(transport)
        self._arm(self.head_timeout)

    def connection_lost(self, exc: Exception | None) -> None:
        self._disarm()
        super().connection_lost(exc)

    def data_received(self, data: bytes) -> None:
        if self._in_head:
            self._head_bytes += len(data)
        super().data_received(data)
        # Counted per read, so a read that ends the head and carries body too may pass the limit: only a head
        # that is still open past the limit is refused.
        if self._in_head and self._head_bytes > self.max_head_bytes and not self.transport.is_closing():
            self._refuse(b"431 Request Header Fields Too Large", "request head over %d bytes", self.max_head_bytes)

    def on_message_begin(self) -> None:
        super().on_message_begin()
        self._in_head = True
        if self._deadline is None:
            self._arm(self.head_timeout)

    def on_headers_complete(self) -> None:
        self._in_head = False
        self._head_bytes = 0
        self._arm(self.body_timeout)
        super().on_headers_complete()

    def on_message_complete(self) -> None:
        self._disarm()
        super().on_message_complete()

    def _arm(self, seconds: float) -> None:
        self._disarm()
        self._deadline = self.loop.call_later(seconds, self._expired)

    def _disarm(self) -> None:
        if self._deadline is not None:
            self._deadline.cancel()
            self._deadline = None

    def _expired(self) -> None:
        self._deadline = None
        if self.transport.is_closing():
            return
        if self._in_head:
            self._refuse(b"408 Request Timeout", "request head not complete within %gs", self.head_timeout)
        else:  # the app is reading the body: it sees a disconnect
            logger.info("closed a connection from %s: request body not complete within %gs", _peer(self.client),
                        self.body_timeout)
            self.transport.close()

    def _refuse(self, status: bytes, reason: str, limit: float) -> None:
        logger.info("closed a connection from %s: " + reason, _peer(self.client), limit)
        self._disarm()
        self.transport.write(b"HTTP/1.1 " + status + b"\r\ncontent-length: 0\r\nconnection: close\r\n\r\n")
        self.transport.close()


def _peer(client: tuple[str, int] | None) -> str:
    return f"{client[0]}:{client[1]}" if client else "an unknown peer"


class ListenerConfig(uvicorn.Config):
    """`uvicorn.Config` with `DeadlineProtocol` for HTTP."""

    # Any: uvicorn.Config's keyword arguments (each of its own type), passed on as they are
    def __init__(self, app: ASGIApp, **options: Any) -> None:
        super().__init__(app, **{"http": DeadlineProtocol, **options})


class ListenerServer(uvicorn.Server):
    """uvicorn's server, accepting on the sockets it is given with a `Listener` each (uvicorn's own startup runs
    with none: it does the lifespan and the state its protocols share). uvicorn's own signal capture is off: it
    re-raises the signal after shutdown, which would kill the process before the upstreams are closed; the daemon
    handles signals itself."""

    @contextlib.contextmanager
    def capture_signals(self) -> Iterator[None]:
        yield

    async def serve(self, sockets: list[socket.socket] | None = None) -> None:
        if not sockets:
            raise ValueError("a ListenerServer serves the listening sockets it is given")
        try:
            await super().serve(sockets)
        finally:  # stopped without its shutdown too (its task cancelled): accept no more
            for listener in getattr(self, "servers", ()):
                listener.close()

    async def startup(self, sockets: list[socket.socket] | None = None) -> None:
        await super().startup(sockets=[])
        loop = asyncio.get_running_loop()
        config, state = self.config, self.server_state

        def protocol() -> asyncio.Protocol:
            return config.http_protocol_class(config=config, server_state=state,  # type: ignore[call-arg]
                                              app_state=self.lifespan.state, _loop=loop)

        self.servers = [Listener(sock, protocol) for sock in sockets or ()]  # type: ignore[misc]


class Listener:
    """Accepts connections on a listening socket, in a task of its own (owned by the server: `close()`), and hands
    each to a new protocol; like the loops' own servers, it takes every connection waiting in the backlog at each
    wakeup. A failure for want of resources (EMFILE and the like) is logged once per interval and the accept tried
    again after `ACCEPT_RETRY`; clients meanwhile wait in the kernel's backlog."""

    def __init__(self, sock: socket.socket, protocol: Callable[[], asyncio.Protocol],
                 log: ExhaustionLog | None = None) -> None:
        sock.setblocking(False)
        self._sock = sock
        self._protocol = protocol
        self._exhaustion = log or ExhaustionLog()
        self._other = ExhaustionLog(message="accept() failed: %s%s")
        self._task = asyncio.get_running_loop().create_task(self._accept())
        self._task.add_done_callback(_stopped)

    async def _accept(self) -> None:
        loop = asyncio.get_running_loop()
        while True:
            try:
                batch = [(await loop.sock_accept(self._sock))[0]]
            except OSError as exc:
                if self._sock.fileno() == -1 or exc.errno in GONE_ERRNOS:  # closed: the server is shutting down
                    return
                if exc.errno in PASSING_ERRNOS:  # that client gave up (or a firewall refused it): take the next
                    await asyncio.sleep(0)
                    continue
                (self._exhaustion if exc.errno in EXHAUSTION_ERRNOS else self._other).failed(exc)
                await asyncio.sleep(ACCEPT_RETRY)
                continue
            # the rest of the backlog, without a loop turn each; the backlog empty (BlockingIOError) or any other
            # failure ends the batch, and the next `sock_accept` meets the failure again
            with contextlib.suppress(OSError):
                while len(batch) < ACCEPT_BATCH:
                    batch.append(self._sock.accept()[0])
            if len(batch) == 1:
                await self._take_up(loop, batch[0])
            else:
                await asyncio.gather(*(self._take_up(loop, conn) for conn in batch))

    async def _take_up(self, loop: asyncio.AbstractEventLoop, conn: socket.socket) -> None:
        try:
            await loop.connect_accepted_socket(self._protocol, conn)
        except Exception as exc:  # the client went away before its transport was set up, or its protocol failed
            logger.log(logging.DEBUG if isinstance(exc, OSError) else logging.WARNING,
                       "could not take up an accepted connection: %r", exc)
            conn.close()

    def close(self) -> None:
        self._task.cancel()

    async def wait_closed(self) -> None:
        await asyncio.wait({self._task})


def _stopped(task: asyncio.Task[None]) -> None:
    if not task.cancelled() and (failure := task.exception()) is not None:
        logger.error("stopped accepting connections: %r", failure)


class ExhaustionLog:
    """`accept()` failing for want of descriptors or memory (or with `message`, for any other reason), logged once
    per interval with the count of failures since the last line, and no traceback."""

    def __init__(self, interval: float = EXHAUSTION_LOG_INTERVAL,
                 message: str = "cannot accept connections: %s; new clients wait until descriptors are free%s") -> None:
        self._interval = interval
        self._message = message
        self._last = -interval
        self._suppressed = 0

    def failed(self, exc: OSError) -> None:
        now = time.monotonic()
        if now - self._last < self._interval:
            self._suppressed += 1
            return
        more = f" ({self._suppressed} more since the last report)" if self._suppressed else ""
        logger.error(self._message, exc.strerror or exc, more)
        self._last, self._suppressed = now, 0
