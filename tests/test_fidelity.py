"""What a result names must work when the client uses it: links and embedded resources carry Triad's URIs."""

from __future__ import annotations

import json
from pathlib import Path

import anyio
import pytest
from mcp.shared.exceptions import MCPError

from tests.conftest import ROOT, TRIAD, Proc, start_triad, stdio_upstream, write_config
from tests.test_gateway_e2e import call, http_session

pytestmark = pytest.mark.anyio


async def test_a_resource_link_a_tool_returns_can_be_read_back(procs: list[Proc], tmp_path: Path) -> None:
    config = {"upstreams": {"fx": stdio_upstream("links-fx"), "gx": stdio_upstream("links-gx")}}
    url = start_triad(procs, write_config(tmp_path, config), wait_ready=2)
    async with http_session(url) as session:
        listed = {str(resource.uri) for resource in (await session.list_resources()).resources}
        [link] = (await call(session, "fx__link"))["content"]
        assert link["type"] == "resource_link" and link["uri"] in listed
        read = await session.read_resource(link["uri"])
        assert "links-fx" in read.contents[0].text and str(read.contents[0].uri) == link["uri"]
        [embedded] = (await call(session, "gx__embedded"))["content"]
        assert embedded["resource"]["uri"] in listed
        assert (link["uri"], embedded["resource"]["uri"]) == ("fixture://fx/static", "fixture://gx/static")


async def test_a_tool_that_runs_only_as_a_task_is_hidden_from_a_client_that_takes_none(procs: list[Proc],
                                                                                      tmp_path: Path) -> None:
    """A tool with `execution.taskSupport: required` can only be called as a task: a client that did not declare
    the tasks capability (the SDK's client declares none) does not see it, and `triad plan` says why
    (`tests/test_tasks.py`: a client that declared it does)."""
    config = write_config(tmp_path, {"upstreams": {"fx": stdio_upstream("tasks-fx", "--task-tool")}})
    url = start_triad(procs, config, wait_ready=1)
    async with http_session(url) as session:
        listed = {tool.name for tool in (await session.list_tools()).tools}
        assert "echo" in listed and "only_as_task" not in listed
        with pytest.raises(MCPError) as raised:
            await call(session, "only_as_task")
        assert raised.value.error.code == -32602
    plan = await anyio.run_process([*TRIAD, "plan", "-c", str(config), "--json"], cwd=ROOT)
    hidden = {entry["name"]: entry for entry in json.loads(plan.stdout)["hidden"]}
    assert "the client takes tasks" in json.dumps(hidden["only_as_task"])
