"""The HTTP rules of every hop to an upstream (`consumers._http_rules`): both client libraries refuse to follow a
redirect (it would resend the request, and its headers, to another address) and take proxies from the
environment. A real listener answers 307 pointing at a second one, which must never be reached."""

from __future__ import annotations

from typing import Any

import anyio
import httpx2
import mcp_types as types
import pytest
from anyio.abc import SocketStream
from mcp.shared.exceptions import MCPError

from consumers._http_rules import HTTP_RULES
from consumers.transports import ssl_context

pytestmark = pytest.mark.anyio


async def redirector(reached: list[str]) -> tuple[str, Any, Any]:
    """(URL that answers 307, the listeners): the 307 points at a second listener that records any visit."""
    target = await anyio.create_tcp_listener(local_host="127.0.0.1")
    source = await anyio.create_tcp_listener(local_host="127.0.0.1")
    target_port = target.extra(anyio.abc.SocketAttribute.local_port)

    async def visited(stream: SocketStream) -> None:
        reached.append("visited")
        await stream.aclose()

    async def redirect(stream: SocketStream) -> None:
        await stream.receive()
        await stream.send(b"HTTP/1.1 307 Temporary Redirect\r\nLocation: http://127.0.0.1:%d/mcp\r\n"
                          b"Content-Length: 0\r\nConnection: close\r\n\r\n" % target_port)
        await stream.aclose()

    port = source.extra(anyio.abc.SocketAttribute.local_port)
    return f"http://127.0.0.1:{port}/mcp", (source, redirect), (target, visited)


async def test_neither_hop_follows_a_redirect() -> None:
    from consumers._direct_http import open_link

    reached: list[str] = []
    url, (source, redirect), (target, visited) = await redirector(reached)
    async with anyio.create_task_group() as tg:
        tg.start_soon(source.serve, redirect)
        tg.start_soon(target.serve, visited)
        async with open_link(url, {}, 5, ssl_context("x", None)) as link:  # the direct path (aiohttp)
            assert link.client.trust_env is False  # the environment's proxy is resolved once (`env_proxy`)
            direct = link.direct("2025-11-25", lambda _method, _params: None)
            call = types.CallToolRequest(params=types.CallToolRequestParams(name="echo", arguments={}))

            async def no_progress(_params: dict[str, Any]) -> None:
                return None

            with pytest.raises(MCPError, match="follows no redirects"):  # an error, never a second request
                await direct.request(call, no_progress, None)
        async with httpx2.AsyncClient(follow_redirects=HTTP_RULES.follow_redirects,
                                      trust_env=HTTP_RULES.trust_env) as http:  # the SDK session's client
            assert (await http.post(url, json={})).status_code == 307
        tg.cancel_scope.cancel()
    assert reached == []


def test_proxies_come_from_the_environment_and_no_proxy_exempts_a_host(monkeypatch: pytest.MonkeyPatch) -> None:
    from consumers._http_rules import env_proxy

    monkeypatch.setenv("HTTP_PROXY", "http://proxy.example:3128")
    monkeypatch.setenv("NO_PROXY", "internal.example")
    assert env_proxy("http://upstream.example/mcp") == "http://proxy.example:3128"
    assert env_proxy("http://internal.example/mcp") is None
    monkeypatch.delenv("HTTP_PROXY")
    assert env_proxy("http://upstream.example/mcp") is None
