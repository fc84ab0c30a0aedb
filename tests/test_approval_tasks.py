"""Approval of a call that runs as a task: a 2026-07-28 client declaring the tasks extension is asked in an
`input_required` round before the task exists; yes creates the task, no is a tool error and no task (the
conformance fixture, which runs tasks)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import httpx2
import pytest

from tests.conftest import Proc
from tests.raw_clients import MODERN, answer_of, dumps, modern_headers, modern_post
from tests.test_tasks import ADA, EXTENSION, modern_triad, request, settled

pytestmark = pytest.mark.anyio

CAPABILITIES = {"extensions": {EXTENSION: {}}, "elicitation": {"form": {}}}


async def ask(http: httpx2.AsyncClient, url: str, params: dict[str, Any]) -> dict[str, Any]:
    envelope = {"io.modelcontextprotocol/protocolVersion": MODERN,
                "io.modelcontextprotocol/clientCapabilities": CAPABILITIES,
                "io.modelcontextprotocol/clientInfo": {"name": "approval-tasks", "version": "1"}}
    headers = modern_headers("tools/call", params.get("name")) | {"Authorization": f"Bearer {ADA}"}
    return answer_of(await modern_post(http, url, dumps(request(1, "tools/call", {**params, "_meta": envelope})),
                                       headers))


@pytest.mark.parametrize("protocol", ["auto", "handshake"])
async def test_a_task_waits_in_input_required_for_its_approval(procs: list[Proc], tmp_path: Path,
                                                               protocol: str) -> None:
    rules = {"rules": [{"tools": ["slow_compute"], "timeout": "60s"}]}
    async with modern_triad(procs, tmp_path, protocol=protocol, approval=rules) as url, \
            httpx2.AsyncClient(timeout=60) as http:
        call = {"name": "slow_compute", "arguments": {"seconds": 1, "label": "approved"}}
        asked = (await ask(http, url, call))["result"]
        assert asked["resultType"] == "input_required", asked
        question = asked["inputRequests"]["input"]
        assert question["method"] == "elicitation/create" and "slow_compute" in question["params"]["message"]
        created = (await ask(http, url, {**call, "requestState": asked["requestState"],
                                         "inputResponses": {"input": {"action": "accept"}}}))["result"]
        assert created["resultType"] == "task", created
        assert (await settled(http, url, created["taskId"]))["status"] == "completed"

        asked = (await ask(http, url, call))["result"]
        refused = (await ask(http, url, {**call, "requestState": asked["requestState"],
                                         "inputResponses": {"input": {"action": "decline"}}}))["result"]
        assert refused.get("resultType", "complete") == "complete" and refused["isError"] is True, refused
        assert "the caller answered decline" in refused["content"][0]["text"]
