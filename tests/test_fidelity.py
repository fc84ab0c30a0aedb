"""What a result names must work when the client uses it: links and embedded resources carry Triad's URIs."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.conftest import Proc, start_triad, stdio_upstream, write_config
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
