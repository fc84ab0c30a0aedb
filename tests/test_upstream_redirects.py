"""An HTTP upstream whose endpoint redirects (301, 302, 303, 307, 308) is refused by design (`consumers._http_rules`),
and every path that meets the redirect says so, naming where it points (issue #30.9): the SDK's session (the
handshake and the catalog: the upstream's state) and the direct path (a call, once the upstream moved after its
handshake), instead of "malformed tools/call result".

One raw upstream (`tests/servers/raw_upstream.py`, `?redirect=<status>&on=<methods>`) behind one Triad, one
configured upstream per (status, what is redirected).
"""

from __future__ import annotations

import json
from collections.abc import Iterator

import httpx2
import pytest

from tests.conftest import PYTHON, ROOT, Proc, marker, start_triad, write_config
from tests.raw_clients import DEADLINE, HandshakeSession, answer_of, call

pytestmark = pytest.mark.anyio

RAW = ROOT / "tests" / "servers" / "raw_upstream.py"
MOVED = "http://127.0.0.1:9/moved/mcp"
"""`raw_upstream.MOVED`: where its redirects point."""
STATUSES = [301, 302, 303, 307, 308]


@pytest.fixture(scope="module")
def gateway(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    started: list[Proc] = []
    try:
        upstream = Proc([PYTHON, str(RAW), "--transport", "http", "--name", marker("redirects"), "--tag", "h"])
        started.append(upstream)
        port = upstream.wait_for(r"READY (\d+)").group(1)
        base = f"http://127.0.0.1:{port}/mcp"
        upstreams = {}
        for status in STATUSES:
            upstreams[f"all{status}"] = {"url": f"{base}?redirect={status}"}
            upstreams[f"call{status}"] = {"url": f"{base}?redirect={status}&on=tools/call"}
        config = write_config(tmp_path_factory.mktemp("redirects"),
                              {"upstreams": upstreams, "naming": {"prefix": "always"}})
        url = start_triad(started, config)
        for status in STATUSES:  # each handshake-redirected upstream is down once, each other one ready
            started[-1].wait_for(rf"upstream all{status} is down")
            started[-1].wait_for(rf"upstream call{status} ready")
        yield url
    finally:
        for proc in reversed(started):
            proc.terminate()


def names_the_redirect(message: str, status: int | None = None) -> bool:
    return MOVED in message and "redirect" in message.lower() and \
        (status is None or str(status) in message) and "malformed" not in message


async def test_a_redirected_handshake_leaves_the_upstream_down_naming_the_location(gateway: str) -> None:
    async with httpx2.AsyncClient(timeout=DEADLINE) as http:
        upstreams = (await http.get(gateway.removesuffix("/mcp") + "/readyz")).json()["upstreams"]
    wrong = [f"all{s}: {upstreams[f'all{s}']}" for s in STATUSES
             if upstreams[f"all{s}"]["state"] != "down" or not names_the_redirect(upstreams[f"all{s}"]["reason"])]
    assert not wrong, "\n".join(wrong)


async def test_a_redirected_call_says_where_the_upstream_redirects(gateway: str) -> None:
    wrong = []
    async with httpx2.AsyncClient(timeout=DEADLINE) as http:
        session = await HandshakeSession(http, gateway).open()
        for i, status in enumerate(STATUSES):
            answer = answer_of(await session.post(json.dumps(call(i + 1, f"call{status}__echo_h",
                                                                  {"hex": b"1".hex()})).encode()))
            text = json.dumps(answer)
            if not names_the_redirect(text, status):
                wrong.append(f"call{status}: {text[:300]}")
    assert not wrong, "\n".join(wrong)
