"""Shared test helpers: real processes on 127.0.0.1, and a check that none of them outlives the test run.

Every process a test starts (upstream fixtures, `triad serve`, and the stdio children Triad starts for them)
carries the marker `triad-test-<run>` on its command line, so `/proc` tells whether any survived.
"""

from __future__ import annotations

import os
import re
import shutil
import signal
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

ROOT = Path(__file__).resolve().parent.parent
FIXTURE = ROOT / "tests" / "servers" / "fixture_upstream.py"
NODE_DIR = ROOT / "tests" / "node"
PYTHON = sys.executable
RUN_MARKER = f"triad-test-{uuid.uuid4().hex[:8]}"
TRIAD = [PYTHON, "-m", "gateway.cli"]


def marker(name: str) -> str:
    return f"{RUN_MARKER}-{name}"


class Proc:
    """A child process whose stderr is collected in the background, so tests can wait for a line."""

    def __init__(self, args: list[str], *, stdin: Any = subprocess.DEVNULL, env: dict[str, str] | None = None,
                 cwd: Path | None = None) -> None:
        self.args = args
        self.popen = subprocess.Popen(args, stdin=stdin, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                      env={**os.environ, **(env or {})}, cwd=cwd or ROOT)
        self._lines: list[str] = []
        self._changed = threading.Condition()
        self._pump_thread = threading.Thread(target=self._pump, daemon=True)
        self._pump_thread.start()

    def _pump(self) -> None:
        assert self.popen.stderr is not None
        for raw in self.popen.stderr:
            with self._changed:
                self._lines.append(raw.decode(errors="replace"))
                self._changed.notify_all()
        with self._changed:
            self._changed.notify_all()

    @property
    def stderr(self) -> str:
        with self._changed:
            return "".join(self._lines)

    def wait_for(self, pattern: str, timeout: float = 60, count: int = 1) -> re.Match[str]:
        """The `count`-th line matching `pattern` (waiting for it)."""
        regex = re.compile(pattern)
        deadline = time.monotonic() + timeout
        with self._changed:
            while True:
                matches = [m for m in map(regex.search, self._lines) if m]
                if len(matches) >= count:
                    return matches[count - 1]
                if self.popen.poll() is not None and not self._pump_thread.is_alive():
                    raise AssertionError(f"process exited ({self.popen.returncode}) before printing {pattern!r}:\n"
                                         + "".join(self._lines))
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    raise AssertionError(f"timed out waiting for {pattern!r}:\n" + "".join(self._lines))
                self._changed.wait(min(remaining, 0.5))

    async def until(self, pattern: str, count: int = 1) -> re.Match[str]:
        """`wait_for` for async tests: waits in a thread, so the test's own event loop keeps running."""
        import anyio

        return await anyio.to_thread.run_sync(lambda: self.wait_for(pattern, 60, count))

    def terminate(self, timeout: float = 15) -> int:
        if self.popen.poll() is None:
            self.popen.send_signal(signal.SIGTERM)
            try:
                self.popen.wait(timeout)
            except subprocess.TimeoutExpired:
                self.popen.kill()
                self.popen.wait(5)
        return self.popen.returncode


@pytest.fixture
def procs() -> Iterator[list[Proc]]:
    started: list[Proc] = []
    yield started
    for proc in reversed(started):
        proc.terminate()


def start_fixture(procs: list[Proc], transport: str, name: str, *extra: str) -> str:
    """Start the fixture upstream over HTTP or SSE; return its URL."""
    proc = Proc([PYTHON, str(FIXTURE), "--transport", transport, "--name", marker(name), *extra])
    procs.append(proc)
    port = proc.wait_for(r"READY (\d+)").group(1)
    return f"http://127.0.0.1:{port}/mcp" if transport == "http" else f"http://127.0.0.1:{port}/sse"


def stdio_upstream(name: str, *extra: str, **settings: Any) -> dict[str, Any]:
    return {"command": PYTHON, "args": [str(FIXTURE), "--name", marker(name), *extra], **settings}


DIRECT_PATH = os.environ.get("TRIAD_TEST_DIRECT_PATH", "1") != "0"
"""`make test` runs the end-to-end tests a second time with Triad's direct HTTP path off (every request through
the SDK's server): both settings must serve the same semantics."""


def write_config(tmp_path: Path, config: dict[str, Any], name: str = "triad.yaml") -> Path:
    if not DIRECT_PATH and "listen" not in config:
        config = {**config, "listen": {"direct_path": False}}
    path = tmp_path / name
    path.write_text(yaml.safe_dump(config, sort_keys=False))
    return path


def start_triad(procs: list[Proc], config: Path, *, wait_ready: int = 0, env: dict[str, str] | None = None) -> str:
    """Start `triad serve` on a free port (with `env` over the test's environment); return the /mcp URL once it
    listens."""
    proc = Proc([*TRIAD, "serve", "-c", str(config), "--port", "0", "--log-level", "DEBUG"],
                env={"TRIAD_TEST_MARK": RUN_MARKER, **(env or {})})
    procs.append(proc)
    port = proc.wait_for(r"listening on http://127\.0\.0\.1:(\d+)/mcp").group(1)
    if wait_ready:
        proc.wait_for(r"upstream \S+ ready", count=wait_ready)
    return f"http://127.0.0.1:{port}/mcp"


def surviving_processes(mark: str = RUN_MARKER) -> list[str]:
    """Command lines of live (non-zombie) processes that carry `mark`, other than this test process."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit() or int(entry.name) == os.getpid():
            continue
        try:
            cmdline = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
            status = (entry / "status").read_text()
        except OSError:
            continue
        if mark in cmdline and "State:\tZ" not in status:
            found.append(f"{entry.name}: {cmdline.strip()}")
    return found


def node_bin() -> str:
    node = shutil.which("node")
    if node is None:
        pytest.fail("Node.js is required for this test (install Node.js 18 or newer)")
    if not (NODE_DIR / "node_modules" / "@modelcontextprotocol").is_dir():
        pytest.fail(f"npm packages are missing: run `npm install` in {NODE_DIR} (make test does it)")
    return node


@pytest.fixture(scope="session", autouse=True)
def no_orphans_at_the_end() -> Iterator[None]:
    yield
    deadline = time.monotonic() + 10
    while (left := surviving_processes()) and time.monotonic() < deadline:
        time.sleep(0.2)
    assert not left, "processes survived the test run:\n" + "\n".join(left)


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"
