"""Exit 0 once HAProxy's `peers` section has ended its first sync, so a reload (`haproxy -sf`) hands the stick
table over; exit 1 if it has not within `--wait` seconds (or the stats socket cannot be reached).

    python3 deploy/haproxy_synced.py STATS_SOCKET [--wait SECONDS]

Why: a process started afresh spends about 5 s learning its table from an older process and from the other peers
(`show peers` flags without 0x2, "learning from remote peers finished"); reloaded during that time it hands the
new process nothing, and every handshake-era request is forwarded between replicas until the table is learnt again.
A process that learnt its table from the one before it is synced at once. Standard library only.
"""

from __future__ import annotations

import argparse
import re
import socket
import sys
import time

RESYNC_REMOTE_DONE = 0x2
"""`PEERS_F_RESYNC_REMOTE` in HAProxy's peers.c: learning from remote peers finished, or no longer needed."""


def synced(stats_socket: str) -> bool:
    """True when the first `peers` section on `stats_socket` has ended its first sync."""
    with socket.socket(socket.AF_UNIX) as sock:
        sock.settimeout(5)
        sock.connect(stats_socket)
        sock.sendall(b"show peers\n")
        data = b""
        while chunk := sock.recv(65536):
            data += chunk
    found = re.search(rb"\bflags=0x([0-9a-f]+)", data)
    return found is not None and bool(int(found.group(1), 16) & RESYNC_REMOTE_DONE)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("stats_socket")
    parser.add_argument("--wait", type=float, default=30.0)
    options = parser.parse_args()
    deadline = time.monotonic() + options.wait
    while True:
        try:
            if synced(options.stats_socket):
                return 0
        except OSError as exc:
            why = f"cannot ask HAProxy on {options.stats_socket}: {exc.strerror or exc}"
        else:
            why = "its first sync has not ended"
        if time.monotonic() >= deadline:
            print(f"haproxy_synced: {why} after {options.wait:g} s", file=sys.stderr)
            return 1
        time.sleep(0.2)


if __name__ == "__main__":
    sys.exit(main())
