"""A fuzzer (issue 17, "Also"): generated JSON-RPC messages, headers and byte streams thrown at every face of a
running Triad — `/mcp` in both eras, `/sse` + `/messages/`, `triad stdio`, and the listener's raw bytes.

Each input must get a well-formed answer: a valid HTTP status (never a 500) whose JSON body, if any, is JSON-RPC;
on stdio, JSON-RPC lines only, and a ping answered after every input (so nothing hangs the session). Meanwhile a
well-behaved client calls a tool over and over, in both eras, and every one of its calls must succeed; at the
end the daemon's log holds no traceback. Runs are bounded (`EXAMPLES` per target, derandomized, no database), so
the suite stays quick and repeatable.
"""

from __future__ import annotations

import itertools
import json
import queue
import re
import socket
import subprocess
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx2
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.conftest import TRIAD, Proc, start_triad, stdio_upstream, write_config
from tests.raw_clients import HANDSHAKE, JSON_HEADERS, MODERN, call, dumps, initialize, modern_call, sse_messages

EXAMPLES = 150
FUZZ = settings(max_examples=EXAMPLES, deadline=None, derandomize=True, database=None,
                suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture,
                                       HealthCheck.data_too_large])
TIMEOUT = 20.0
"""Seconds any one answer may take: longer is a hang."""
ALLOWED_STATUS = frozenset({200, 202, 400, 401, 403, 404, 405, 406, 408, 409, 413, 415, 421, 422, 431})

METHODS = ["initialize", "ping", "tools/list", "tools/call", "resources/list", "resources/read",
           "resources/templates/list", "resources/subscribe", "prompts/list", "prompts/get", "completion/complete",
           "logging/setLevel", "server/discover", "notifications/initialized", "notifications/cancelled",
           "notifications/progress", "notifications/roots/list_changed", "tasks/get"]
TOOLS = ["fx__echo", "fx__rich", "fx__structured", "fx__fail", "nope", "fx__echo "]
"""Tools a fuzzed call may name: never one that ends or floods the upstream (the well-behaved client shares it)."""

scalars = (st.none() | st.booleans() | st.integers() | st.integers(min_value=-(10**40), max_value=10**40)
           | st.floats(allow_nan=True, allow_infinity=True) | st.text(max_size=20))
json_values = st.recursive(scalars, lambda inner: st.lists(inner, max_size=4)
                           | st.dictionaries(st.text(max_size=10), inner, max_size=4), max_leaves=16)
ids = st.none() | st.booleans() | st.integers() | st.text(max_size=8) | st.floats() | st.lists(st.integers(),
                                                                                             max_size=2)


@st.composite
def params(draw: st.DrawFn) -> Any:
    shape = draw(st.sampled_from(["call", "uri", "meta", "any"]))
    if shape == "call":
        out = {"name": draw(st.sampled_from(TOOLS) | st.text(max_size=12)), "arguments": draw(json_values)}
    elif shape == "uri":
        out = {"uri": draw(st.sampled_from(["fixture://static", "fx+fixture://static", "x:"]) | st.text(max_size=12))}
    elif shape == "meta":
        out = {"_meta": draw(st.dictionaries(st.sampled_from(["progressToken", "triad/tools", "x"]), json_values,
                                             max_size=3))}
    else:
        return draw(json_values)
    if draw(st.booleans()):
        out.update(draw(st.dictionaries(st.text(max_size=8), json_values, max_size=2)))
    return out


@st.composite
def messages(draw: st.DrawFn) -> Any:
    """Mostly near-valid JSON-RPC (so it gets past the first checks), sometimes any JSON value or a batch."""
    message: dict[str, Any] = {}
    if draw(st.integers(0, 9)):
        message["jsonrpc"] = "2.0"
    else:
        message["jsonrpc"] = draw(json_values)
    kind = draw(st.sampled_from(["request", "request", "request", "notification", "response", "error"]))
    if kind != "notification":
        message["id"] = draw(ids)
    if kind in ("request", "notification"):
        message["method"] = draw(st.sampled_from(METHODS) | st.text(max_size=15))
        if draw(st.integers(0, 4)):
            message["params"] = draw(params())
    elif kind == "response":
        message["result"] = draw(json_values)
    else:
        message["error"] = {"code": draw(st.integers()), "message": draw(st.text(max_size=10))}
    wrap = draw(st.integers(0, 19))
    return [message, draw(json_values)] if wrap == 0 else draw(json_values) if wrap == 1 else message


def serialize(message: Any, data: st.DataObject) -> bytes:
    """JSON of `message` (NaN and Infinity written as Python does), sometimes cut or with bytes spliced in."""
    body = json.dumps(message, allow_nan=True).encode()
    mutation = data.draw(st.integers(0, 9))
    if mutation == 0 and body:
        return body[:data.draw(st.integers(0, len(body) - 1))]
    if mutation == 1:
        at = data.draw(st.integers(0, len(body)))
        return body[:at] + data.draw(st.binary(max_size=8)) + body[at:]
    if mutation == 2:
        return b"[" * data.draw(st.integers(100, 50_000)) + body
    return body


header_text = st.text(st.characters(min_codepoint=0x20, max_codepoint=0x7e), max_size=40).map(str.strip)
"""Printable ASCII without surrounding blanks: what an HTTP client can send at all."""
FUZZED_HEADERS = ["MCP-Protocol-Version", "Mcp-Session-Id", "Accept", "Content-Type", "Mcp-Method", "Mcp-Name",
                  "X-Triad-Tools", "Authorization", "Last-Event-ID", "Mcp-Param-Text"]


def headers(data: st.DataObject) -> dict[str, str]:
    chosen = data.draw(st.dictionaries(st.sampled_from(FUZZED_HEADERS), header_text
                                       | st.sampled_from([HANDSHAKE, MODERN, "application/json", "*/*", ""]),
                                       max_size=3))
    return chosen


def sendable(value: Any) -> bool:
    """A string an HTTP client can send as a header value."""
    return isinstance(value, str) and value.isascii() and value.isprintable()


def well_formed(message: Any) -> bool:
    if not isinstance(message, dict) or message.get("jsonrpc") != "2.0":
        return False
    if "error" in message:
        error = message["error"]
        return isinstance(error, dict) and isinstance(error.get("code"), int) and isinstance(error.get("message"), str)
    return "result" in message or isinstance(message.get("method"), str)


def check_http(response: httpx2.Response) -> None:
    assert response.status_code in ALLOWED_STATUS, (response.status_code, response.text[:300])
    kind = response.headers.get("content-type", "")
    if kind.startswith("application/json") and response.content:  # a 202 has no body
        body = response.json()
        assert all(well_formed(m) for m in (body if isinstance(body, list) else [body])), body
    elif kind.startswith("text/event-stream"):
        assert all(well_formed(m) for m in sse_messages(response.text)), response.text[:300]


# -- the daemon, and a client that keeps calling meanwhile --------------------------------------------------------


@pytest.fixture(scope="module")
def config(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return write_config(tmp_path_factory.mktemp("fuzz"), {"upstreams": {"fx": stdio_upstream("fuzz")},
                                                          "naming": {"prefix": "always"}})


class Steady:
    """A well-behaved client on its own thread: handshake and 2026-07-28 echo calls until stopped."""

    def __init__(self, url: str) -> None:
        self.url = url
        self.calls = 0
        self.failures: list[str] = []
        self.stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def __enter__(self) -> Steady:
        self._thread.start()
        return self

    def __exit__(self, *_exc: object) -> None:
        self.stop.set()
        self._thread.join(TIMEOUT)
        assert not self._thread.is_alive(), "the well-behaved client hung"
        assert not self.failures, self.failures[:3]
        assert self.calls > 0

    def _run(self) -> None:
        with httpx2.Client(timeout=TIMEOUT) as http:
            opened = http.post(self.url, content=dumps(initialize()), headers=JSON_HEADERS)
            session = {**JSON_HEADERS, "Mcp-Session-Id": opened.headers["mcp-session-id"],
                       "MCP-Protocol-Version": HANDSHAKE}
            http.post(self.url, content=dumps({"jsonrpc": "2.0", "method": "notifications/initialized"}),
                      headers=session)
            modern = {**JSON_HEADERS, "MCP-Protocol-Version": MODERN, "Mcp-Method": "tools/call",
                      "Mcp-Name": "fx__echo"}
            for n in itertools.count():
                if self.stop.wait(0.02):
                    return
                text = f"steady {n}"
                for body, sent in ((call(n, "fx__echo", {"text": text}), session),
                                   (modern_call(n, "fx__echo", {"text": text}), modern)):
                    try:
                        reply = http.post(self.url, content=dumps(body), headers=sent)
                        answer = (sse_messages(reply.text)[-1] if reply.headers.get("content-type", "")
                                  .startswith("text/event-stream") else reply.json())
                        if answer["result"]["content"][0]["text"] != text:
                            self.failures.append(repr(answer))
                    except Exception as exc:  # recorded, and the test fails at the end
                        self.failures.append(repr(exc))
                self.calls += 1


@pytest.fixture(scope="module")
def triad(config: Path) -> Iterator[tuple[str, Proc]]:
    procs: list[Proc] = []
    url = start_triad(procs, config, wait_ready=1)
    yield url, procs[-1]
    for proc in procs:
        proc.terminate()


@pytest.fixture
def steady(triad: tuple[str, Proc]) -> Iterator[Steady]:
    url, proc = triad
    with Steady(url) as client:
        yield client
    assert "Traceback" not in proc.stderr, proc.stderr[-3000:]


# -- the targets -------------------------------------------------------------------------------------------------


def test_fuzz_handshake_era_http(triad: tuple[str, Proc], steady: Steady) -> None:
    url, _ = triad
    with httpx2.Client(timeout=TIMEOUT) as http:
        opened = http.post(url, content=dumps(initialize()), headers=JSON_HEADERS)
        session = {**JSON_HEADERS, "Mcp-Session-Id": opened.headers["mcp-session-id"],
                   "MCP-Protocol-Version": HANDSHAKE}
        http.post(url, content=dumps({"jsonrpc": "2.0", "method": "notifications/initialized"}), headers=session)

        @FUZZ
        @given(message=messages(), data=st.data())
        def fuzz(message: Any, data: st.DataObject) -> None:
            check_http(http.post(url, content=serialize(message, data), headers={**session, **headers(data)}))

        fuzz()


def test_fuzz_2026_era_http(triad: tuple[str, Proc], steady: Steady) -> None:
    url, _ = triad
    with httpx2.Client(timeout=TIMEOUT) as http:

        @FUZZ
        @given(message=messages(), data=st.data())
        def fuzz(message: Any, data: st.DataObject) -> None:
            sent = {**JSON_HEADERS, "MCP-Protocol-Version": MODERN}
            if isinstance(message, dict) and sendable(message.get("method")):
                sent["Mcp-Method"] = message["method"].strip()
                params = message.get("params")
                if isinstance(params, dict) and sendable(params.get("name")):
                    sent["Mcp-Name"] = params["name"].strip()
                if isinstance(params, dict) and data.draw(st.integers(0, 3)):  # mostly with an envelope
                    meta = params.setdefault("_meta", {})
                    if isinstance(meta, dict):
                        meta.update(modern_call(0, "x", {})["params"]["_meta"])
            check_http(http.post(url, content=serialize(message, data), headers={**sent, **headers(data)}))

        fuzz()


def test_fuzz_raw_bodies(triad: tuple[str, Proc], steady: Steady) -> None:
    url, _ = triad
    with httpx2.Client(timeout=TIMEOUT) as http:

        @FUZZ
        @given(body=st.binary(max_size=200), era=st.sampled_from([HANDSHAKE, MODERN, None]), data=st.data())
        def fuzz(body: bytes, era: str | None, data: st.DataObject) -> None:
            sent = {**JSON_HEADERS, **({"MCP-Protocol-Version": era} if era else {}), **headers(data)}
            check_http(http.post(url, content=body, headers=sent))

        fuzz()


class SseReader:
    """A legacy SSE session whose event stream is read on a thread: every event must be JSON-RPC."""

    def __init__(self, http: httpx2.Client, base: str) -> None:
        self.events: queue.Queue[Any] = queue.Queue()
        self.endpoint: queue.Queue[str] = queue.Queue()
        self._http, self._base = http, base
        self._thread = threading.Thread(target=self._read, daemon=True)
        self._thread.start()

    def _read(self) -> None:
        try:
            with self._http.stream("GET", self._base + "/sse", headers={"Accept": "text/event-stream"}) as stream:
                for line in stream.iter_lines():
                    if line.startswith("data:") and "/messages/" in line:
                        self.endpoint.put(line[5:].strip())
                    elif line.startswith("data:") and line[5:].strip():
                        self.events.put(json.loads(line[5:]))
        except Exception as exc:
            self.events.put(exc)

    def answer(self, ident: Any) -> Any:
        """The event answering `ident` (others are checked and skipped)."""
        while True:
            event = self.events.get(timeout=TIMEOUT)
            assert well_formed(event), event
            if isinstance(event, dict) and event.get("id") == ident and "method" not in event:
                return event


def test_fuzz_legacy_sse(triad: tuple[str, Proc], steady: Steady) -> None:
    url, _ = triad
    base = url.removesuffix("/mcp")
    with httpx2.Client(timeout=TIMEOUT) as http, httpx2.Client(timeout=None) as streaming:
        reader = SseReader(streaming, base)
        endpoint = base + reader.endpoint.get(timeout=TIMEOUT)
        sent = {"Content-Type": "application/json"}
        assert http.post(endpoint, content=dumps(initialize("init")), headers=sent).status_code == 202
        assert reader.answer("init")["result"]["protocolVersion"] == HANDSHAKE
        http.post(endpoint, content=dumps({"jsonrpc": "2.0", "method": "notifications/initialized"}), headers=sent)
        pings = itertools.count()

        @FUZZ
        @given(message=messages(), data=st.data())
        def fuzz(message: Any, data: st.DataObject) -> None:
            response = http.post(endpoint, content=serialize(message, data), headers={**sent, **headers(data)})
            assert response.status_code in ALLOWED_STATUS, (response.status_code, response.text[:300])
            ident = f"ping-{next(pings)}"
            assert http.post(endpoint, content=dumps({"jsonrpc": "2.0", "id": ident, "method": "ping"}),
                             headers=sent).status_code == 202
            assert reader.answer(ident)["result"] == {}

        fuzz()


def test_fuzz_stdio(config: Path) -> None:
    process = subprocess.Popen([*TRIAD, "stdio", "-c", str(config)], stdin=subprocess.PIPE,
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    assert process.stdin is not None and process.stdout is not None and process.stderr is not None
    lines: queue.Queue[bytes] = queue.Queue()
    errors: list[bytes] = []
    stdout, stderr = process.stdout, process.stderr
    threading.Thread(target=lambda: [lines.put(line) for line in stdout], daemon=True).start()
    threading.Thread(target=lambda: errors.extend(stderr), daemon=True).start()

    def send(data: bytes) -> None:
        assert process.stdin is not None
        try:
            process.stdin.write(data + b"\n")
            process.stdin.flush()
        except BrokenPipeError:  # the daemon exited: say how, and on what, not only that the pipe broke
            code = process.wait(15)
            raise AssertionError(f"triad stdio exited ({code}) on {data[:300]!r}; its log: "
                                 f"{b''.join(errors)[-3000:].decode(errors='replace')}") from None

    def answer(ident: Any) -> dict[str, Any]:
        while True:
            message = json.loads(lines.get(timeout=TIMEOUT))
            assert well_formed(message), message
            if message.get("id") == ident and "method" not in message:
                return message

    try:
        send(dumps(initialize("init")))
        assert answer("init")["result"]["protocolVersion"] == HANDSHAKE
        send(dumps({"jsonrpc": "2.0", "method": "notifications/initialized"}))
        pings = itertools.count()

        @FUZZ
        @given(message=messages(), data=st.data())
        def fuzz(message: Any, data: st.DataObject) -> None:
            send(re.sub(rb"[\r\n]", b" ", serialize(message, data)))  # one line: a newline is the framing
            ident = f"ping-{next(pings)}"
            send(dumps({"jsonrpc": "2.0", "id": ident, "method": "ping"}))
            assert answer(ident)["result"] == {}

        fuzz()
    finally:
        process.stdin.close()
        try:
            process.wait(15)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait(5)
    log = b"".join(errors).decode(errors="replace")
    assert "Traceback" not in log, log[-3000:]


@st.composite
def request_heads(draw: st.DrawFn) -> bytes:
    """Bytes at the listener: garbage, or a request line and headers with garbage spliced in; always ended by a
    blank line, so the parser decides at once instead of waiting for the head deadline."""
    if draw(st.booleans()):
        return draw(st.binary(max_size=300)).replace(b"\r\n\r\n", b"") + b"\r\n\r\n"
    method = draw(st.sampled_from([b"GET", b"POST", b"DELETE", b"PUT", b"OPTIONS"]) | st.binary(max_size=6))
    target = draw(st.sampled_from([b"/mcp", b"/sse", b"/messages/?session_id=x", b"/healthz", b"*"])
                  | st.binary(max_size=20))
    fields = draw(st.lists(st.binary(max_size=40), max_size=5))
    head = b"\r\n".join([method + b" " + target + b" HTTP/1.1", b"Host: 127.0.0.1", *fields])
    return head.replace(b"\r\n\r\n", b"") + b"\r\nConnection: close\r\n\r\n"


def test_fuzz_listener_bytes(triad: tuple[str, Proc], steady: Steady) -> None:
    url, _ = triad
    port = int(url.rsplit(":", 1)[1].split("/")[0])

    @FUZZ
    @given(head=request_heads())
    def fuzz(head: bytes) -> None:
        with socket.create_connection(("127.0.0.1", port), timeout=TIMEOUT) as sock:
            sock.sendall(head)
            received = b""
            while b"\r\n\r\n" not in received:
                chunk = sock.recv(65536)  # a timeout here is a hang: socket.timeout fails the test
                if not chunk:
                    break
                received += chunk
        if received:
            status = re.match(rb"HTTP/1\.[01] (\d{3}) ", received)
            assert status is not None and int(status.group(1)) in ALLOWED_STATUS | {101, 204, 503}, received[:200]

    fuzz()
