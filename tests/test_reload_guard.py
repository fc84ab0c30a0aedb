"""A reload that removes upstreams while its file may still be being written is held back (issue 29, point 10).

Before, a changed file was applied once two readings `reload.settle` apart agreed: an in-place writer that paused
mid-file for longer than that had its valid *partial* file applied ("removed u2, u3"), and every call of the
removed upstreams' tools failed until the rest was written. Now a reload that removes upstreams is held back while
the file had been unchanged for less than `reload.settle` when it was read (logged with why), and the watcher's next
stable read applies the file: a partial file is only applied if the writer pauses for two settle intervals.

Generated over where the writer pauses (after the first upstream, before the last, in the middle of a line) and
for how long (between one and two settle intervals; shorter pauses are `tests/test_config_watch.py`'s); each
writer's final file removes nothing, so any "removed" is a partial file applied. One daemon for every case; its
upstreams are down HTTP ones (nothing to start).
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import anyio
import pytest
import yaml

from tests.conftest import Proc, start_triad

pytestmark = pytest.mark.anyio

SETTLE = 1.0
PAUSES = (1.2 * SETTLE, 1.7 * SETTLE)
"""Between one and two settle intervals: what the two readings alone let through (a shorter pause is held by them,
`tests/test_config_watch.py`)."""
UPSTREAMS = ("u0", "u1", "u2", "u3")


def config(generation: int) -> str:
    document: dict[str, Any] = {
        "page_size": 100 + generation,  # first: every partial file differs from the running one
        "reload": {"settle": f"{SETTLE}s"},
        "upstreams": {name: {"url": f"http://127.0.0.1:9/{name}/mcp", "ping_interval": "1h"} for name in UPSTREAMS},
    }
    return yaml.safe_dump(document, sort_keys=False)


def cuts(text: str) -> dict[str, int]:
    """Where the writer pauses: after the first upstream, before the last, and in the middle of one's line."""
    found = {f"before {name}": text.index(f"  {name}:") for name in ("u1", "u3")}
    found["mid-line"] = text.index("  u2:") + 6
    return found


async def test_an_in_place_writer_pausing_mid_file_never_gets_upstreams_removed(procs: list[Proc],
                                                                               tmp_path: Path) -> None:
    path = tmp_path / "triad.yaml"
    path.write_text(config(0))
    start_triad(procs, path)
    triad = procs[-1]
    generation = 0
    for where in cuts(config(1)):
        for pause in PAUSES:
            generation += 1
            whole = config(generation)
            cut = cuts(whole)[where]
            with path.open("w") as stream:
                stream.write(whole[:cut])
                stream.flush()
                await anyio.sleep(pause)  # the writer's pause (the behaviour under test), not a synchronisation
                stream.write(whole[cut:])
            # the whole file is applied in the end (the same upstreams: no upstream changes)
            await triad.until(r"reloaded config \(file changed\)", count=generation)
    applied = re.findall(r"reloaded config \(file changed\): (.*);", triad.stderr)
    assert [line for line in applied if "removed" in line] == [], applied
    assert "held back" in triad.stderr  # the pauses longer than the settle interval were caught, and said why
    assert re.search(r"would remove u\d.*the next stable read of the file applies it", triad.stderr)
