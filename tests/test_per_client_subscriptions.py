"""Resource subscriptions on a `sessions: per_client` upstream are the client's own: `resources/subscribe` goes to
the client's own upstream session, as a direct connection's would, so the updates that session pushes reach the
client (and only it). server-everything, over stdio and streamable HTTP, pushes an update of each resource a session
subscribed to as soon as that session calls `toggle-subscriber-updates` (then every 5 s).
"""

from __future__ import annotations

from pathlib import Path

import anyio
import httpx2
import pytest

from tests.conftest import Proc, start_triad
from tests.test_tasks import ADA, BOB, Client, everything_config

pytestmark = pytest.mark.anyio

URI = "demo://resource/dynamic/text/1"


def updates(client: Client) -> list[str]:
    return [m["params"]["uri"] for m in client.pushed if m.get("method") == "notifications/resources/updated"]


@pytest.mark.parametrize("transport", ["stdio", "http"])
async def test_a_per_client_subscription_is_made_on_the_clients_own_session(procs: list[Proc], tmp_path: Path,
                                                                          transport: str) -> None:
    config = everything_config(tmp_path, "per_client", procs if transport == "http" else None)
    url = start_triad(procs, config, wait_ready=1)
    async with httpx2.AsyncClient(timeout=60) as http, anyio.create_task_group() as tg:
        ada = await Client(http, url, ADA).open({})
        bob = await Client(http, url, BOB).open({})
        await tg.start(ada.listen)
        await tg.start(bob.listen)
        for client in (ada, bob):
            assert (await client.ask("resources/subscribe", {"uri": URI}))["result"] == {}
        started = await ada.ask("tools/call", {"name": "toggle-subscriber-updates", "arguments": {}})
        assert "Started" in started["result"]["content"][0]["text"], started
        with anyio.fail_after(60):
            while URI not in updates(ada):
                await ada.changed.wait()
        # bob's own session was told nothing to push: a round trip of his, and still nothing of ada's came to him
        assert "result" in await bob.ask("ping", {})
        assert updates(bob) == []
        assert (await ada.ask("resources/unsubscribe", {"uri": URI}))["result"] == {}
        tg.cancel_scope.cancel()
