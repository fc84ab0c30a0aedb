"""A name means one tool on every replica, whatever each replica's state directory remembers (issue 29, point 3).

Before, each replica kept its own name ledger: `echo` meant one upstream's tool on r1 and another's on r2, and the
deny written on `echo` held on one of them only. Now an exact raw-name match is the catalog's alone, and with
`cluster:` no per-replica ledger is read at all, so the other names (`e-cho`, `echo-2`) agree too.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from mcp.shared.exceptions import MCPError

from tests.cluster_env import CLUSTER_KEY, free_port, redis_ping, require, wait_until
from tests.conftest import PYTHON, Proc, marker, start_triad, write_config
from tests.test_gateway_e2e import all_tools, call, http_session
from tests.test_stable_names import NAMED

pytestmark = pytest.mark.anyio

A_HISTORY = {"version": 1, "tools": {"b": {"echo": "echo", "e:cho": "e-cho"}, "a": {"echo": "echo-2",
                                                                                   "e.cho": "e-cho-2"}}}
"""What r1 remembers: it saw upstream b first."""


def replica_config(replica: str, redis_port: int) -> dict[str, Any]:
    def upstream(tag: str, *tools: str) -> dict[str, Any]:
        args = [str(NAMED), "--name", marker(f"names-{tag}"), "--tag", tag]
        return {"command": PYTHON, "args": args + [a for tool in tools for a in ("--tool", tool)]}

    return {"upstreams": {"a": upstream("a", "echo", "e.cho"), "b": upstream("b", "echo", "e:cho")},
            "naming": {"prefix": "never"},
            "policy": {"profile": {"deny": ["echo"]}},
            "cluster": {"redis": f"redis://127.0.0.1:{redis_port}/0", "replica_id": replica,
                        "secret_key": CLUSTER_KEY, "heartbeat": "0.3s", "drain_delay": "0.3s"}}


async def reached(url: str) -> dict[str, str]:
    """Each visible name and what the upstream said it ran; the denied name is not callable."""
    async with http_session(url) as via:
        names = sorted(tool["name"] for tool in await all_tools(via))
        with pytest.raises(MCPError):
            await call(via, "echo")
        return {name: (await call(via, name))["content"][0]["text"] for name in names}


async def test_replicas_with_their_own_state_dirs_agree_on_what_every_name_means(procs: list[Proc],
                                                                                tmp_path: Path) -> None:
    redis_port = free_port()
    procs.append(Proc([require("redis-server"), "--port", str(redis_port), "--bind", "127.0.0.1", "--save", "",
                       "--appendonly", "no", "--dir", str(tmp_path)]))
    wait_until(lambda: redis_ping(redis_port), "redis-server to answer")
    urls = []
    for replica in ("r1", "r2"):
        directory = tmp_path / replica
        directory.mkdir()
        if replica == "r1":
            (directory / "triad.names.json").write_text(json.dumps(A_HISTORY))
        urls.append(start_triad(procs, write_config(directory, replica_config(replica, redis_port)), wait_ready=2))
    seen = [await reached(url) for url in urls]
    assert seen[0] == seen[1] == {"e-cho": "called e.cho on a", "e-cho-2": "called e:cho on b",
                                  "echo-2": "called echo on b"}
    assert json.loads((tmp_path / "r1" / "triad.names.json").read_text()) == A_HISTORY  # neither read nor written
    assert not (tmp_path / "r2" / "triad.names.json").exists()
