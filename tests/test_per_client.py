"""`sessions: per_client`: each downstream session has an upstream session of its own, on every upstream transport.

Two clients at once, with different capabilities and roots, against real upstreams: the fixture server over stdio,
streamable HTTP and SSE, and `@modelcontextprotocol/server-filesystem`, which adopts its client's roots as the
directories it may touch.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import anyio
import mcp_types as types
import pytest
from mcp import ClientSession
from mcp.client.streamable_http import streamable_http_client

from tests.conftest import NODE_DIR, Proc, node_bin, start_fixture, start_triad, stdio_upstream, write_config
from tests.test_gateway_e2e import call
from tests.test_relays import FakeUser, two_clients_ask

pytestmark = pytest.mark.anyio


def upstream_for(procs: list[Proc], transport: str, name: str) -> dict[str, Any]:
    if transport == "stdio":
        return stdio_upstream(name, sessions="per_client")
    return {"url": start_fixture(procs, transport, name), "sessions": "per_client"}


@pytest.mark.parametrize("transport", ["stdio", "http", "sse"])
async def test_each_client_gets_only_its_own_answers_and_logs(procs: list[Proc], tmp_path: Path,
                                                              transport: str) -> None:
    config = write_config(tmp_path, {"upstreams": {"fx": upstream_for(procs, transport, f"per-client-{transport}")}})
    url = start_triad(procs, config, wait_ready=1)
    (ada, bob), results = await two_clients_ask(url, log_calls=3, seconds=60)
    for user in (ada, bob):
        texts = results[user.name]
        assert f"model of {user.name}" in texts[0]
        assert f"{user.name} says yes" in texts[1]
        assert f"file:///home/{user.name}" in texts[2] and "home/" + {"ada": "bob", "bob": "ada"}[user.name] \
            not in texts[2]
        assert user.asked == ["sampling", f"elicitation:q-{user.name}", "roots"]
        assert len(user.logs) == 3 * 4, user.logs
    assert "client session opened (2 open)" in procs[-1].stderr


async def test_a_client_is_asked_only_what_it_declared(procs: list[Proc], tmp_path: Path) -> None:
    """A client without sampling gets an upstream session that does not offer sampling: the upstream's question
    fails for it as it would on a direct connection, while a client that declared it is asked."""
    config = write_config(tmp_path, {"upstreams": {"fx": upstream_for(procs, "http", "per-client-caps")}})
    url = start_triad(procs, config, wait_ready=1)
    ada = FakeUser("ada")
    async with streamable_http_client(url) as (read, write), \
            ClientSession(read, write, elicitation_callback=ada.elicitation) as plain:
        await plain.initialize()
        refused = await call(plain, "sample", {"prompt": "hi"})
        assert "model of" not in json.dumps(refused) and ada.asked == []
    async with streamable_http_client(url) as (read, write), ada.session(read, write) as session:
        await session.initialize()
        assert "model of ada" in (await call(session, "sample", {"prompt": "hi"}))["content"][0]["text"]


class RootsUser:
    """A client whose roots are one directory, and which says so again when they change."""

    def __init__(self, root: Path) -> None:
        self.root = root

    async def roots(self, _ctx: Any) -> types.ListRootsResult:
        return types.ListRootsResult(roots=[types.Root(uri=self.root.as_uri())])


async def allowed_directories(session: ClientSession) -> str:
    return str((await call(session, "list_allowed_directories"))["content"][0]["text"])


async def test_server_filesystem_adopts_each_clients_own_roots(procs: list[Proc], tmp_path: Path) -> None:
    node_bin()
    server = str(NODE_DIR / "node_modules" / ".bin" / "mcp-server-filesystem")
    shared, ada_dir, bob_dir = (tmp_path / name for name in ("shared", "ada", "bob"))
    for directory in (shared, ada_dir, bob_dir):
        directory.mkdir()
        (directory / "note.txt").write_text(f"the note of {directory.name}")
    config = write_config(tmp_path, {"upstreams": {"fs": {"command": server, "args": [str(shared)],
                                                          "sessions": "per_client"}}})
    url = start_triad(procs, config, wait_ready=1)
    ada, bob = RootsUser(ada_dir), RootsUser(bob_dir)

    async def run(user: RootsUser, other: Path) -> None:
        async with streamable_http_client(url) as (read, write), \
                ClientSession(read, write, list_roots_callback=user.roots) as session:
            await session.initialize()
            with anyio.fail_after(30):
                # The upstream asks for the roots once its session is open, then applies them on its own time: no
                # event says when, so its own answer is the state waited on.
                while user.root.name not in await allowed_directories(session):  # noqa: ASYNC110
                    await anyio.sleep(0.1)
            mine = await call(session, "read_text_file", {"path": str(user.root / "note.txt")})
            assert mine["content"][0]["text"] == f"the note of {user.root.name}"
            theirs = await call(session, "read_text_file", {"path": str(other / "note.txt")})
            assert theirs.get("isError") is True and "the note of" not in json.dumps(theirs)

    with anyio.fail_after(90):
        async with anyio.create_task_group() as tg:
            tg.start_soon(run, ada, bob_dir)
            tg.start_soon(run, bob, ada_dir)
