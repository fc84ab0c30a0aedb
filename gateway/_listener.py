"""The HTTP listener's defences against slow and greedy clients, as a uvicorn configuration.

uvicorn (0.54) bounds the idle time between requests of a keep-alive connection (`timeout_keep_alive`), but not
the time a client takes to send a request: a connection that sends half a header line, or a body one byte a
minute, holds a descriptor forever, and ~1,000 of them deny service. `DeadlineProtocol`, uvicorn's own httptools
protocol with two deadlines and a size limit, closes such connections:

- the request head (request line and headers) must be complete within `HEAD_TIMEOUT` of the connection or of the
  request's first byte, and within `MAX_HEAD_BYTES`; otherwise 408 or 431, and the connection is closed;
- the body must be complete within `BODY_TIMEOUT` of the head; otherwise the connection is closed (the app sees a
  disconnect). Answers are not timed: a long call or an event stream is the app's business.

When descriptors run out anyway, asyncio logs every failed `accept()` with a traceback (hundreds of thousands a
minute under attack). `ListenerConfig.load`, which uvicorn calls in the running loop, puts a loop exception
handler in front that logs such failures once per `EXHAUSTION_LOG_INTERVAL`, with the count, and no traceback.
"""

from __future__ import annotations

import asyncio
import errno
import logging
import time
from typing import Any

import uvicorn
from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol

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


class DeadlineProtocol(HttpToolsProtocol):
    """uvicorn's httptools protocol, with a deadline on each request's head and body and a limit on its head."""

    head_timeout = HEAD_TIMEOUT
    body_timeout = BODY_TIMEOUT
    max_head_bytes = MAX_HEAD_BYTES

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
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
    """`uvicorn.Config` with `DeadlineProtocol` for HTTP and, once loaded in the running loop, one log line per
    interval for `accept()` failures for want of resources."""

    def __init__(self, app: Any, **options: Any) -> None:
        super().__init__(app, **{"http": DeadlineProtocol, **options})

    def load(self) -> None:
        super().load()
        loop = asyncio.get_running_loop()
        loop.set_exception_handler(ExhaustionLog(loop.get_exception_handler()))


class ExhaustionLog:
    """A loop exception handler: `accept()` failing with EMFILE and the like is logged once per interval (asyncio
    itself retries the accept a second later); anything else goes to the handler it replaces."""

    def __init__(self, previous: Any, interval: float = EXHAUSTION_LOG_INTERVAL) -> None:
        self._previous = previous
        self._interval = interval
        self._last = -interval
        self._suppressed = 0

    def __call__(self, loop: asyncio.AbstractEventLoop, context: dict[str, Any]) -> None:
        exc = context.get("exception")
        if not isinstance(exc, OSError) or exc.errno not in EXHAUSTION_ERRNOS:
            if self._previous is not None:
                self._previous(loop, context)
            else:
                loop.default_exception_handler(context)
            return
        now = time.monotonic()
        if now - self._last < self._interval:
            self._suppressed += 1
            return
        more = f" ({self._suppressed} more since the last report)" if self._suppressed else ""
        logger.error("cannot accept connections: %s; new clients wait until descriptors are free%s",
                     exc.strerror or exc, more)
        self._last, self._suppressed = now, 0
