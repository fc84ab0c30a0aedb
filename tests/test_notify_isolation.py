"""One session that does not read its notifications never delays another session's notifications."""

from __future__ import annotations

import socket
from pathlib import Path
from urllib.parse import urlsplit

import anyio
import httpx2
import pytest

from tests.conftest import Proc, start_triad, stdio_upstream, write_config
from tests.test_gateway_e2e import ListChanges, call, http_session
from tests.test_reload import rewrite

pytestmark = pytest.mark.anyio

WATCHED = [f"fixture://fx/items/{i}-{'x' * 3000}" for i in range(10)]
"""Long URIs make each `resources/updated` about 3 KB."""
ROUNDS = 300
"""Rounds of `resources/updated` for every watched URI: about 9 MB, more than the socket buffers of a client that
does not read can hold (the kernel's send buffer grows to 4 MB), however the notifier coalesces them."""


async def open_session(url: str) -> str:
    """Initialize a handshake-era session over plain HTTP and subscribe it to the watched resources; its id."""
    headers = {"Accept": "application/json, text/event-stream", "Content-Type": "application/json"}
    async with httpx2.AsyncClient(headers=headers, timeout=30) as http:
        response = await http.post(url, json={"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
            "protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name": "reads-nothing",
                                                                                "version": "1"}}})
        assert response.status_code == 200
        session_id = response.headers["mcp-session-id"]
        headers = {"Mcp-Session-Id": session_id, "MCP-Protocol-Version": "2025-11-25"}
        await http.post(url, headers=headers, json={"jsonrpc": "2.0", "method": "notifications/initialized"})
        for n, uri in enumerate(WATCHED, start=2):
            answer = await http.post(url, headers=headers, json={"jsonrpc": "2.0", "id": n,
                                                                  "method": "resources/subscribe",
                                                                  "params": {"uri": uri}})
            assert '"result"' in answer.text, answer.text
    return session_id


def open_get_stream(url: str, session_id: str) -> socket.socket:
    """The session's GET stream on a socket with a tiny receive buffer; only the response head is read."""
    parts = urlsplit(url)
    sock = socket.socket()
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 1024)  # set before connect: it sets the TCP window
    sock.settimeout(30)
    sock.connect((parts.hostname, parts.port))
    sock.sendall((f"GET {parts.path} HTTP/1.1\r\nHost: {parts.netloc}\r\nAccept: text/event-stream\r\n"
                  f"Mcp-Session-Id: {session_id}\r\nMCP-Protocol-Version: 2025-11-25\r\n\r\n").encode())
    head = b""
    while b"\r\n\r\n" not in head:
        chunk = sock.recv(1)
        assert chunk, "the GET stream closed"
        head += chunk
    assert head.startswith(b"HTTP/1.1 200"), head
    return sock


async def test_a_session_that_does_not_read_does_not_delay_another_sessions_list_changed(
        procs: list[Proc], tmp_path: Path) -> None:
    config = {"upstreams": {"fx": stdio_upstream("notify-fx", "--subscribable")}, "naming": {"prefix": "always"}}
    path = write_config(tmp_path, config)
    url = start_triad(procs, path, wait_ready=1)
    triad = procs[-1]
    stuck_id = await open_session(url)
    stuck = open_get_stream(url, stuck_id)
    try:
        changes = ListChanges()
        async with http_session(url, message_handler=changes) as good:
            assert "fx__echo" in {t.name for t in (await good.list_tools()).tools}
            flood = await call(good, "fx__updates", {"count": ROUNDS})
            assert flood["content"][0]["text"] == f"{ROUNDS} rounds of updates"
            rewrite(path, {**config, "policy": {"profile": {"deny": ["fx__echo"]}}})
            await triad.until(r"reloaded config")
            with anyio.fail_after(20):  # before the fix: never (the one notifier waits on the stuck session)
                await changes.event.wait()
            assert "fx__echo" not in {t.name for t in (await good.list_tools()).tools}
            # the flood did fill the stuck session's stream: it is dropped from notifications, and said so once
            await triad.until(r"stopped reading its notifications")
            assert triad.stderr.count("stopped reading its notifications") == 1
            assert (await call(good, "fx__structured", {"n": 2}))["structuredContent"] == {"double": 4}
            # and it is closed: its id is now unknown, so its client would open a new session
            async with httpx2.AsyncClient(timeout=30) as http:
                gone = await http.post(url, json={"jsonrpc": "2.0", "id": 9, "method": "tools/list"}, headers={
                    "Mcp-Session-Id": stuck_id, "MCP-Protocol-Version": "2025-11-25",
                    "Accept": "application/json, text/event-stream"})
            assert gone.status_code == 404
    finally:
        stuck.close()
