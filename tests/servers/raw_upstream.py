"""An MCP upstream written without the SDK: plain JSON-RPC, so every number and field it sends is exactly its own.

    python raw_upstream.py [--transport stdio|http|sse] [--name N] [--tag T] [--no-templates]

It speaks the handshake era (2025-11-25) over stdio (one message per line), streamable HTTP (`/mcp`: JSON, or an
event stream when a call reports progress) and legacy SSE (`/sse` + `/messages/`). Every result carries integers,
floats, `-0.0`, integers beyond 64 bits, `null`s, unknown fields and `_meta` at every level it can; a call that asks
for progress gets progress notifications with integer and float values and a `_meta` of their own. Names and URIs
carry the tag (`numbers_<tag>`, `raw://<tag>/item`), so several instances can sit behind one Triad unprefixed.
With `--no-templates`, `resources/templates/list` is answered -32601 (an upstream without templates). With
`--breaking` (HTTP), a tool `break_<tag>` answers a call with a stream that asks the client something (an
elicitation) and then breaks off mid-stream, the connection cut. With `--tools-file F`, `tools/list` answers the
JSON list in F as its tools, exactly as written (odd or invalid definitions: `tests/test_odd_definitions.py`).
`echo_<tag>` answers with the JSON text it is given (`{"hex": <the text's UTF-8 bytes in hex>}`), exactly as given,
in its result's structured content, `_meta`, a content item and an unknown field.
On `/mcp?redirect=<status>&on=<method>,...`, each POST of those methods (of every one, without `on`) is answered
with that status and `Location: <MOVED>`.
`wait_<tag>` is a call that is never answered (`WAITING` on stderr when it comes, then `WAIT_PARAMS <its params but
_meta, JSON>`); each `notifications/cancelled` it receives is printed on stderr as `CANCELLED <reason>` and
`CANCEL_META <its _meta, JSON>`. A `numbers_<tag>` call with `{"log": true}` sends `LOG` (a log notification with
`_meta`) before its result.
Over HTTP and SSE it binds 127.0.0.1 on a free port and prints `READY <port>` on stderr.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import socket
import sys
import uuid
from pathlib import Path
from typing import Any

NUMBERS: dict[str, Any] = {
    "int": 1, "float": 1.0, "negzero": -0.0, "zero": 0, "big": 2**80, "negbig": -(2**70), "tiny": 5e-324,
    "huge": 1.7976931348623157e308, "tenth": 0.1, "exp": 1e21, "nested": [1, 1.0, [2, 2.5, -0.0]], "null": None,
    "yes": True, "text": "1",
}
"""The values every message carries somewhere: types a JSON parser keeps apart, and a careless one merges."""
MOVED = "http://127.0.0.1:9/moved/mcp"
"""Where a redirect points (nothing listens there)."""
META: dict[str, Any] = {"example.com/numbers": NUMBERS, "example.com/flag": False}


def tools(tag: str) -> dict[str, Any]:
    return {
        "tools": [{
            "name": f"numbers_{tag}", "title": "Numbers", "description": "Answers numbers of every kind.",
            "inputSchema": {"type": "object", "properties": {"n": {"type": "integer", "minimum": 0, "maximum": 2**70,
                                                                   "default": 1, "multipleOf": 0.5}}},
            "annotations": {"readOnlyHint": True, "x-weight": 1, "x-ratio": 1.0},
            "icons": [{"src": "https://example.com/i.png", "sizes": ["1x1"], "x-scale": -0.0}],
            "_meta": META, "x-future": {"numbers": NUMBERS}, "futureFlag": 2**64,
        }, {"name": f"wait_{tag}", "description": "Never answers.", "inputSchema": {"type": "object"}},
            {"name": f"echo_{tag}", "description": "Answers the JSON text it is given.",
             "inputSchema": {"type": "object", "properties": {"hex": {"type": "string"}}}}],
        "_meta": {f"example.com/page-{tag}": NUMBERS},
    }


def call_result(tag: str) -> dict[str, Any]:
    return {
        "content": [
            {"type": "text", "text": "numbers", "annotations": {"priority": 1, "audience": ["user"],
                                                                 "x-more": 0.0}, "_meta": META},
            {"type": "text", "text": "half", "annotations": {"priority": 0.5, "lastModified": "2025-01-01T00:00:00Z"}},
            {"type": "resource_link", "uri": f"raw://{tag}/item", "name": "item", "annotations": {"priority": 0},
             "size": 2**40, "x-link": -0.0},
        ],
        "structuredContent": NUMBERS,
        "isError": False,
        "_meta": META,
        "x-top": {"numbers": NUMBERS},
    }


def resources(tag: str) -> dict[str, Any]:
    return {"resources": [{"uri": f"raw://{tag}/item", "name": "item", "mimeType": "text/plain", "size": 2**33,
                           "annotations": {"priority": 1, "audience": ["assistant"]}, "_meta": META,
                           "x-future": NUMBERS}],
            "_meta": {f"example.com/resources-{tag}": 1}}


def templates(tag: str) -> dict[str, Any]:
    return {"resourceTemplates": [{"uriTemplate": f"raw://{tag}/items/{{id}}", "name": "items",
                                   "annotations": {"priority": 1}, "_meta": META, "x-future": 1.0}],
            "_meta": {f"example.com/templates-{tag}": -0.0}}


def read_result(uri: str) -> dict[str, Any]:
    return {"contents": [{"uri": uri, "mimeType": "text/plain", "text": "item", "_meta": META, "x-size": 1}],
            "_meta": META, "x-top": 2**65}


def prompts(tag: str) -> dict[str, Any]:
    return {"prompts": [{"name": f"greet_{tag}", "description": "Greets.", "arguments": [{"name": "who"}],
                         "_meta": META, "x-future": 1}],
            "_meta": {f"example.com/prompts-{tag}": 1.0}}


def prompt_result() -> dict[str, Any]:
    return {"description": "A greeting",
            "messages": [{"role": "user", "content": {"type": "text", "text": "hello",
                                                      "annotations": {"priority": 1}, "_meta": META},
                          "x-message": 1}],
            "_meta": META, "x-top": -0.0}


PROGRESS = ({"progress": 1, "total": 3, "message": "one", "_meta": META},
            {"progress": 2.5, "total": 3.0, "_meta": {"example.com/step": 2}},
            {"progress": 3, "x-progress": 2**70})
"""What a call that asks for progress is told, in order, before its result (`progressToken` added)."""


LOG = {"level": "warning", "logger": "raw", "data": {"n": 1, "x": [0.5, None]},
       "_meta": {"example.com/log": {"n": 2}, "io.modelcontextprotocol/future": True}}
"""The log notification a `numbers_<tag>` call with `{"log": true}` sends before its result."""


class Upstream:
    def __init__(self, name: str, tag: str, no_templates: bool, breaking: bool = False,
                 listed: list[Any] | None = None) -> None:
        self.name, self.tag, self.no_templates, self.breaking = name, tag, no_templates, breaking
        self.listed = listed

    def answer(self, message: Any) -> list[dict[str, Any] | bytes]:
        """The messages one incoming message is answered with: notifications first, then the response (none for
        a call of `wait_<tag>`)."""
        if isinstance(message, dict) and message.get("method") == "notifications/cancelled":
            params = message.get("params") or {}
            print(f"CANCELLED {params.get('reason')}", file=sys.stderr, flush=True)
            print(f"CANCEL_META {json.dumps(params.get('_meta'), sort_keys=True)}", file=sys.stderr, flush=True)
        if not isinstance(message, dict) or "method" not in message or "id" not in message:
            return []  # notifications and responses need no answer
        if message["method"] == "tools/call" and (message.get("params") or {}).get("name") == f"wait_{self.tag}":
            print("WAITING", file=sys.stderr, flush=True)
            called = {k: v for k, v in message["params"].items() if k != "_meta"}
            print(f"WAIT_PARAMS {json.dumps(called, sort_keys=True)}", file=sys.stderr, flush=True)
            return []
        ident, method, params = message["id"], message["method"], message.get("params") or {}
        if method == "tools/call" and params.get("name") == f"echo_{self.tag}":
            return [echo(ident, bytes.fromhex(params["arguments"]["hex"]))]
        out: list[dict[str, Any] | bytes] = []
        try:
            result = self.result(method, params)
        except LookupError as exc:
            return [{"jsonrpc": "2.0", "id": ident, "error": {"code": -32601, "message": str(exc)}}]
        token = (params.get("_meta") or {}).get("progressToken")
        if method == "tools/call" and (params.get("arguments") or {}).get("log"):
            out.append({"jsonrpc": "2.0", "method": "notifications/message", "params": LOG})
        if method == "tools/call" and token is not None:
            out += [{"jsonrpc": "2.0", "method": "notifications/progress", "params": {"progressToken": token, **p}}
                    for p in PROGRESS]
        return [*out, {"jsonrpc": "2.0", "id": ident, "result": result}]

    def result(self, method: str, params: dict[str, Any]) -> dict[str, Any]:
        tag = self.tag
        if method == "initialize":
            version = params.get("protocolVersion")
            return {"protocolVersion": version if version in ("2024-11-05", "2025-03-26", "2025-06-18") else
                    "2025-11-25", "capabilities": {"tools": {}, "resources": {}, "prompts": {}},
                    "serverInfo": {"name": self.name, "version": "1"}}
        if method == "ping":
            return {}
        if method == "tools/list" and self.listed is not None:
            return {"tools": self.listed}
        if method == "tools/list":
            listed = tools(tag)
            if self.breaking:
                listed["tools"].append({"name": f"break_{tag}", "inputSchema": {"type": "object"}})
            return listed
        if method == "tools/call" and params.get("name") == f"numbers_{tag}":
            return call_result(tag)
        if method == "resources/list":
            return resources(tag)
        if method == "resources/templates/list" and not self.no_templates:
            return templates(tag)
        if method == "resources/read" and str(params.get("uri", "")).startswith(f"raw://{tag}/"):
            return read_result(params["uri"])
        if method == "prompts/list":
            return prompts(tag)
        if method == "prompts/get" and params.get("name") == f"greet_{tag}":
            return prompt_result()
        raise LookupError(f"Method not found: {method}")


def echo(ident: Any, raw: bytes) -> bytes:
    """The answer to a call of `echo_<tag>`, the raw JSON text spliced in byte for byte."""
    return (b'{"jsonrpc":"2.0","id":' + json.dumps(ident).encode() + b',"result":{"content":[{"type":"text",'
            b'"text":"echo","x-raw":' + raw + b'}],"structuredContent":{"value":' + raw + b'},"_meta":'
            b'{"example.com/raw":' + raw + b',"io.modelcontextprotocol/related-task":{"taskId":"t-1"},'
            b'"io.modelcontextprotocol/ui":{"x":1},"io.modelcontextprotocol/future":' + raw + b'},"x-raw":' + raw +
            b',"isError":false}}')


def dumps(message: dict[str, Any] | bytes) -> bytes:
    return message if isinstance(message, bytes) else json.dumps(message, separators=(",", ":")).encode()


async def serve_stdio(upstream: Upstream) -> None:
    loop = asyncio.get_running_loop()
    reader = asyncio.StreamReader(limit=2**24)
    await loop.connect_read_pipe(lambda: asyncio.StreamReaderProtocol(reader), sys.stdin)
    while line := await reader.readline():
        if line.strip():
            for answer in upstream.answer(json.loads(line)):
                sys.stdout.buffer.write(dumps(answer) + b"\n")
            sys.stdout.buffer.flush()


def http_app(upstream: Upstream) -> Any:
    from starlette.applications import Starlette
    from starlette.requests import Request
    from starlette.responses import Response, StreamingResponse
    from starlette.routing import Route

    sessions: dict[str, asyncio.Queue[bytes]] = {}

    async def mcp(request: Request) -> Response:
        if request.method == "DELETE":
            return Response(status_code=200)
        if request.method == "GET":
            return Response(status_code=405)
        message = json.loads(await request.body())
        redirect, on = request.query_params.get("redirect"), request.query_params.get("on")
        if redirect and (on is None or message.get("method") in on.split(",")):
            return Response(status_code=int(redirect), headers={"location": MOVED})
        if upstream.breaking and (message.get("params") or {}).get("name") == f"break_{upstream.tag}":
            return StreamingResponse(break_off(), media_type="text/event-stream")
        answers = upstream.answer(message)
        if not answers and "id" in message:  # a call never answered: the client gives up on it
            await asyncio.Event().wait()
        if not answers:
            return Response(status_code=202)
        last = answers[-1]
        headers = {"mcp-session-id": uuid.uuid4().hex} \
            if isinstance(last, dict) and last.get("result", {}).get("serverInfo") else {}
        if len(answers) == 1:
            return Response(dumps(answers[0]), media_type="application/json", headers=headers)
        events = b"".join(b"event: message\ndata: " + dumps(a) + b"\n\n" for a in answers)
        return Response(events, media_type="text/event-stream", headers=headers)

    async def break_off() -> Any:
        asking = {"jsonrpc": "2.0", "id": "ask-1", "method": "elicitation/create", "params": {
            "mode": "form", "message": "Go on?", "requestedSchema": {"type": "object", "properties": {}}}}
        yield b"event: message\ndata: " + dumps(asking) + b"\n\n"
        await asyncio.sleep(0.2)
        raise RuntimeError("the stream breaks off here")

    async def sse(request: Request) -> Response:
        session = uuid.uuid4().hex
        queue = sessions[session] = asyncio.Queue()

        async def stream() -> Any:
            yield f"event: endpoint\ndata: /messages/?session_id={session}\n\n".encode()
            try:
                while True:
                    yield await queue.get()
            finally:
                sessions.pop(session, None)

        return StreamingResponse(stream(), media_type="text/event-stream")

    async def messages(request: Request) -> Response:
        queue = sessions.get(request.query_params.get("session_id", ""))
        if queue is None:
            return Response(status_code=404)
        for answer in upstream.answer(json.loads(await request.body())):
            queue.put_nowait(b"event: message\ndata: " + dumps(answer) + b"\n\n")
        return Response(status_code=202)

    return Starlette(routes=[Route("/mcp", mcp, methods=["GET", "POST", "DELETE"]), Route("/sse", sse),
                             Route("/messages/", messages, methods=["POST"])])


async def serve_http(upstream: Upstream) -> None:
    import uvicorn

    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    sock.listen(128)  # listening before READY is said
    server = uvicorn.Server(uvicorn.Config(http_app(upstream), log_level="warning", http="h11",
                                            timeout_graceful_shutdown=2))
    print(f"READY {sock.getsockname()[1]}", file=sys.stderr, flush=True)
    await server.serve(sockets=[sock])


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--transport", choices=["stdio", "http", "sse"], default="stdio")
    parser.add_argument("--name", default="raw")
    parser.add_argument("--tag", default="raw")
    parser.add_argument("--no-templates", action="store_true")
    parser.add_argument("--breaking", action="store_true")
    parser.add_argument("--tools-file")
    args = parser.parse_args()
    listed = json.loads(Path(args.tools_file).read_text()) if args.tools_file else None
    upstream = Upstream(args.name, args.tag, args.no_templates, args.breaking, listed)
    asyncio.run(serve_stdio(upstream) if args.transport == "stdio" else serve_http(upstream))


if __name__ == "__main__":
    main()
