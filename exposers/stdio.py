"""Serving one client over stdio (what Claude Desktop launches): the SDK server on this process's stdin/stdout.

Triad's own logs go to stderr, never stdout, which carries the protocol. Stdin is read by the event loop, not by
the SDK's reader thread: a thread blocked reading a pipe its client keeps open cannot be cancelled, and would keep
the process alive after SIGTERM. Like the SDK, Triad points fd 0 at the null device while it serves, so nothing
else (a hook's subprocess) reads the client's messages.
"""

from __future__ import annotations

import asyncio
import logging
import os
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any, cast

from mcp.server.stdio import stdio_server

from exposers._wire import StrictMessages, screen_line
from exposers.server import GatewayServer

logger = logging.getLogger("triad.exposer")

MAX_LINE = 64 * 1024 * 1024
"""The longest message line read from stdin (the SDK's reader has no bound; a line past this ends the session)."""


class StdinLines:
    """Lines of the client's stdin, as the SDK's reader iterates them, read without a thread."""

    def __init__(self, reader: asyncio.StreamReader) -> None:
        self._reader = reader

    def __aiter__(self) -> StdinLines:
        return self

    async def __anext__(self) -> str:
        try:
            line = await self._reader.readline()
        except ValueError:  # asyncio's limit: a line longer than MAX_LINE
            logger.error("the client sent a message line over %d bytes; closing the session", MAX_LINE)
            raise StopAsyncIteration from None
        if not line:
            raise StopAsyncIteration
        return screen_line(line.decode("utf-8", errors="replace"))


@asynccontextmanager
async def loop_stdin() -> AsyncIterator[StdinLines | None]:
    """The client's stdin read by the event loop, fd 0 pointing at the null device meanwhile; None when stdin is
    not a pipe, socket or terminal (a regular file, which never blocks: the SDK's own reader serves it)."""
    loop = asyncio.get_running_loop()
    pipe = os.fdopen(os.dup(0), "rb", buffering=0)
    reader = asyncio.StreamReader(limit=MAX_LINE)
    try:
        transport, _ = await loop.connect_read_pipe(lambda: asyncio.StreamReaderProtocol(reader), pipe)
    except ValueError:  # not a pipe
        pipe.close()
        yield None
        return
    saved = os.dup(0)
    null = os.open(os.devnull, os.O_RDONLY)
    os.dup2(null, 0)
    os.close(null)
    try:
        yield StdinLines(reader)
    finally:
        transport.close()
        os.dup2(saved, 0)
        os.close(saved)


async def serve_stdio(server: GatewayServer) -> None:
    async with loop_stdin() as stdin, stdio_server(stdin=cast(Any, stdin)) as (read, write):
        await server.run(StrictMessages(read, write), write, server.create_initialization_options())
