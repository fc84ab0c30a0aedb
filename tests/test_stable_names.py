"""An exposed name, once given to a tool, stays with it: across reloads, restarts, and whatever an upstream adds.

The attack (issue 17, item 8): a deny rule is written on `fsA__delete_file`; the upstream then offers
`Delete_File` too, which sorts first and would take the plain name, moving the real `delete_file` to
`fsA__delete_file-2`, where the rule no longer reaches it.
"""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml
from mcp.shared.exceptions import MCPError

from tests.conftest import PYTHON, ROOT, TRIAD, Proc, marker, start_triad, write_config
from tests.test_gateway_e2e import ListChanges, all_tools, call, http_session

pytestmark = pytest.mark.anyio

NAMED = ROOT / "tests" / "servers" / "named_upstream.py"


def config(*tools: str) -> dict[str, Any]:
    args = [str(NAMED), "--name", marker("names-fsA")] + [a for tool in tools for a in ("--tool", tool)]
    return {"upstreams": {"fsA": {"command": PYTHON, "args": args}},
            "naming": {"prefix": "always"},
            "policy": {"profile": {"deny": ["fsA__delete_file"]}}}


def rewrite(path: Path, content: dict[str, Any]) -> None:
    temporary = path.with_name(path.name + ".tmp")
    temporary.write_text(yaml.safe_dump(content, sort_keys=False))
    os.replace(temporary, path)


async def visible(url: str) -> set[str]:
    async with http_session(url) as via:
        return {tool["name"] for tool in await all_tools(via)}


async def assert_the_deny_still_holds(url: str) -> None:
    async with http_session(url) as via:
        assert {tool["name"] for tool in await all_tools(via)} == {"fsA__read", "fsA__Delete_File-2"}
        with pytest.raises(MCPError):
            await call(via, "fsA__delete_file")
        with pytest.raises(MCPError):
            await call(via, "fsA__delete_file-2")
        assert (await call(via, "fsA__Delete_File-2"))["content"][0]["text"] == "called Delete_File"


async def test_a_tool_an_upstream_adds_never_takes_a_name_a_rule_was_written_on(procs: list[Proc],
                                                                                 tmp_path: Path) -> None:
    path = write_config(tmp_path, config("delete_file", "read"))
    url = start_triad(procs, path, wait_ready=1)
    triad = procs[-1]
    assert await visible(url) == {"fsA__read"}
    changes = ListChanges()
    async with http_session(url, message_handler=changes) as via:
        rewrite(path, config("Delete_File", "delete_file", "read"))  # the upstream now offers a lookalike
        await triad.until(r"upstream fsA: new connection settings are live")
        await changes.wait_for_tools(via, 2)
    await assert_the_deny_still_holds(url)
    triad.terminate()

    ledger = json.loads((tmp_path / "triad.names.json").read_text())
    assert ledger["tools"]["fsA"] == {"delete_file": "fsA__delete_file", "read": "fsA__read",
                                      "Delete_File": "fsA__Delete_File-2"}
    url = start_triad(procs, path, wait_ready=1)  # a restart reads the names back
    await assert_the_deny_still_holds(url)


async def test_on_a_first_start_a_deny_on_the_exact_name_blocks_the_real_tool(procs: list[Proc],
                                                                            tmp_path: Path) -> None:
    """Issue 29, point 1: a fresh state_dir, an upstream offering both; no exposed name reaches `delete_file`."""
    path = write_config(tmp_path, {**config("Delete_File", "delete_file", "read"), "state_dir": "fresh"})
    url = start_triad(procs, path, wait_ready=1)
    await assert_the_deny_still_holds(url)
    async with http_session(url) as via:
        reached = [(await call(via, name))["content"][0]["text"] for name in sorted(await visible(url))]
    assert reached == ["called Delete_File", "called read"]


async def test_names_survive_a_restart_that_brings_the_lookalike(procs: list[Proc], tmp_path: Path) -> None:
    path = write_config(tmp_path, config("delete_file", "read"))
    url = start_triad(procs, path, wait_ready=1)
    assert await visible(url) == {"fsA__read"}
    procs[-1].terminate()
    write_config(tmp_path, config("Delete_File", "delete_file", "read"))
    url = start_triad(procs, path, wait_ready=1)
    await assert_the_deny_still_holds(url)


def test_plan_reads_the_names_and_never_writes_them(tmp_path: Path) -> None:
    path = write_config(tmp_path, config("Delete_File", "delete_file", "read"))
    ledger = tmp_path / "triad.names.json"

    def plan() -> dict[str, Any]:
        done = subprocess.run([*TRIAD, "plan", "-c", str(path), "--json"], capture_output=True, text=True,
                              timeout=120)
        assert done.returncode == 0, done.stderr
        return json.loads(done.stdout)

    assert {t["name"] for t in plan()["visible"]} == {"fsA__read", "fsA__Delete_File-2"}  # no names given yet
    assert not ledger.exists()
    ledger.write_text(json.dumps({"version": 1, "tools": {"fsA": {"delete_file": "fsA__delete_file"}}}))
    before = ledger.read_text()
    assert {t["name"] for t in plan()["visible"]} == {"fsA__read", "fsA__Delete_File-2"}
    assert ledger.read_text() == before


async def test_state_dir_holds_the_ledger(procs: list[Proc], tmp_path: Path) -> None:
    path = write_config(tmp_path, {**config("read"), "state_dir": "state"})
    url = start_triad(procs, path, wait_ready=1)
    assert await visible(url) == {"fsA__read"}
    assert (tmp_path / "state" / "triad.names.json").exists()  # written by the rebuild that served the list
    assert not (tmp_path / "triad.names.json").exists()


WARNED = ["fsA__delete_file", "fsA__DELETE_FILE", "fsA__delete*", "fsA:delete_file", "*delete_file*"]
QUIET = ["fsA__Delete_File-2", "fsA__read", "group:fsA"]


def test_plan_says_where_a_deny_reaches_tools_whose_raw_names_differ_only_by_case(tmp_path: Path) -> None:
    """`triad check` lists no tools; the rebuild that has them says it (plan, the log, `/readyz`)."""
    settings = config("Delete_File", "delete_file", "read")
    settings["policy"] = {"profile": {"deny": WARNED + QUIET}}
    path = write_config(tmp_path, settings)
    done = subprocess.run([*TRIAD, "plan", "-c", str(path), "--json"], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    notes = [n for n in json.loads(done.stdout)["registry_diagnostics"] if "differ only by case" in n]
    assert [n.split("'")[1] for n in notes] == WARNED
    assert all("fsA:Delete_File (fsA__Delete_File-2), fsA:delete_file (fsA__delete_file)" in n for n in notes)
