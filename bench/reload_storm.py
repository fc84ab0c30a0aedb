"""A reload storm while clients call: 100 changes to the config, of every kind an operator or a platform makes,
and what the clients' calls went through (sent/ok/lost/duplicated/wrong, `storm_calls.py`).

    python bench/reload_storm.py [--changes 100] [--settle 0.3] [--clients 4]

One `triad serve` whose config is mounted as a Kubernetes ConfigMap is (`config.yaml -> ..data/config.yaml`), an
HTTP upstream that logs every call it executes (`ledger`, the one the clients call, written last in the file so
that a partial file drops it) and upstreams that come and go (down URLs: nothing to start). The changes cycle
through: rename-over, in-place write with a pause mid-file (up to 1.9 x `reload.settle`: what the two readings and
the removal guard hold), editor-style (write a swap file, move the old aside, rename the new in), SIGHUP,
`POST /admin/reload`, an invalid file, an empty file (each followed by a valid one), and a `..data` swap.
"""

from __future__ import annotations

import argparse
import os
import random
import re
import shutil
import signal
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import anyio
import httpx2
import yaml
from run import PY, Process, free_port, processes
from storm_calls import LEDGER, Tally, handshake_worker, modern_worker, report, wait_in_log

TOKEN, OPS = "storm-client-token", "storm-ops-token"
KINDS = ("rename-over", "in-place with a pause", "editor-style", "SIGHUP", "POST /admin/reload", "invalid file",
         "empty file", "..data swap")


def config_text(generation: int, ledger_url: str, settle: float) -> str:
    extra = {f"aux{n}": {"url": f"http://127.0.0.1:9/aux{n}/mcp", "ping_interval": "1h"}
             for n in range(generation % 3)}
    document: dict[str, Any] = {
        "page_size": 100 + generation % 50,
        "reload": {"settle": f"{settle}s"},
        "clients": {"storm": {"token": TOKEN}, "ops": {"token": OPS, "owner": True}},
        "naming": {"prefix": "never"},
        "upstreams": {**extra, "ledger": {"url": ledger_url, "protocol": "handshake", "ping_interval": "1h"}},
    }
    return yaml.safe_dump(document, sort_keys=False)


class ConfigMap:
    """`root/config.yaml -> ..data/config.yaml`, `..data -> ..<generation>` (what the kubelet mounts)."""

    def __init__(self, root: Path, text: str) -> None:
        self.root, self.generation = root, 0
        (root / "..0").mkdir()
        (root / "..0" / "config.yaml").write_text(text)
        (root / "..data").symlink_to("..0")
        (root / "config.yaml").symlink_to("..data/config.yaml")

    @property
    def path(self) -> Path:
        return self.root / "config.yaml"

    @property
    def file(self) -> Path:
        return self.root / os.readlink(self.root / "..data") / "config.yaml"

    def swap(self, text: str) -> None:
        self.generation += 1
        new = self.root / f"..{self.generation}"
        new.mkdir()
        (new / "config.yaml").write_text(text)
        old = os.readlink(self.root / "..data")
        os.symlink(new.name, self.root / "..data_tmp")
        os.replace(self.root / "..data_tmp", self.root / "..data")
        shutil.rmtree(self.root / old)


async def change(kind: str, files: ConfigMap, text: str, settle: float, triad: Process, admin: str) -> None:
    target = files.file
    if kind == "rename-over":
        temporary = target.with_name("config.yaml.tmp")
        temporary.write_text(text)
        os.replace(temporary, target)
    elif kind == "in-place with a pause":
        cut = random.randrange(1, len(text))
        with target.open("w") as stream:
            stream.write(text[:cut])
            stream.flush()
            await anyio.sleep(random.uniform(0.05, 1.9) * settle)
            stream.write(text[cut:])
    elif kind == "editor-style":
        swap = target.with_name(".config.yaml.swp")
        swap.write_text(text)
        os.replace(target, target.with_name("config.yaml~"))
        os.replace(swap, target)
    elif kind == "SIGHUP":
        target.write_text(text)
        triad.popen.send_signal(signal.SIGHUP)
    elif kind == "POST /admin/reload":
        target.write_text(text)
        async with httpx2.AsyncClient(timeout=30) as http:
            await http.post(admin, headers={"Authorization": f"Bearer {OPS}"})
    elif kind in ("invalid file", "empty file"):
        target.write_text("upstreams: [unclosed\n  - {" if kind == "invalid file" else "")
        await anyio.sleep(2 * settle)  # seen and refused before the valid file comes back
        target.write_text(text)
    else:
        files.swap(text)


async def storm(tmp: Path, changes: int, settle: float, clients: int) -> dict[str, Any]:
    with processes() as started:
        ledger_log = tmp / "ledger.log"
        ledger = Process([PY, str(LEDGER), "--name", "storm-ledger"], ledger_log)
        started.append(ledger)
        found = await anyio.to_thread.run_sync(wait_in_log, ledger_log, r"READY (\d+)")
        ledger_url = f"http://127.0.0.1:{found.group(1)}/mcp"
        root = tmp / "configmap"
        root.mkdir()
        files = ConfigMap(root, config_text(0, ledger_url, settle))
        port = free_port()
        log = tmp / "triad.log"
        triad = Process([PY, "-m", "gateway.cli", "serve", "-c", str(files.path), "--port", str(port),
                         "--log-level", "INFO"], log)
        started.append(triad)
        await anyio.to_thread.run_sync(wait_in_log, log, r"upstream ledger ready")
        url, admin = f"http://127.0.0.1:{port}/mcp", f"http://127.0.0.1:{port}/admin/reload"
        tally, stop = Tally(), anyio.Event()
        kinds: dict[str, int] = dict.fromkeys(KINDS, 0)
        started_at = time.monotonic()
        async with anyio.create_task_group() as tg:
            for n in range(clients):
                worker = handshake_worker if n % 2 == 0 else modern_worker
                tg.start_soon(worker, url, TOKEN, f"c{n}", tally, stop)
            for generation in range(1, changes + 1):
                kind = KINDS[(generation - 1) % len(KINDS)]
                kinds[kind] += 1
                await change(kind, files, config_text(generation, ledger_url, settle), settle, triad, admin)
                await anyio.sleep(random.uniform(1.5, 3) * settle)
            await anyio.sleep(4 * settle + 1.5)  # the last change applied (a held-back removal included)
            stop.set()
        seconds = time.monotonic() - started_at
        text = log.read_text()
        applied = re.findall(r"reloaded config \((.*?)\): (.*?); registry", text)
        return {"counts": tally.counts(ledger_log), "seconds": round(seconds, 1), "changes": kinds,
                "reloads applied": len(applied), "refused": text.count("refused, the running config"),
                "held back": text.count(") held back"),
                "applied removing ledger": sum(1 for _, what in applied if re.search(r"removed [^;]*\bledger", what)),
                "triad alive": triad.popen.poll() is None}


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--changes", type=int, default=100)
    parser.add_argument("--settle", type=float, default=0.3, help="reload.settle in seconds (default 0.3)")
    parser.add_argument("--clients", type=int, default=4)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="triad-reload-storm-") as tmp:
        result = await storm(Path(tmp), args.changes, args.settle, args.clients)
    counts = result.pop("counts")
    print(report("reload storm", counts, result))
    sys.exit(0 if counts["lost"] == counts["duplicated"] == counts["wrong"] == 0 else 1)


if __name__ == "__main__":
    anyio.run(main)
