"""Strict JSON from clients, on every transport: one parse function, and the wrappers that put it in front of the
SDK where the SDK parses.

JSON has no NaN or Infinity (RFC 8259 §6), yet Python's `json` and pydantic's parser (as the SDK calls it) take
`NaN`, `Infinity` and `1e999`, and an upstream then receives `null`. `parse_json` refuses them, and nesting past
pydantic's own limit (about 200 levels, the SDK's bound too), so every later walk of a message is bounded. It
also refuses a body of more than `MAX_JSON_VALUES` values: a 4 MiB body can hold a million small containers, and
what a message costs later (validation, copies, walks) grows with them, not with its bytes. The parse runs with the
cyclic garbage collector paused: a parse makes no cycles, yet each container it makes counts towards a collection,
and collections of the daemon's whole heap made a 3 MB body of small objects cost 2 s on the loop.

Where Triad reads the body itself (the direct HTTP path) it calls `parse_json`. Where the SDK does:
- `/mcp` and `/messages/`: `StrictJson`, an ASGI wrapper in front of the SDK's app, reads the body (up to the
  body limit), answers a body that fails with HTTP 400 and a JSON-RPC parse error (id null), and replays it
  otherwise. The DNS-rebinding and session checks stay the SDK's, after it. On `/messages/` it also answers a
  body that is JSON but not one JSON-RPC message (-32600): the SDK would log a traceback for each (the fuzzer
  in tests/test_fuzz.py found it) and answer in plain text.
- stdio: the SDK parses each line before Triad sees it, so `StrictMessages` filters its read stream: a line that
  is not JSON, or not a JSON-RPC message, or carries a number that is not finite, is answered with a JSON-RPC
  error on the write stream (the SDK would drop it, leaving the client waiting).
"""

from __future__ import annotations

import contextvars
import gc
import json
import re
from collections.abc import Iterable, Sequence
from types import TracebackType
from typing import Any, Literal, Protocol, Self

import anyio
import mcp_types as types
import pydantic_core
from mcp.shared.message import SessionMessage
from pydantic import ValidationError
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from consumers import JSON, all_finite, may_overflow
from gateway.errors import TriadError

_LONE_SURROGATE = re.compile(rb"\\u[dD][89abAB][0-9a-fA-F]{2}(?!\\u[dD][c-fC-F][0-9a-fA-F]{2})"
                             rb"|(?<!\\u[dD][89abAB][0-9a-fA-F]{2})\\u[dD][c-fC-F][0-9a-fA-F]{2}")
"""A surrogate escape without its pair: valid JSON, but no text; pydantic refuses it speaking of a "hex escape",
so the error names it (searched only in text that failed to parse)."""

INVALID_MESSAGE = "Invalid request: not a JSON-RPC 2.0 message"
INVALID_ID = "Invalid request: a request's id must be a string or an integer"

MAX_JSON_VALUES = 10_000
"""JSON values (objects, arrays, strings, numbers, literals) and object keys in one message from a client (a key
costs what a string value does: an object of 5,000 members is 10,000). Real MCP messages hold hundreds, a large
tool call some thousands; a big payload is one string, which counts once. A
judgment call from bench/hostile.py: each value costs about 1 us between Triad's parse and the SDK's parse and
validation, so 100,000 of them cost 60-100 plain calls; 10,000 stay within about 5."""
_SCAN_BYTES_PER_VALUE = 50
"""Bytes of text per value past which a walk of the parsed values (about 75 ns a value, at most
`MAX_JSON_VALUES` of them) is cheaper than the scan of the text for huge numbers (about 1.5 ns a byte): a body
of 4 MiB that is mostly one string has a few values to walk, and 5-8 ms of bytes to scan."""
_PREFIX_BYTES_PER_VALUE = 8
"""Bytes per value of budget in the prefix counted first (`_over_budget`): 80 KB for 10,000, where small objects
take about 4 bytes a value."""
_PARSED_KEY = "triad.parsed"
"""Where the ASGI scope keeps a body's parse (`parse_scoped`), so the layers in front of the SDK parse it once."""


class ParseError(ValueError):
    """The bytes are not one JSON value Triad accepts; the message says why, for a JSON-RPC error of `code` (a
    parse error, or an invalid request for a message over `MAX_JSON_VALUES`)."""

    def __init__(self, message: str, code: int = types.PARSE_ERROR) -> None:
        super().__init__(message)
        self.code = code


def parse_json(data: bytes | str) -> JSON:
    """The JSON value of `data`, or `ParseError`: more than `MAX_JSON_VALUES` values (counted before anything is
    parsed), malformed, NaN or infinite numbers, nesting past the limit."""
    text = data.encode("utf-8", "surrogatepass") if isinstance(data, str) else data
    most = _most_values(text)
    if most > MAX_JSON_VALUES and _over_budget(text):
        raise ParseError(f"Invalid request: the message has more than {MAX_JSON_VALUES:,} JSON values and keys "
                         "(MAX_JSON_VALUES)", types.INVALID_REQUEST)
    paused = gc.isenabled()
    gc.disable()
    try:
        value = pydantic_core.from_json(data, allow_inf_nan=False)
    except ValueError as exc:
        if _LONE_SURROGATE.search(text) is not None:
            raise ParseError("Parse error: a string holds a lone surrogate escape (\\ud800-\\udfff without its "
                             f"pair), which Triad does not take from a client ({exc})") from None
        raise ParseError(f"Parse error: {exc}") from None
    finally:
        if paused:
            gc.enable()
    if not (all_finite(value) if len(text) > _SCAN_BYTES_PER_VALUE * most else
            not may_overflow(text) or all_finite(value)):
        raise ParseError("Parse error: a number is out of range (JSON has no Infinity)")
    return value


def parse_scoped(scope: Scope, body: bytes) -> JSON:
    """`parse_json(body)`, done once per request: a later layer reading the same body gets the same value (or
    error) again instead of parsing it again."""
    found = scope.get(_PARSED_KEY)
    if found is not None and found[0] == body:
        if isinstance(found[1], ParseError):
            raise found[1]
        return found[1]
    try:
        value = parse_json(body)
    except ParseError as exc:
        scope[_PARSED_KEY] = (body, exc)
        raise
    scope[_PARSED_KEY] = (body, value)
    return value


def _over_budget(text: bytes) -> bool:
    """Whether `text` has more than `MAX_JSON_VALUES` values and keys: counted in its first bytes first (a body of
    small objects passes the bound within them, and counting all of a 4 MiB body cost 10 ms), then in all of it.
    A prefix never holds more than the whole but for one container cut between its brackets (its string cut short
    counts nothing: `count_values` keeps only what lies outside strings)."""
    window = _PREFIX_BYTES_PER_VALUE * MAX_JSON_VALUES
    if len(text) > window and count_values(text[:window]) > MAX_JSON_VALUES + 1:
        return True
    return count_values(text) > MAX_JSON_VALUES


def _most_values(data: bytes) -> int:
    """An upper bound on the values and keys in JSON text (`count_values`, but counting in strings too, and empty
    containers): four byte counts, far cheaper than the exact count."""
    return 1 + data.count(b",") + data.count(b"{") + data.count(b"[") + data.count(b":")


_NOT_STRUCTURE = bytes(sorted(set(range(256)) - set(b'",:{}[]')))


def count_values(data: bytes) -> int:
    """The values and keys in `data`, if it is JSON, counted without parsing it, in a few passes of C over the bytes.

    Every value but the first is an array's element or a member's value: there are 1 + the commas + the non-empty
    containers, outside strings; each key is followed by a colon outside strings. Escaped backslashes and quotes
    go first (a string then ends at the next quote). Commas, colons and containers are counted among the quotes
    and structure alone, an empty string made a placeholder (a
    colon or comma keeps two strings apart, so `""` is always one string); when no string holds structure, that
    is all of them, and empty containers are those left once blanks go. Otherwise a split leaves the text outside
    strings. For text that is not JSON the count means nothing: the parse refuses it, if the count did not."""
    if b"\\" in data:
        data = data.replace(b"\\\\", b"").replace(b'\\"', b"")
    kept = data.translate(None, _NOT_STRUCTURE).replace(b'""', b"0")
    bare = data.translate(None, b" \t\r\n")
    if b'"' in kept:
        kept = bare = b"0".join(bare.split(b'"')[::2])
    empty = bare.count(b"{}") + bare.count(b"[]")
    return 1 + kept.count(b",") + kept.count(b"{") + kept.count(b"[") + kept.count(b":") - empty


def error_body(code: int, message: str) -> bytes:
    """A JSON-RPC error with id null, for an HTTP body refused before any request in it could be read."""
    return _error(None, code, message).model_dump_json(by_alias=True).encode()


async def refuse(send: Send, exc: TriadError, status: int = 400, headers: Sequence[tuple[bytes, bytes]] = ()) -> None:
    """Answer an HTTP request refused before any JSON-RPC message in it was read (e.g. an oversized run-level
    list in its headers): `status` and a JSON-RPC error with id null and `exc`'s code."""
    await _send_error(send, status, error_body(exc.code, exc.message), headers)


async def _send_error(send: Send, status: int, body: bytes, headers: Sequence[tuple[bytes, bytes]] = ()) -> None:
    await send({"type": "http.response.start", "status": status,
                "headers": [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode()),
                            *headers]})
    await send({"type": "http.response.body", "body": body})


class StrictJson:
    """In front of an SDK app that parses POST bodies: a body `parse_json` refuses gets 400 and a JSON-RPC parse
    error; any other request passes on untouched (a body over `max_body` too, for the SDK's 413).

    `check="json"` checks only bodies sent as `application/json` (the streamable HTTP app answers any other
    content type with 415 before it parses); `"message"` checks every body, and that it is one JSON-RPC message
    (the SSE message endpoint takes nothing else, whatever the content type).
    """

    def __init__(self, app: ASGIApp, max_body: int, check: Literal["json", "message"] = "json") -> None:
        self.app = app
        self._max_body = max_body
        self._check = check

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or scope["method"] != "POST" or not self._checks(scope):
            await self.app(scope, receive, send)
            return
        read = await read_body(receive, self._max_body)
        if read is None:  # the client went away before its body was whole: nothing to answer
            return
        body, more = read
        if not more:
            try:
                value = parse_scoped(scope, body)
            except ParseError as exc:
                await _send_error(send, 400, error_body(exc.code, exc.args[0]))
                return
            if invalid_id(value):
                await _send_error(send, 400, error_body(types.INVALID_REQUEST, INVALID_ID))
                return
            if self._check == "message" and not _is_message(value):
                await _send_error(send, 400, error_body(types.INVALID_REQUEST, INVALID_MESSAGE))
                return
        await self.app(scope, replay(body, more, receive), send)

    def _checks(self, scope: Scope) -> bool:
        if self._check == "message":
            return True
        content_type = next((v for k, v in scope["headers"] if k == b"content-type"), b"").decode("latin-1")
        return "application/json" in (part.strip() for part in content_type.split(";")[0].split(","))


def invalid_id(value: JSON) -> bool:
    """A request (a method and an id) whose id is neither a string nor an integer (`null`, `1.5`, `true`): no
    request, and no notification either; the SDK would take it for a notification and never answer."""
    if not isinstance(value, dict) or "method" not in value or "id" not in value:
        return False
    ident = value["id"]
    return isinstance(ident, bool) or not isinstance(ident, int | str)


_ODD_ID = re.compile(r'"id"\s*:\s*(?:null|true|false|\[|\{|-?[0-9]+(?:\.|[eE]))')
"""An id that may be no id; only a line with one is parsed twice (`screen_line`)."""
_INVALID_ID_MARK = {"triad.invalid": "id"}


def screen_line(line: str) -> str:
    """A stdin line as the SDK's reader gets it: the line, or for a request whose id is no id (`invalid_id`), a
    stand-in that `StrictMessages` answers with `INVALID_ID` (the SDK's parse would lose the id)."""
    if _ODD_ID.search(line) is None:
        return line
    try:
        value = parse_json(line)
    except ParseError:  # answered as a parse error by `StrictMessages`, which parses the line again
        return line
    return json.dumps(_INVALID_ID_MARK) + "\n" if invalid_id(value) else line


def _is_message(value: JSON) -> bool:
    try:
        types.jsonrpc_message_adapter.validate_python(value, by_name=False)
    except ValidationError:
        return False
    return True


async def read_body(receive: Receive, limit: int) -> tuple[bytes, bool] | None:
    """The body up to just past `limit` bytes and whether more is left unread; None if the client went away."""
    chunks: list[bytes] = []
    size = 0
    while True:
        message = await receive()
        if message["type"] != "http.request":
            return None
        chunks.append(message.get("body", b""))
        size += len(chunks[-1])
        if not message.get("more_body") or size > limit:
            return b"".join(chunks), bool(message.get("more_body"))


def replay(body: bytes, more: bool, receive: Receive) -> Receive:
    """A `receive` that gives the body read so far again, then the rest of the request."""
    sent = False

    async def again() -> Message:
        nonlocal sent
        if not sent:
            sent = True
            return {"type": "http.request", "body": body, "more_body": more}
        return await receive()

    return again


class _Reading(Protocol):
    """The read end of the SDK's stdio transport, as `StrictMessages` uses it."""

    async def receive(self) -> SessionMessage | Exception: ...
    async def aclose(self) -> None: ...


class _Writing(Protocol):
    """The write end of the SDK's stdio transport, as `StrictMessages` uses it."""

    async def send(self, item: SessionMessage, /) -> None: ...


class StrictMessages:
    """The SDK's stdio read stream, minus what is not a strict JSON-RPC message: each such line is answered on
    `write` with a JSON-RPC error (parse error, or invalid request for JSON that is not a message), with the
    request's id when it has one. Blank lines are skipped without an answer."""

    def __init__(self, read: _Reading, write: _Writing) -> None:
        self._read = read
        self._write = write

    @property
    def last_context(self) -> contextvars.Context | None:
        """The SDK reads the sender's context of the last item from its stream (`ContextReceiveStream`)."""
        return getattr(self._read, "last_context", None)

    async def receive(self) -> SessionMessage | Exception:
        while True:
            item: SessionMessage | Exception = await self._read.receive()
            refusal = _refusal(item)
            if refusal is None:
                return item
            if refusal is not False:
                await self._write.send(SessionMessage(refusal))

    def __aiter__(self) -> Self:
        return self

    async def __anext__(self) -> SessionMessage | Exception:
        try:
            return await self.receive()
        except anyio.EndOfStream:
            raise StopAsyncIteration from None

    async def aclose(self) -> None:
        await self._read.aclose()

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                        tb: TracebackType | None) -> None:
        await self.aclose()


def _refusal(item: SessionMessage | Exception) -> types.JSONRPCError | Literal[False] | None:
    """The error answering `item`; None when it is fine, False for a blank line (no answer)."""
    if isinstance(item, ValidationError):
        errors = item.errors(include_url=False)
        if errors and errors[0].get("input") == _INVALID_ID_MARK:
            return _error(None, types.INVALID_REQUEST, INVALID_ID)
        if errors and errors[0]["type"] == "json_invalid":
            if isinstance(raw := errors[0].get("input"), str | bytes) and not raw.strip():
                return False
            return _error(None, types.PARSE_ERROR, f"Parse error: {errors[0]['msg']}")
        return _error(None, types.INVALID_REQUEST, INVALID_MESSAGE)
    if isinstance(item, Exception):
        return _error(None, types.PARSE_ERROR, "Parse error")
    message = item.message
    carried: Iterable[Any] = ()
    if isinstance(message, types.JSONRPCRequest | types.JSONRPCNotification):
        carried = (message.params,)
    elif isinstance(message, types.JSONRPCResponse):
        carried = (message.result,)
    elif isinstance(message, types.JSONRPCError):
        carried = (message.error.data,)
    if all(all_finite(value) for value in carried):
        return None
    ident = message.id if isinstance(message, types.JSONRPCRequest) else None
    return _error(ident, types.PARSE_ERROR, "Parse error: JSON has no NaN or Infinity")


def _error(ident: types.RequestId | None, code: int, message: str) -> types.JSONRPCError:
    return types.JSONRPCError(jsonrpc="2.0", id=ident, error=types.ErrorData(code=code, message=message))
