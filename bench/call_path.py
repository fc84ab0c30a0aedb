"""Which of Triad's files a `tools/call` walks, socket to upstream and back, read off a running daemon. Loopback only.

    python bench/call_path.py [--calls N] [--modern] [--sdk]

Starts the echo upstream over streamable HTTP and `triad serve` in front of it, with a profiler in the daemon that a
signal turns on and off (`sys.setprofile`, main thread: the event loop's). It warms a session up, turns the profiler
on, makes N sequential calls, turns it off, and prints every file of Triad's four packages in which some function ran
at least N times in that window (the call path; what runs less often is periodic work), in the order they were first
entered, with the functions that ran. `--modern`: a 2026-07-28 client; `--sdk`: `listen.direct_path: false`.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import sys
import tempfile
import time
from pathlib import Path

import anyio
import httpx2

sys.path.insert(0, str(Path(__file__).resolve().parent))
from run import PY, Process, RawSession, free_port, processes, start_echo_upstream, triad_config, wait_listening

ROOT = Path(__file__).resolve().parent.parent
PACKAGES = tuple(str(ROOT / name) + os.sep for name in ("gateway", "consumers", "exposers", "policy"))

# Run inside the daemon: the profiler, toggled by SIGUSR1 (on) and SIGUSR2 (off: write the counts to PROFILE_OUT).
_PROFILED_SERVE = """
import collections, json, os, signal, sys, runpy
counts = collections.Counter()
order = {}
prefixes = tuple(json.loads(os.environ["PROFILE_PACKAGES"]))

def profile(frame, event, arg):
    if event == "call":
        name = frame.f_code.co_filename
        if name.startswith(prefixes):
            key = (name, frame.f_code.co_name)
            counts[key] += 1
            order.setdefault(name, len(order))

def on(signum, frame):
    counts.clear(); order.clear(); sys.setprofile(profile)

def off(signum, frame):
    sys.setprofile(None)
    rows = [[name, function, count, order[name]] for (name, function), count in counts.items()]
    with open(os.environ["PROFILE_OUT"] + ".part", "w") as out:
        json.dump(rows, out)
    os.replace(os.environ["PROFILE_OUT"] + ".part", os.environ["PROFILE_OUT"])

signal.signal(signal.SIGUSR1, on)
signal.signal(signal.SIGUSR2, off)
sys.argv = ["triad", *sys.argv[1:]]
runpy.run_module("gateway.cli", run_name="__main__")
"""


async def measure(calls: int, modern: bool, sdk: bool) -> list[tuple[str, list[str]]]:
    with tempfile.TemporaryDirectory() as tmp_name, processes() as started:
        tmp = Path(tmp_name)
        upstream = await start_echo_upstream(started, tmp / "upstream.log")
        extra = {"listen": {"direct_path": False}} if sdk else {}
        config = triad_config(tmp, {"echo": {"url": upstream}}, **extra)
        port, out = free_port(), tmp / "profile.json"
        env = {**os.environ, "PROFILE_PACKAGES": json.dumps(PACKAGES), "PROFILE_OUT": str(out)}
        proc = Process([PY, "-c", _PROFILED_SERVE, "serve", "-c", str(config), "--port", str(port), "--log-level",
                        "WARNING"], tmp / "triad.log", env=env)
        started.append(proc)
        url = f"http://127.0.0.1:{port}/mcp"
        await wait_listening(url)
        async with httpx2.AsyncClient(timeout=30) as http:
            session = await RawSession(http, url, modern=modern).open()
            for _ in range(20):  # warm: views, indexes, connections
                await session.call("echo")
            os.kill(proc.pid, signal.SIGUSR1)
            await anyio.sleep(0.2)  # the signal is handled between two bytecodes of the loop: let it land
            for _ in range(calls):
                await session.call("echo")
            os.kill(proc.pid, signal.SIGUSR2)
            deadline = time.monotonic() + 10
            # another process writes the file: nothing to wait on but its appearance
            while not out.exists() and time.monotonic() < deadline:  # noqa: ASYNC110
                await anyio.sleep(0.1)
        rows = json.loads(out.read_text())
    files: dict[str, tuple[int, list[str]]] = {}
    for name, function, count, first in rows:
        if count >= calls:
            files.setdefault(name, (first, []))[1].append(function)
    return [(str(Path(name).relative_to(ROOT)), sorted(functions))
            for name, (_, functions) in sorted(files.items(), key=lambda item: item[1][0])]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calls", type=int, default=50)
    parser.add_argument("--modern", action="store_true", help="a 2026-07-28 client")
    parser.add_argument("--sdk", action="store_true", help="listen.direct_path: false")
    args = parser.parse_args()
    path = anyio.run(measure, args.calls, args.modern, args.sdk)
    print(f"{len(path)} files walked by every one of {args.calls} tools/call "
          f"({'2026-07-28' if args.modern else 'handshake'} client, {'SDK' if args.sdk else 'direct'} path):")
    for number, (name, functions) in enumerate(path, 1):
        print(f"{number:3}. {name}: {', '.join(functions)}")


if __name__ == "__main__":
    main()
