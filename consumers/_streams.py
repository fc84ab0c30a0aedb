"""A read-stream wrapper that notices end of stream.

The SDK's `ClientSession` gives no signal when its transport closes (a stdio child exiting, an SSE stream ending):
pending requests fail, but the owner task waiting on its wake event would never learn it. `EOFWatch` passes every
item through unchanged (except those `intercept` takes: progress
notifications Triad routes itself, `consumers._progress`) and flips `closed` (and calls `on_eof`) when the stream ends.

It also reads again what the SDK's readers (SSE, streamable HTTP) could not: pydantic's parser refuses valid JSON
(a lone surrogate, an integer past 4300 digits) and hands the session the error, which drops the message and
leaves its request waiting for its whole timeout; `consumers._json.parse_message` reads it. A number the SDK
parsed as infinite becomes `null` (the documented substitute, `consumers._json`).
"""

from __future__ import annotations

import contextvars
from collections.abc import Callable

import anyio
from mcp.shared.message import SessionMessage
from pydantic import ValidationError

from consumers._json import finite_message, parse_message
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
                item = _read_again(await self._inner.receive())
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


def _read_again(item: Incoming) -> Incoming:
    """`item`, or the message in the text the SDK's parser refused; infinite numbers as `None`."""
    if isinstance(item, SessionMessage):
        finished = finite_message(item.message)
        return item if finished is item.message else SessionMessage(finished, metadata=item.metadata)
    if isinstance(item, ValidationError):
        errors = item.errors(include_url=False)
        text = errors[0].get("input") if errors and errors[0]["type"] == "json_invalid" else None
        if isinstance(text, str | bytes):
            try:
                return SessionMessage(parse_message(text))
            except ValueError:  # a ValidationError is one: not a message after all
                return item
    return item
