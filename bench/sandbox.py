"""The cost of a sandbox (`sandbox:`, bubblewrap): start-up and per-call time of a stdio upstream, sandboxed and bare.

    python bench/sandbox.py [--starts N] [--calls N]

Opens the echo upstream (`bench/echo_upstream.py`, stdio) through Triad's own transport (`consumers.transports`,
the child spawned as the daemon spawns it: exec wrapper, process group, and for the sandboxed run bwrap with the
limits), N times each way: the time from spawn to `initialize` answered and `tools/list` returned; then, on one
session each way, N sequential `echo` calls, in rounds taken in turn; and bwrap alone around `/bin/true`. Prints
the median and p90 of each. Pipes only, no network.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

import anyio
from mcp import ClientSession

from consumers._bwrap import bwrap_argv
from consumers.child_process import ChildOutput
from consumers.config import UpstreamConfig
from consumers.sandbox import SandboxConfig
from consumers.transports import open_transport

HERE = Path(__file__).resolve().parent
ECHO = HERE / "echo_upstream.py"
SANDBOX = {"read": [str(ECHO)], "network": "none", "memory": "1G", "pids": 64, "cpu": "300s"}


SANDBOX_MODEL = SandboxConfig.model_validate(SANDBOX)


def config(sandboxed: bool) -> UpstreamConfig:
    return UpstreamConfig.model_validate({"command": sys.executable, "args": [str(ECHO)],
                                          **({"sandbox": SANDBOX} if sandboxed else {})})


async def start_once(upstream: UpstreamConfig) -> float:
    began = time.perf_counter()
    async with (open_transport("bench", upstream, None, ChildOutput("bench")) as (read, write, _),
                ClientSession(read, write) as session):
        await session.initialize()
        await session.list_tools()
        return time.perf_counter() - began


async def call_times(upstream: UpstreamConfig, calls: int) -> list[float]:
    async with (open_transport("bench", upstream, None, ChildOutput("bench")) as (read, write, _),
                ClientSession(read, write) as session):
        await session.initialize()
        for _ in range(20):  # warm-up
            await session.call_tool("echo", {"text": "warm"})
        times = []
        for _ in range(calls):
            began = time.perf_counter()
            await session.call_tool("echo", {"text": "hello"})
            times.append(time.perf_counter() - began)
        return times


def bwrap_alone(runs: int) -> list[float]:
    """What bubblewrap itself costs: `/bin/true` in the same sandbox (namespaces, mounts), without Python's start."""
    argv = bwrap_argv(SANDBOX_MODEL, "/bin/true", [], None, os.environ["PATH"])
    times = []
    for _ in range(runs):
        began = time.perf_counter()
        subprocess.run(argv, check=True)
        times.append(time.perf_counter() - began)
    return times


def summary(times: list[float]) -> str:
    ordered = sorted(times)
    p90 = ordered[min(len(ordered) - 1, int(len(ordered) * 0.9))]
    return f"median {1000 * statistics.median(ordered):8.2f} ms   p90 {1000 * p90:8.2f} ms"


ROUNDS = 5
"""Calls are made in this many rounds, bare and sandboxed in turn, so that a busy machine weighs on both alike."""


async def main(starts: int, calls: int) -> None:
    kinds = {"bare": config(False), "sandboxed": config(True)}
    started: dict[str, list[float]] = {label: [] for label in kinds}
    called: dict[str, list[float]] = {label: [] for label in kinds}
    for _ in range(starts):  # in turn, for the same reason
        for label, upstream in kinds.items():
            started[label].append(await start_once(upstream))
    for _ in range(ROUNDS):
        for label, upstream in kinds.items():
            called[label] += await call_times(upstream, max(1, calls // ROUNDS))
    print(f"bwrap /bin/true ({10 * starts}x): {summary(bwrap_alone(10 * starts))}")
    for label in kinds:
        print(f"{label:<10} start-up ({starts}x): {summary(started[label])}")
        print(f"{label:<10} echo call ({len(called[label])}x): {summary(called[label])}")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--starts", type=int, default=10)
    parser.add_argument("--calls", type=int, default=500)
    args = parser.parse_args()
    anyio.run(main, args.starts, args.calls)
