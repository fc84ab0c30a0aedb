"""A stdio MCP upstream that tries, in tool calls, what a sandbox must refuse: read and write files, connect to a
port (and to itself), read an environment variable, start processes, allocate memory. Each tool answers what
happened, as text (`ok: ...`, or the errno's name / the exception it met), so a test can compare a sandboxed run
with a bare one.

    python hostile_upstream.py
"""

from __future__ import annotations

import errno
import os
import socket

from mcp.server.mcpserver import MCPServer

server = MCPServer("hostile")


def _failure(exc: BaseException) -> str:
    if isinstance(exc, OSError) and exc.errno is not None:
        return f"refused: {errno.errorcode.get(exc.errno, exc.errno)}"
    return f"refused: {type(exc).__name__}"


@server.tool()
def read_file(path: str) -> str:
    try:
        with open(path) as file:
            return "ok: " + file.read(200)
    except OSError as exc:
        return _failure(exc)


@server.tool()
def write_file(path: str, text: str) -> str:
    try:
        with open(path, "w") as file:
            file.write(text)
        return "ok: written"
    except OSError as exc:
        return _failure(exc)


@server.tool()
def connect(port: int) -> str:
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=5) as sock:
            return "ok: " + sock.recv(64).decode(errors="replace")
    except OSError as exc:
        return _failure(exc)


@server.tool()
def own_loopback() -> str:
    """Listen on 127.0.0.1 and connect to itself: what its own loopback interface allows."""
    try:
        with (socket.create_server(("127.0.0.1", 0)) as listener,
              socket.create_connection(listener.getsockname(), timeout=5) as sock):
            conn, _ = listener.accept()
            with conn:
                conn.sendall(b"hello self")
            return "ok: " + sock.recv(64).decode()
    except OSError as exc:
        return _failure(exc)


@server.tool()
def get_env(name: str) -> str:
    """Its own environment, else its parent's (`/proc/<ppid>/environ`: Triad's, when it runs bare)."""
    value = os.environ.get(name)
    if value is None:
        try:
            with open(f"/proc/{os.getppid()}/environ", "rb") as file:
                found = dict(e.split(b"=", 1) for e in file.read().split(b"\0") if b"=" in e)
            value = found[name.encode()].decode() if name.encode() in found else None
        except OSError:
            pass
    return "unset" if value is None else f"ok: {value}"


@server.tool()
def spawn(count: int) -> str:
    """Fork `count` children that wait on a pipe, then let them all go; how many could be started."""
    read_end, write_end = os.pipe()
    children: list[int] = []
    outcome = ""
    try:
        for _ in range(count):
            pid = os.fork()
            if pid == 0:
                os.close(write_end)
                os.read(read_end, 1)
                os._exit(0)
            children.append(pid)
    except OSError as exc:
        outcome = _failure(exc)
    finally:
        os.close(write_end)
        os.close(read_end)
        for pid in children:
            os.waitpid(pid, 0)
    return outcome or f"ok: {len(children)} started"


@server.tool()
def allocate(megabytes: int) -> str:
    try:
        block = bytearray(megabytes << 20)
        return f"ok: {len(block) >> 20} MB"
    except MemoryError as exc:
        return _failure(exc)


if __name__ == "__main__":
    server.run("stdio")
