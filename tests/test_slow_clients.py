"""Slow and greedy HTTP clients (issue 17, item 3): the listener closes connections that do not send a whole
request in time, refuses endless heads, and logs running out of descriptors once per interval.

The deadlines are tested on a real uvicorn server in this process, with a `DeadlineProtocol` of short deadlines
(the daemon's own are seconds long); running out of descriptors on a real `triad serve` with a low limit.
"""

from __future__ import annotations

import asyncio
import logging
import socket
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

import anyio
import httpx2
import pytest
from starlette.types import Receive, Scope, Send

from exposers._listener import ExhaustionLog, Listener, ListenerConfig, ListenerServer
from tests.conftest import PYTHON, Proc, stdio_upstream, write_config

pytestmark = pytest.mark.anyio

SHORT = 0.5
"""Seconds: the deadlines of the in-process server."""


class Seen:
    def __init__(self) -> None:
        self.disconnected = anyio.Event()
        self.release = anyio.Event()


def app_for(seen: Seen):  # type: ignore[no-untyped-def]
    """Reads the whole body (noting a disconnect), waits for `release` on `/slow`, answers with the body's size."""

    async def app(scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            return
        size = 0
        while True:
            message = await receive()
            if message["type"] == "http.disconnect":
                seen.disconnected.set()
                return
            size += len(message.get("body", b""))
            if not message.get("more_body"):
                break
        if scope["path"] == "/slow":
            await seen.release.wait()
        await send({"type": "http.response.start", "status": 200, "headers": [(b"content-type", b"text/plain")]})
        await send({"type": "http.response.body", "body": str(size).encode()})

    return app


@asynccontextmanager
async def server(seen: Seen) -> AsyncIterator[int]:
    config = ListenerConfig(app_for(seen), log_config=None, lifespan="off", access_log=False)
    protocol = config.http
    config.http = type("Short", (protocol,), {"head_timeout": SHORT, "body_timeout": SHORT,  # type: ignore[misc]
                                              "max_head_bytes": 4096})
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    sock.listen()  # connections made before the server runs wait in the backlog
    userver = ListenerServer(config)
    async with anyio.create_task_group() as tg:
        tg.start_soon(userver.serve, [sock])
        try:
            yield sock.getsockname()[1]
        finally:
            userver.should_exit = True


async def read_all(stream: anyio.abc.SocketStream) -> bytes:
    """Everything until the server closes the connection (EOF): the wait is on the close itself."""
    data = b""
    with anyio.fail_after(10):
        while True:
            try:
                data += await stream.receive()
            except (anyio.EndOfStream, anyio.BrokenResourceError):
                return data


async def test_a_head_not_complete_in_time_gets_408_and_is_closed() -> None:
    seen = Seen()
    async with server(seen) as port, await anyio.connect_tcp("127.0.0.1", port) as stream:
        await stream.send(b"POST / HTTP/1.1\r\nHost: x\r\nContent-Le")
        assert (await read_all(stream)).startswith(b"HTTP/1.1 408 ")


async def test_a_connection_that_sends_nothing_is_closed() -> None:
    seen = Seen()
    async with server(seen) as port, await anyio.connect_tcp("127.0.0.1", port) as stream:
        assert (await read_all(stream)).startswith(b"HTTP/1.1 408 ")


async def test_a_body_not_complete_in_time_is_closed_and_the_app_sees_a_disconnect() -> None:
    seen = Seen()
    async with server(seen) as port, await anyio.connect_tcp("127.0.0.1", port) as stream:
        await stream.send(b"POST / HTTP/1.1\r\nHost: x\r\nContent-Length: 100\r\n\r\n0123456789")
        assert await read_all(stream) == b""
        with anyio.fail_after(10):
            await seen.disconnected.wait()


async def test_an_endless_head_gets_431() -> None:
    seen = Seen()
    async with server(seen) as port, await anyio.connect_tcp("127.0.0.1", port) as stream:
        # past the limit, and no more: bytes sent after the server closed would reset the connection
        await stream.send(b"GET / HTTP/1.1\r\nHost: x\r\n" + b"".join(b"X-Filler-%d: %s\r\n" % (i, b"y" * 100)
                                                                  for i in range(50)))
        assert (await read_all(stream)).startswith(b"HTTP/1.1 431 ")


async def test_answers_and_keep_alive_requests_are_not_cut() -> None:
    """A slow answer outlasts the deadlines (a sleep: proving nothing happens within a window), then the same
    connection serves a second request."""
    seen = Seen()
    async with server(seen) as port, httpx2.AsyncClient(base_url=f"http://127.0.0.1:{port}", timeout=10) as http:
        async with anyio.create_task_group() as tg:
            replies: list[httpx2.Response] = []

            async def slow() -> None:
                replies.append(await http.post("/slow", content=b"abc"))

            tg.start_soon(slow)
            await anyio.sleep(SHORT * 3)
            assert not replies and not seen.disconnected.is_set()
            seen.release.set()
        assert replies[0].status_code == 200 and replies[0].text == "3"
        assert (await http.post("/", content=b"x" * 100_000)).text == "100000"


class Hello(asyncio.Protocol):
    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.Transport)
        transport.write(b"hello")
        transport.close()


async def test_a_connection_that_cannot_be_taken_up_does_not_stop_the_listener(
        caplog: pytest.LogCaptureFixture) -> None:
    made: list[int] = []

    def protocol() -> asyncio.Protocol:
        made.append(1)
        if len(made) == 1:
            raise RuntimeError("no protocol for this one")
        return Hello()

    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    sock.listen()
    listener = Listener(sock, protocol)
    try:
        with caplog.at_level(logging.INFO, "triad.listener"):
            async with await anyio.connect_tcp("127.0.0.1", sock.getsockname()[1]) as first:
                assert await read_all(first) == b""  # closed: its protocol could not be made
            for _ in range(3):
                async with await anyio.connect_tcp("127.0.0.1", sock.getsockname()[1]) as later:
                    assert await read_all(later) == b"hello"
        assert any("no protocol for this one" in r.getMessage() for r in caplog.records)
    finally:
        listener.close()
        await listener.wait_closed()
        sock.close()


def test_accept_failures_for_want_of_descriptors_are_logged_once_per_interval(
        caplog: pytest.LogCaptureFixture) -> None:
    log = ExhaustionLog(interval=3600)
    with caplog.at_level(logging.INFO, "triad.listener"):
        for _ in range(1000):
            log.failed(OSError(24, "Too many open files"))
    assert [r.getMessage() for r in caplog.records] == [
        "cannot accept connections: Too many open files; new clients wait until descriptors are free"]
    assert caplog.records[0].exc_info is None


LIMITED = ("import os, resource, sys; resource.setrlimit(resource.RLIMIT_NOFILE, (128, 128)); "
           "os.execv(sys.executable, [sys.executable, '-m', 'gateway.cli', *sys.argv[1:]])")


async def test_a_daemon_out_of_descriptors_logs_it_once_and_serves_again(procs: list[Proc], tmp_path: Path) -> None:
    config = write_config(tmp_path, {"upstreams": {"fx": stdio_upstream("fd-limit")}})
    proc = Proc([PYTHON, "-c", LIMITED, "serve", "-c", str(config), "--port", "0"])
    procs.append(proc)
    port = int(proc.wait_for(r"listening on http://127\.0\.0\.1:(\d+)/mcp").group(1))
    async with httpx2.AsyncClient(timeout=30) as http:
        await healthy(http, port)  # the line above comes just before the socket listens
    held = []
    try:
        for _ in range(200):  # more than the daemon may open: the last ones wait in the listen backlog
            held.append(socket.create_connection(("127.0.0.1", port)))
        await proc.until(r"cannot accept connections: Too many open files")
        await anyio.sleep(2.5)  # the listener retries the accept twice more meanwhile: nothing more is logged
        assert len([line for line in proc.stderr.splitlines() if "cannot accept connections" in line]) == 1
        assert "Traceback" not in proc.stderr and "out of system resource" not in proc.stderr
    finally:
        for sock in held:
            sock.close()
    async with httpx2.AsyncClient(timeout=30) as http:
        await healthy(http, port)


async def healthy(http: httpx2.AsyncClient, port: int) -> None:
    """/healthz answers: retried while the connection is refused (not yet listening, or descriptors still
    being freed), for up to 20 s."""
    for _ in range(400):
        try:
            assert (await http.get(f"http://127.0.0.1:{port}/healthz")).json() == {"status": "alive"}
            return
        except httpx2.TransportError:
            await anyio.sleep(0.05)
    raise AssertionError("/healthz never answered")
