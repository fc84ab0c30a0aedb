"""A real MCP upstream for the tests, built on the SDK's low-level server so every wire detail is under control.

    python fixture_upstream.py [--transport stdio|http|sse] [--name N] [--page-size K] [--extra-tools M]
                               [--hang-initialize] [--slow-first-ping S] [--prefix P] [--unavailable-calls K]
                               [--endless-503] [--tls CERT KEY]

Over HTTP and SSE it binds 127.0.0.1 on a free port and prints `READY <port>` on stderr. Tools cover every
content type (text, image, audio, embedded resource, resource link, structured with outputSchema, error), a slow
tool, one that reports progress, one that kills the process mid-call, and one with a 70-character name.
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import sys
import time
from typing import Any

import anyio
import anyio.lowlevel
import mcp_types as types
import uvicorn
from mcp.server import Server
from mcp.server.sse import SseServerTransport
from mcp.shared.exceptions import MCPError
from mcp.shared.message import ServerMessageMetadata
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Mount, Route

PNG_1PX = "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mNk+M9QDwADhgGAWjR9awAAAABJRU5ErkJggg=="
WAV_BYTES = "UklGRiQAAABXQVZFZm10IBAAAAABAAEAQB8AAEAfAAABAAgAZGF0YQAAAAA="
RICH_SCHEMA: dict[str, Any] = {
    "type": "object",
    "$defs": {"address": {"type": "object", "properties": {"city": {"type": "string", "minLength": 1}},
                          "required": ["city"], "additionalProperties": False}},
    "properties": {
        "mode": {"const": "fast"},
        "level": {"anyOf": [{"const": "low", "type": "string"}, {"const": "high", "type": "string"}]},
        "home": {"$ref": "#/$defs/address", "description": "Where they live"},
        "nickname": {"type": ["string", "null"], "maxLength": 20},
        "tags": {"type": "array", "items": {"type": "string", "pattern": "^[a-z]+$"}, "maxItems": 3},
    },
    "required": ["mode", "missing_property"],
    "additionalProperties": False,
}
LONG_NAME = "a_tool_with_a_very_long_name_that_goes_beyond_the_sixty_four_limit_x"  # 70 characters


def tool(name: str, description: str, properties: dict[str, Any] | None = None, **extra: Any) -> dict[str, Any]:
    schema: dict[str, Any] = {"type": "object", "properties": properties or {}}
    return {"name": name, "description": description, "inputSchema": schema, **extra}


def build_tools(prefix: str, extra: int, echo_description: str = "Echo the text.") -> list[dict[str, Any]]:
    text = {"text": {"type": "string"}}
    tools = [
        tool(f"{prefix}echo", echo_description, {**text}, title="Echo", annotations={"readOnlyHint": True},
             icons=[{"src": "https://example.invalid/echo.png", "mimeType": "image/png"}],
             _meta={"fixture/kind": "echo"}),
        tool(f"{prefix}image", "An image."),
        tool(f"{prefix}audio", "Some audio."),
        tool(f"{prefix}embedded", "An embedded resource."),
        tool(f"{prefix}link", "A resource link."),
        tool(f"{prefix}structured", "Structured output.", {"n": {"type": "integer"}},
             outputSchema={"type": "object", "properties": {"double": {"type": "integer"}}, "required": ["double"]}),
        tool(f"{prefix}fail", "Always a tool error."),
        tool(f"{prefix}slow", "Sleeps.", {"seconds": {"type": "number"}}),
        tool(f"{prefix}progress", "Reports progress.", {"steps": {"type": "integer"}, "delay": {"type": "number"},
                                                          "then": {"type": "number"}}),
        tool(f"{prefix}die", "Exits the process mid-call."),
        tool(f"{prefix}garbage", "Writes malformed JSON-RPC on stdout (stdio only), then never answers."),
        tool(f"{prefix}ask", "Asks the user (elicitation).", {"question": {"type": "string"}},
             annotations={"title": "Ask the user"}),
        tool(f"{prefix}sample", "Asks the client's model (sampling).", {"prompt": {"type": "string"}}),
        tool(f"{prefix}roots", "Lists the client's roots."),
        tool(f"{prefix}log", "Sends one log message per level."),
        {"name": f"{prefix}rich", "description": "Echoes its arguments; a schema with $ref, const, unions, limits.",
         "inputSchema": RICH_SCHEMA},
        tool(f"{prefix}big", "Returns `size` characters of text.", {"size": {"type": "integer"}}),
        tool(f"{prefix}flood", "Sends many log and progress notifications.", {"count": {"type": "integer"}}),
        tool(f"{prefix}{LONG_NAME}", "A long name."),
    ]
    tools += [tool(f"{prefix}extra_{i}", f"Extra tool {i}.") for i in range(extra)]
    return tools


TOOL_COUNT = len(build_tools("", 0))


def page(items: list[dict[str, Any]], key: str, params: Any, size: int, loop: bool = False) -> dict[str, Any]:
    """A page of `size`; with `loop`, the second page points back to itself (a broken upstream)."""
    cursor = getattr(params, "cursor", None) if params is not None else None
    start = int(cursor) if cursor else 0
    out: dict[str, Any] = {key: items[start:start + size]}
    if start + size < len(items):
        out["nextCursor"] = str(start if loop and start else start + size)
    return out


def build_server(args: argparse.Namespace) -> Server[Any]:
    tools = build_tools(args.prefix, args.extra_tools, args.echo_description)
    if args.redos_tool:  # regexes Python's `re` backtracks on for ever: an upstream's schema is not the caller's
        tools.append(tool(f"{args.prefix}redos", "A schema whose patterns backtrack.",
                          {"s": {"type": "string", "pattern": "^(a|a)*$"}},
                          ))
        tools[-1]["inputSchema"]["patternProperties"] = {"^(b+)+$": {"type": "string"}}
        tools.append(tool(f"{args.prefix}lookaround", "A schema pattern with a look-ahead.",
                          {"s": {"type": "string", "pattern": "^(?=x)x+$"}}))
    if args.task_tool:  # a tool only callable as a task (the tasks extension)
        tools.append(tool(f"{args.prefix}only_as_task", "Runs only as a task.", execution={"taskSupport": "required"}))
    resources = [
        {"uri": "fixture://static", "name": "static", "mimeType": "text/plain", "title": "Static text"},
        {"uri": "fixture://blob", "name": "blob", "mimeType": "application/octet-stream"},
    ]
    templates = [{"uriTemplate": "fixture://items/{id}", "name": "item", "mimeType": "text/plain"}]
    prompts = [{"name": f"{args.prefix}greet", "description": "Greets.",
                "arguments": [{"name": "who", "required": True}]}]
    sampled_prompts = [{"name": f"{args.prefix}sampled_greet", "description": "Listed to sampling clients only."}]
    sampled_templates = [{"uriTemplate": "fixture://sampled/{id}", "name": "sampled", "mimeType": "text/plain"}]
    sampled_tools = [{"name": f"{args.prefix}sampled_echo", "description": "Listed to sampling clients only.",
                      "inputSchema": {"type": "object", "properties": {"text": {"type": "string"}}}}]
    size = args.page_size
    subscribed: dict[int, tuple[Any, set[str]]] = {}
    """With --subscribable: per session, the session and the URIs it subscribed to."""
    if args.subscribable:
        tools.append(tool(f"{args.prefix}updates", "Sends `count` rounds of resources/updated, one per subscription.",
                          {"count": {"type": "integer"}}))

    async def list_tools(ctx: Any, params: Any) -> dict[str, Any]:
        return page(tools + (sampled_tools if samples(ctx) else []), "tools", params, size, args.loop_cursor)

    async def list_resources(ctx: Any, params: Any) -> dict[str, Any]:
        return page(resources, "resources", params, size)

    def samples(ctx: Any) -> bool:
        """The session's client declared sampling (`--lists-by-capabilities` lists more to it)."""
        params = ctx.session.client_params
        return bool(args.lists_by_capabilities and params is not None and params.capabilities.sampling is not None)

    async def list_templates(ctx: Any, params: Any) -> dict[str, Any]:
        return page(templates + (sampled_templates if samples(ctx) else []), "resourceTemplates", params, size)

    async def list_prompts(ctx: Any, params: Any) -> dict[str, Any]:
        return page(prompts + (sampled_prompts if samples(ctx) else []), "prompts", params, size)

    async def call_tool(ctx: Any, params: Any) -> dict[str, Any]:
        if args.log_calls:  # a count of the calls that reached the upstream, for the tests that prove none did
            print(f"CALL {params.name}", file=sys.stderr, flush=True)
        name = params.name.removeprefix(args.prefix)
        arguments = params.arguments or {}
        if name in ("echo", "sampled_echo"):
            meta = {"fixture/upstream": args.name, "fixture/received-meta": (ctx.params or {}).get("_meta") or {}}
            http_request = getattr(ctx, "request", None)  # the Starlette request over HTTP: its trace headers
            if http_request is not None and "traceparent" in http_request.headers:
                meta["fixture/received-traceparent-header"] = http_request.headers["traceparent"]
            return {"content": [{"type": "text", "text": str(arguments.get("text", "")),
                                 "annotations": {"audience": ["user"], "priority": 0.5}}], "_meta": meta}
        if name == "image":
            return {"content": [{"type": "image", "data": PNG_1PX, "mimeType": "image/png"}]}
        if name == "audio":
            return {"content": [{"type": "audio", "data": WAV_BYTES, "mimeType": "audio/wav"}]}
        if name == "embedded":
            return {"content": [{"type": "resource", "resource": {"uri": "fixture://static", "mimeType": "text/plain",
                                                                  "text": "embedded text"}}]}
        if name == "link":
            return {"content": [{"type": "resource_link", "uri": "fixture://static", "name": "static"}]}
        if name == "structured":
            n = int(arguments.get("n", 0))
            return {"content": [{"type": "text", "text": f'{{"double": {2 * n}}}'}],
                    "structuredContent": {"double": 2 * n}}
        if name == "fail":
            return {"content": [{"type": "text", "text": "this tool always fails"}], "isError": True}
        if name == "slow":
            print(f"slow call {ctx.request_id} started", file=sys.stderr, flush=True)
            try:
                await anyio.sleep(float(arguments.get("seconds", 1)))
            except anyio.get_cancelled_exc_class():
                print(f"slow call {ctx.request_id} cancelled", file=sys.stderr, flush=True)
                raise
            return {"content": [{"type": "text", "text": "done"}]}
        if name == "progress":
            steps = int(arguments.get("steps", 3))
            for i in range(steps):
                await anyio.sleep(float(arguments.get("delay", 0)))
                await ctx.session.report_progress(i + 1, steps, f"step {i + 1}")
            await anyio.sleep(float(arguments.get("then", 0)))  # silent after its progress
            return {"content": [{"type": "text", "text": f"{steps} steps"}]}
        if name == "die":
            os._exit(3)
        if name == "garbage":
            sys.stdout.buffer.write(b"this is not json\n")
            sys.stdout.buffer.write(b'{"jsonrpc": "2.0", "id": %s, "result": "not an object"}\n'
                                    % json.dumps(ctx.request_id).encode())
            sys.stdout.buffer.write(b'{"jsonrpc": "1.0", "method": 5}\n')
            sys.stdout.buffer.flush()
            await anyio.sleep_forever()
        if name in ("ask", "sample", "roots"):
            result_type: Any
            metadata = ServerMessageMetadata(related_request_id=ctx.request_id)
            if name == "ask" and arguments.get("mode") == "url":
                request = types.ElicitRequest(params=types.ElicitRequestURLParams(
                    message=str(arguments.get("question", "?")), url="https://example.com/consent",
                    elicitation_id="consent-1"))
                result_type = types.ElicitResult
            elif name == "ask":
                request = types.ElicitRequest(params=types.ElicitRequestFormParams(
                    message=str(arguments.get("question", "?")),
                    requested_schema={"type": "object", "properties": {"answer": {"type": "string"}}}))
                result_type = types.ElicitResult
            elif name == "sample":
                request = types.CreateMessageRequest(params=types.CreateMessageRequestParams(
                    messages=[types.SamplingMessage(role="user", content=types.TextContent(
                        text=str(arguments.get("prompt", ""))))], max_tokens=10,
                    tools=[types.Tool(name="lookup", input_schema={"type": "object"})]
                    if arguments.get("with_tools") else None))
                result_type = types.CreateMessageResult
            else:
                request, result_type = types.ListRootsRequest(), types.ListRootsResult
            try:
                answer = await ctx.session.send_request(request, result_type, metadata=metadata)
            except MCPError as exc:
                return {"content": [{"type": "text", "text": f"refused: {exc.error.message}"}], "isError": True}
            return {"content": [{"type": "text", "text": answer.model_dump_json(by_alias=True, exclude_none=True)}]}
        if name == "log":
            for level in ("debug", "info", "warning", "error"):
                await ctx.session.send_log_message(level, f"{level} from {args.name}", logger="fixture",
                                                   related_request_id=ctx.request_id)
            return {"content": [{"type": "text", "text": "logged"}]}
        if name == "rich":
            return {"content": [{"type": "text", "text": json.dumps(arguments, sort_keys=True)}]}
        if name == "big":
            return {"content": [{"type": "text", "text": "x" * int(arguments.get("size", 1000))}]}
        if name == "flood":
            count = int(arguments.get("count", 1000))
            for i in range(count):
                await ctx.session.send_log_message("info", f"line {i}", related_request_id=ctx.request_id)
                await ctx.session.report_progress(i + 1, count)
            return {"content": [{"type": "text", "text": f"flooded {count}"}]}
        if name == "updates" and args.subscribable:
            count = int(arguments.get("count", 1))
            for _ in range(count):
                for session, uris in list(subscribed.values()):
                    for uri in list(uris):
                        await session.send_resource_updated(uri)
            return {"content": [{"type": "text", "text": f"{count} rounds of updates"}]}
        return {"content": [{"type": "text", "text": f"called {params.name}"}]}

    async def read_resource(ctx: Any, params: Any) -> dict[str, Any]:
        uri = str(params.uri)
        if uri == "fixture://static":
            return {"contents": [{"uri": uri, "mimeType": "text/plain", "text": f"static text from {args.name}"}]}
        if uri == "fixture://blob":
            return {"contents": [{"uri": uri, "mimeType": "application/octet-stream", "blob": WAV_BYTES}]}
        if uri.startswith("fixture://items/"):
            return {"contents": [{"uri": uri, "mimeType": "text/plain", "text": f"item {uri.rsplit('/', 1)[1]}"}]}
        raise MCPError(-32002, f"Resource not found: {uri}")

    async def get_prompt(ctx: Any, params: Any) -> dict[str, Any]:
        who = (params.arguments or {}).get("who", "world")
        return {"description": "A greeting.",
                "messages": [{"role": "user", "content": {"type": "text", "text": f"Hello, {who}!"}}]}

    async def complete(ctx: Any, params: Any) -> dict[str, Any]:
        if params.argument.value.startswith("refuse"):
            raise MCPError(-32602, f"no completions for {params.argument.value}")
        return {"completion": {"values": ["alpha", "beta"], "total": 2, "hasMore": False}}

    server = Server(args.name, version="1.0", on_list_tools=list_tools, on_call_tool=call_tool,
                    on_list_resources=list_resources, on_list_resource_templates=list_templates,
                    on_read_resource=read_resource, on_list_prompts=list_prompts, on_get_prompt=get_prompt,
                    on_completion=complete)
    if args.hang_initialize:
        async def hang(ctx: Any, call_next: Any) -> Any:
            if ctx.method == "initialize":
                await anyio.sleep_forever()
            return await call_next(ctx)
        server.middleware.append(hang)
    if args.slow_first_ping:
        pinged: list[bool] = []

        async def slow_ping(ctx: Any, call_next: Any) -> Any:
            if ctx.method == "ping" and not pinged:
                pinged.append(True)
                print("slow ping", file=sys.stderr, flush=True)
                await anyio.sleep(args.slow_first_ping)
            return await call_next(ctx)
        server.middleware.append(slow_ping)
    if args.subscribable:
        async def subscribe(ctx: Any, params: Any) -> dict[str, Any]:
            if "refuse" in str(params.uri):
                raise MCPError(-32002, f"cannot subscribe to {params.uri}")
            subscribed.setdefault(id(ctx.session), (ctx.session, set()))[1].add(str(params.uri))
            return {}

        async def unsubscribe(ctx: Any, params: Any) -> dict[str, Any]:
            subscribed.get(id(ctx.session), (None, set()))[1].discard(str(params.uri))
            return {}
        server.add_request_handler("resources/subscribe", types.SubscribeRequestParams, subscribe)
        server.add_request_handler("resources/unsubscribe", types.UnsubscribeRequestParams, unsubscribe)
    return server


def answer_unavailable(app: Any, count: int, endless: bool = False) -> Any:
    """An ASGI wrapper that answers HTTP 503 to the first `count` `tools/call` POSTs, as a proxy in front of an
    overloaded server would (the server never sees them); each is noted on stderr. `endless`: the 503's body never
    ends (until the client hangs up, noted on stderr as `503 body cut after N bytes`)."""
    refused = [0]

    async def wrapped(scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] != "http" or scope["method"] != "POST" or refused[0] >= count:
            return await app(scope, receive, send)
        chunks = []
        while True:
            message = await receive()
            chunks.append(message.get("body", b""))
            if not message.get("more_body"):
                break
        body = b"".join(chunks)
        if b'"tools/call"' not in body:
            replayed = [False]

            async def replay() -> Any:
                if replayed[0]:
                    return await receive()
                replayed[0] = True
                return {"type": "http.request", "body": body, "more_body": False}
            return await app(scope, replay, send)
        refused[0] += 1
        print(f"answered 503 to call {refused[0]}", file=sys.stderr, flush=True)
        await send({"type": "http.response.start", "status": 503, "headers": [(b"content-type", b"text/plain")]})
        if not endless:
            await send({"type": "http.response.body", "body": b"overloaded"})
            return
        gone, sent = anyio.Event(), 0

        async def watch() -> None:  # the request was read whole: what comes next is the client hanging up
            while (await receive())["type"] != "http.disconnect":
                pass
            gone.set()

        async with anyio.create_task_group() as tg:
            tg.start_soon(watch)
            while not gone.is_set():
                await send({"type": "http.response.body", "body": b"overloaded " * 6000, "more_body": True})
                sent += 66_000
                await anyio.lowlevel.checkpoint()  # uvicorn's send returns at once after a hang-up
        print(f"503 body cut after {sent} bytes", file=sys.stderr, flush=True)
    return wrapped


def log_auth(app: Any) -> Any:
    """Print `AUTH <Authorization header or ->` on stderr for every HTTP request (what Triad sends upstream)."""

    async def wrapped(scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] == "http":
            found = dict(scope["headers"]).get(b"authorization", b"-").decode(errors="replace")
            print(f"AUTH {found}", file=sys.stderr, flush=True)
        await app(scope, receive, send)

    return wrapped


async def serve_http(server: Server[Any], transport: str, port: int, unavailable_calls: int = 0,
                     auth_log: bool = False, endless_unavailable: bool = False,
                     tls: tuple[str, str] | None = None) -> None:
    """`tls`: (certificate file, key file) to serve HTTPS with."""
    sock = socket.socket()
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    sock.bind(("127.0.0.1", port))
    port = sock.getsockname()[1]
    if transport == "http":
        app = server.streamable_http_app(host="127.0.0.1")
    else:
        sse = SseServerTransport("/messages/")

        async def handle_sse(request: Request) -> Response:
            async with sse.connect_sse(request.scope, request.receive, request._send) as (read, write):
                await server.run(read, write, server.create_initialization_options())
            return Response()

        app = Starlette(routes=[Route("/sse", endpoint=handle_sse), Mount("/messages/", app=sse.handle_post_message)])
    if unavailable_calls:
        app = answer_unavailable(app, unavailable_calls, endless_unavailable)
    if auth_log:
        app = log_auth(app)
    # h11 strips whitespace around header values (RFC 9110) as the conformance suite expects; httptools keeps it
    userver = uvicorn.Server(uvicorn.Config(app, log_level="warning", http="h11", timeout_graceful_shutdown=2,
                                            ssl_certfile=tls[0] if tls else None, ssl_keyfile=tls[1] if tls else None))
    sock.listen(128)  # listening before READY is said: a client that connects at once waits, never refused
    print(f"READY {port}", file=sys.stderr, flush=True)
    await userver.serve(sockets=[sock])


async def serve_stdio(server: Server[Any]) -> None:
    from mcp.server.stdio import stdio_server

    async with stdio_server() as (read, write):
        await server.run(read, write, server.create_initialization_options())


def fork_grandchild(name: str) -> None:
    """What `npx`, a shell or a daemonising helper leaves: a process re-parented away from the child, in its process
    group, its stdio on /dev/null. It prints `GRANDCHILD <pid>` on stderr; its command line carries `<name>-orphan`."""
    if os.fork() == 0:
        grandchild = os.fork()
        if grandchild == 0:
            devnull = os.open(os.devnull, os.O_RDWR)
            for fd in (0, 1, 2):
                os.dup2(devnull, fd)
            os.execv(sys.executable, [sys.executable, "-c", "import time; time.sleep(3600)", f"{name}-orphan"])
        print(f"GRANDCHILD {grandchild}", file=sys.stderr, flush=True)
        os._exit(0)
    os.wait()


def arguments(argv: list[str] | None = None) -> argparse.Namespace:
    """The fixture's options (`argv`: None reads the command line); other servers built on it take theirs here, so
    a new option's default reaches them too."""
    parser = argparse.ArgumentParser()
    parser.add_argument("--transport", choices=["stdio", "http", "sse"], default="stdio")
    parser.add_argument("--name", default="fixture")
    parser.add_argument("--prefix", default="", help="prepended to every tool and prompt name")
    parser.add_argument("--page-size", type=int, default=1000)
    parser.add_argument("--extra-tools", type=int, default=0)
    parser.add_argument("--task-tool", action="store_true", help="add a tool whose execution requires tasks")
    parser.add_argument("--redos-tool", action="store_true", help="add tools whose schemas have costly patterns")
    parser.add_argument("--hang-initialize", action="store_true")
    parser.add_argument("--slow-first-ping", type=float, default=0.0, help="seconds the first ping takes")
    parser.add_argument("--loop-cursor", action="store_true", help="tools/list repeats its second cursor forever")
    parser.add_argument("--echo-description", default="Echo the text.", help="to simulate a rewritten tool")
    parser.add_argument("--port", type=int, default=0, help="HTTP/SSE port (default: a free one)")
    parser.add_argument("--start-when", help="wait until this file exists before serving (a slow start)")
    parser.add_argument("--unavailable-calls", type=int, default=0, help="HTTP 503 to the first K tools/call POSTs")
    parser.add_argument("--endless-503", action="store_true", help="the 503s' bodies never end")
    parser.add_argument("--log-auth", action="store_true", help="print each HTTP request's Authorization header")
    parser.add_argument("--log-calls", action="store_true", help="print `CALL <tool>` on stderr for every call")
    parser.add_argument("--subscribable", action="store_true", help="resource subscriptions and an `updates` tool")
    parser.add_argument("--lists-by-capabilities", action="store_true",
                        help="a tool, a prompt and a resource template listed only to sessions whose client "
                        "declared sampling")
    parser.add_argument("--tls", nargs=2, metavar=("CERT", "KEY"), help="serve HTTPS with this certificate and key")
    parser.add_argument("--fork-grandchild", action="store_true",
                        help="first leave a grandchild running (double fork, no setsid: it stays in the group)")
    return parser.parse_args(argv)


def main() -> None:
    args = arguments()
    if args.fork_grandchild:
        fork_grandchild(args.name)
    server = build_server(args)
    while args.start_when and not os.path.exists(args.start_when):
        time.sleep(0.05)
    if args.transport == "stdio":
        anyio.run(serve_stdio, server)
    else:
        anyio.run(serve_http, server, args.transport, args.port, args.unavailable_calls, args.log_auth,
                  args.endless_503, tuple(args.tls) if args.tls else None)


if __name__ == "__main__":
    main()
