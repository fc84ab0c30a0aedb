"""A read-stream wrapper that notices end of stream.

The SDK's `ClientSession` gives no signal when its transport closes (a stdio child exiting, an SSE stream ending):
pending requests fail, but the owner task waiting on its wake event would never learn it. `EOFWatch` passes every
item through unchanged (except those `intercept` takes: progress
notifications Triad routes itself, `consumers._progress`) and flips `closed` (and calls `on_eof`) when the stream ends.
"""

from __future__ import annotations

import contextvars
from collections.abc import Callable

import anyio

from consumers._sdk import Incoming, ReadEnd, sender_context


class EOFWatch:
    def __init__(self, inner: ReadEnd, intercept: Callable[[Incoming], bool] | None = None) -> None:
        self._inner = inner
        self._intercept = intercept
        """Sees each item first; an item it returns True for is its own, and the SDK never sees it."""
        self.closed = False
        self.on_eof: Callable[[], None] | None = None

    @property
    def last_context(self) -> contextvars.Context | None:
        """Passed through: the SDK's dispatcher reads it (`consumers._sdk.CONTEXT_ATTRIBUTE`)."""
        return sender_context(self._inner)

    def _eof(self) -> None:
        self.closed = True
        if self.on_eof is not None:
            self.on_eof()

    async def receive(self) -> Incoming:
        try:
            while True:
                item = await self._inner.receive()
                if self._intercept is None or not self._intercept(item):
                    return item
        except (anyio.EndOfStream, anyio.ClosedResourceError, anyio.BrokenResourceError):
            self._eof()
            raise

    def __aiter__(self) -> EOFWatch:
        return self

    async def __anext__(self) -> Incoming:
        try:
            return await self.receive()
        except (anyio.EndOfStream, anyio.ClosedResourceError, anyio.BrokenResourceError):
            raise StopAsyncIteration from None

    async def aclose(self) -> None:
        self._eof()
        await self._inner.aclose()

    async def __aenter__(self) -> EOFWatch:
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.aclose()
