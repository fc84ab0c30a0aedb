"""The floor for any Python gateway on this machine: a transparent HTTP pipe in front of one MCP upstream.

uvicorn (uvloop, httptools), one keep-alive HTTP client, one JSON parse per message (the request), no policy, no
renaming; responses are relayed as bytes. `python pipe.py UPSTREAM_URL PORT`.
"""

from __future__ import annotations

import json
import sys

import httpx2
import uvicorn

UPSTREAM = sys.argv[1]
PASSED = ("content-type", "mcp-session-id", "mcp-protocol-version")
client = httpx2.AsyncClient(timeout=60)


async def app(scope: dict, receive, send) -> None:  # type: ignore[no-untyped-def]
    if scope["type"] == "lifespan":
        while (await receive())["type"] != "lifespan.shutdown":
            await send({"type": "lifespan.startup.complete"})
        await send({"type": "lifespan.shutdown.complete"})
        return
    body = b""
    while True:
        event = await receive()
        body += event.get("body", b"")
        if not event.get("more_body"):
            break
    if body:
        json.loads(body)  # the one parse: what a gateway must at least do to route
    headers = {k.decode(): v.decode() for k, v in scope["headers"]
               if k.startswith(b"mcp-") or k in (b"content-type", b"accept", b"last-event-id")}
    response = await client.request(scope["method"], UPSTREAM, content=body, headers=headers)
    await send({"type": "http.response.start", "status": response.status_code,
                "headers": [(k.encode(), v.encode()) for k, v in response.headers.items() if k in PASSED]})
    await send({"type": "http.response.body", "body": response.content})


if __name__ == "__main__":
    uvicorn.run(app, host="127.0.0.1", port=int(sys.argv[2]), loop="uvloop", http="httptools", log_level="warning",
                access_log=False)
