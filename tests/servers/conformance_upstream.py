"""The fixtures the official conformance suite calls by name, served by the SDK's low-level server in both eras.

    python conformance_upstream.py [--transport stdio|http] [--port P] [--name N]

The suite (@modelcontextprotocol/conformance 0.2.0-alpha.12) has no published reference server; this one implements
what its server scenarios of the `2025-11-25` and `2026-07-28` requirement sets call: content tools, logging and
progress, sampling and elicitation (server->client requests in the handshake era, `input_required` results in
2026-07-28), the multi-round-trip fixtures, the diagnostic tools of `server-stateless`, list-change triggers,
resources with a template and a subscription, prompts, and completion; and at 2026-07-28 the tasks extension of the
`tasks-*` scenarios (`conformance_tasks.py`). Over HTTP it prints `READY <port>` on stderr.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

import anyio
import mcp_types as types
from mcp.server import NotificationOptions, Server
from mcp.server.caching import CACHEABLE_METHODS, CacheHint
from mcp.server.request_state import RequestStateBoundary, RequestStateSecurity
from mcp.server.subscriptions import (
    InMemorySubscriptionBus,
    ListenHandler,
    PromptsListChanged,
    ResourceUpdated,
    ToolsListChanged,
)
from mcp.shared.exceptions import MCPError
from mcp.shared.message import ServerMessageMetadata
from mcp_types.version import MODERN_PROTOCOL_VERSIONS

sys.path.insert(0, str(Path(__file__).parent))
from conformance_fixtures import (
    CONFIRM,
    DEFAULTS_SCHEMA,
    ENUMS_SCHEMA,
    NAME,
    PNG,
    PROMPTS,
    RESOURCES,
    ROUNDS,
    STATEFUL,
    TEMPLATES,
    TOOLS,
    WATCHED,
    WAV,
    elicit,
    finish,
    input_required,
    sample,
    text,
    tool,
)
from conformance_tasks import TASK_TOOLS, Tasks
from fixture_upstream import serve_http, serve_stdio


def build_server(tasks: Tasks | None = None) -> Server[Any]:
    tools, prompts = [*TOOLS, *TASK_TOOLS], list(PROMPTS)
    tasks = tasks or Tasks()
    bus = InMemorySubscriptionBus()
    subscribers: dict[int, Any] = {}
    levels: dict[int, str] = {}

    def modern(ctx: Any) -> bool:
        return ctx.protocol_version in MODERN_PROTOCOL_VERSIONS

    def responses(params: Any) -> dict[str, dict[str, Any]]:
        return {key: value.model_dump(by_alias=True, mode="json", exclude_none=True) if hasattr(value, "model_dump")
                else value for key, value in (params.input_responses or {}).items()}

    def client_capabilities(ctx: Any) -> dict[str, Any]:
        meta = (ctx.params or {}).get("_meta") or {}
        if modern(ctx):
            return meta.get("io.modelcontextprotocol/clientCapabilities") or {}
        caps = ctx.session.client_params.capabilities if ctx.session.client_params else None
        return caps.model_dump(by_alias=True, mode="json", exclude_none=True) if caps else {}

    async def ask(ctx: Any, request: dict[str, Any]) -> dict[str, Any]:
        """A server->client request in the handshake era; its result, or an error as a dict."""
        kind = {"elicitation/create": (types.ElicitRequest, types.ElicitResult),
                "sampling/createMessage": (types.CreateMessageRequest, types.CreateMessageResult),
                "roots/list": (types.ListRootsRequest, types.ListRootsResult)}[request["method"]]
        try:
            answer = await ctx.session.send_request(kind[0].model_validate(request), kind[1],
                                                    metadata=ServerMessageMetadata(related_request_id=ctx.request_id))
        except MCPError as exc:
            return {"error": exc.error.message}
        return answer.model_dump(by_alias=True, mode="json", exclude_none=True)

    async def interactive(ctx: Any, params: Any, key: str, request: dict[str, Any]) -> dict[str, Any] | None:
        """The answer to `request`: asked in-band (2026-07-28: None means "return input_required") or directly."""
        if modern(ctx):
            return responses(params).get(key)
        return await ask(ctx, request)

    async def in_rounds(ctx: Any, params: Any, name: str, rounds: list[dict[str, dict[str, Any]]]) -> dict[str, Any]:
        """The multi-round-trip fixtures. 2026-07-28: one `input_required` result per round, the round number
        in `requestState` where the suite expects state. Handshake era: the same questions asked as
        server->client requests, one by one."""
        if not modern(ctx):
            answers = {key: await ask(ctx, request) for questions in rounds for key, request in questions.items()}
            return text(finish(name, answers))
        got, stateful = responses(params), name in STATEFUL
        state = json.loads(params.request_state) if params.request_state else {}
        index = state.get("round", 0) if stateful else 0
        if (state or not stateful) and all(key in got for key in rounds[index]):
            if index + 1 == len(rounds):
                return text(finish(name, got))
            index += 1
        return input_required(rounds[index], {"kind": name, "round": index} if stateful else None)

    async def log(ctx: Any, level: str, data: str) -> None:
        await ctx.session.send_log_message(level, data, logger="conformance-fixture",
                                           related_request_id=ctx.request_id)

    async def call_tool(ctx: Any, params: Any) -> dict[str, Any]:
        name, arguments = params.name, params.arguments or {}
        if modern(ctx) and (as_task := await tasks.call(ctx, name, arguments, responses(params))) is not None:
            return as_task
        if name == "test_simple_text":
            return text("This is a simple text response for testing.")
        if name == "test_image_content":
            return {"content": [{"type": "image", "data": PNG, "mimeType": "image/png"}]}
        if name == "test_audio_content":
            return {"content": [{"type": "audio", "data": WAV, "mimeType": "audio/wav"}]}
        if name == "test_embedded_resource":
            return {"content": [{"type": "resource", "resource": {
                "uri": "test://embedded-resource", "mimeType": "text/plain",
                "text": "This is an embedded resource content."}}]}
        if name == "test_multiple_content_types":
            return {"content": [
                {"type": "text", "text": "Multiple content types test:"},
                {"type": "image", "data": PNG, "mimeType": "image/png"},
                {"type": "resource", "resource": {"uri": "test://mixed-content-resource",
                                                  "mimeType": "application/json",
                                                  "text": json.dumps({"test": "data", "value": 123})}}]}
        if name in ("test_tool_with_logging", "test_logging_tool"):
            for step in ("Tool execution started", "Tool processing data", "Tool execution completed"):
                await log(ctx, "info", step)
                await anyio.sleep(0.05)
            return text("Tool with logging executed successfully")
        if name == "test_tool_with_progress":
            for value in (0, 50, 100):
                await ctx.session.report_progress(value, 100, f"Completed step {value} of 100")
                await anyio.sleep(0.05)
            token = ctx.meta.get("progress_token") if ctx.meta else None
            return text(str(token))
        if name == "test_error_handling":
            return {"content": [{"type": "text", "text": "This tool intentionally returns an error for testing"}],
                    "isError": True}
        if name == "test_sampling":
            answer = await interactive(ctx, params, "sampling", sample(str(arguments.get("prompt", ""))))
            if answer is None:
                return input_required({"sampling": sample(str(arguments.get("prompt", "")))})
            content = answer.get("content")
            reply = content.get("text") if isinstance(content, dict) else None
            return text(f"LLM response: {reply or answer.get('error') or 'No response'}")
        if name in ("test_elicitation", "test_elicitation_sep1034_defaults", "test_elicitation_sep1330_enums"):
            if name == "test_elicitation":
                request = elicit(str(arguments.get("message", "")), {
                    "response": {"type": "string", "description": "User's response"}}, ("response",))
            elif name == "test_elicitation_sep1034_defaults":
                request = {"method": "elicitation/create", "params": {
                    "mode": "form", "message": "Please review and update the form fields with defaults",
                    "requestedSchema": DEFAULTS_SCHEMA}}
            else:
                request = {"method": "elicitation/create", "params": {
                    "mode": "form", "message": "Please select options from the enum fields",
                    "requestedSchema": ENUMS_SCHEMA}}
            answer = await interactive(ctx, params, "elicitation", request)
            if answer is None:
                return input_required({"elicitation": request})
            if "error" in answer:
                return text(f"Elicitation not supported or error: {answer['error']}")
            content = json.dumps(answer.get("content", {}))
            return text(f"User response: action={answer.get('action')}, content={content}")
        if name in ("json_schema_2020_12_tool", "test_custom_header_tool"):
            return text(json.dumps(arguments))
        if name == "test_missing_capability":
            if "sampling" not in client_capabilities(ctx):
                raise MCPError(types.MISSING_REQUIRED_CLIENT_CAPABILITY, "Missing required client capability",
                               data={"requiredCapabilities": {"sampling": {}}})
            return text("sampling capability declared")
        if name == "test_streaming_elicitation":
            await ctx.session.report_progress(0, 1, "asking")
            return await in_rounds(ctx, params, name, [{"confirm": CONFIRM}])
        if name == "test_trigger_tool_change":
            tools.append(tool(f"test_added_tool_{len(tools)}", "Added by test_trigger_tool_change"))
            await bus.publish(ToolsListChanged())
            if not modern(ctx):
                await ctx.session.send_tool_list_changed()
            return text("tool list changed")
        if name == "test_trigger_prompt_change":
            prompts.append({"name": f"test_added_prompt_{len(prompts)}", "description": "Added"})
            await bus.publish(PromptsListChanged())
            if not modern(ctx):
                await ctx.session.send_prompt_list_changed()
            return text("prompt list changed")
        if name == "test_trigger_resource_update":
            await bus.publish(ResourceUpdated(uri=WATCHED))
            for key, session in list(subscribers.items()):
                try:
                    await session.send_resource_updated(WATCHED)
                except Exception:  # a subscriber that went away (its connection closed)
                    subscribers.pop(key, None)
            return text("resource updated")
        if name in ROUNDS:
            return await in_rounds(ctx, params, name, ROUNDS[name])
        if name == "test_input_required_result_capabilities":
            caps = client_capabilities(ctx)
            wanted: dict[str, dict[str, Any]] = {}
            if "elicitation" in caps:
                wanted["elicit_input"] = elicit("Elicitation input", {"value": {"type": "string"}}, ("value",))
            if "sampling" in caps:
                wanted["sample_input"] = sample("Sample request", 50)
            if not wanted:
                return text("no capabilities declared")
            return await in_rounds(ctx, params, name, [wanted])
        if any(name == t["name"] for t in tools):
            return text(f"called {name}")
        raise MCPError(types.INVALID_PARAMS, f"Unknown tool: {name}")

    async def read_resource(ctx: Any, params: Any) -> dict[str, Any]:
        uri = str(params.uri)
        if uri == "test://static-text":
            return {"contents": [{"uri": uri, "mimeType": "text/plain",
                                  "text": "This is the content of the static text resource."}]}
        if uri == "test://static-binary":
            return {"contents": [{"uri": uri, "mimeType": "image/png", "blob": PNG}]}
        if uri == WATCHED:
            return {"contents": [{"uri": uri, "mimeType": "text/plain", "text": "Watched resource content"}]}
        if uri.startswith("test://template/") and uri.endswith("/data"):
            item = uri.removeprefix("test://template/").removesuffix("/data")
            return {"contents": [{"uri": uri, "mimeType": "application/json", "text": json.dumps(
                {"id": item, "templateTest": True, "data": f"Data for ID: {item}"})}]}
        raise MCPError(types.RESOURCE_NOT_FOUND, f"Resource not found: {uri}", data={"uri": uri})

    async def get_prompt(ctx: Any, params: Any) -> dict[str, Any]:
        arguments = params.arguments or {}
        if params.name == "test_simple_prompt":
            return {"messages": [{"role": "user", "content": {"type": "text",
                                                              "text": "This is a simple prompt for testing."}}]}
        if params.name == "test_prompt_with_arguments":
            body = f"Prompt with arguments: arg1='{arguments.get('arg1')}', arg2='{arguments.get('arg2')}'"
            return {"messages": [{"role": "user", "content": {"type": "text", "text": body}}]}
        if params.name == "test_prompt_with_embedded_resource":
            return {"messages": [
                {"role": "user", "content": {"type": "resource", "resource": {
                    "uri": arguments.get("resourceUri", "test://example-resource"), "mimeType": "text/plain",
                    "text": "Embedded resource content for testing."}}},
                {"role": "user", "content": {"type": "text", "text": "Please process the embedded resource above."}}]}
        if params.name == "test_prompt_with_image":
            return {"messages": [
                {"role": "user", "content": {"type": "image", "data": PNG, "mimeType": "image/png"}},
                {"role": "user", "content": {"type": "text", "text": "Please analyze the image above."}}]}
        if params.name == "test_input_required_result_prompt":
            question = elicit("What context should the prompt use?", {"context": {"type": "string"}}, ("context",))
            answer = responses(params).get("user_context", {}) if modern(ctx) else await ask(ctx, question)
            context = (answer.get("content") or {}).get("context")
            if context is not None:
                return {"messages": [{"role": "user", "content": {"type": "text",
                                                                  "text": f"Prompt with context: {context}"}}]}
            return input_required({"user_context": question})
        if any(params.name == p["name"] for p in prompts):
            return {"messages": [{"role": "user", "content": {"type": "text", "text": params.name}}]}
        raise MCPError(types.INVALID_PARAMS, f"Unknown prompt: {params.name}")

    async def subscribe(ctx: Any, params: Any) -> dict[str, Any]:
        subscribers[id(ctx.session)] = ctx.session
        return {}

    async def unsubscribe(ctx: Any, params: Any) -> dict[str, Any]:
        subscribers.pop(id(ctx.session), None)
        return {}

    async def set_level(ctx: Any, params: Any) -> dict[str, Any]:
        levels[id(ctx.session)] = params.level
        return {}

    async def complete(ctx: Any, params: Any) -> dict[str, Any]:
        return {"completion": {"values": [], "total": 0, "hasMore": False}}

    async def listed(items: list[dict[str, Any]], key: str) -> dict[str, Any]:
        return {key: items}

    def finished(handler: Any) -> Any:
        """`resultType` is required on 2026-07-28 (the SDK drops it for older versions)."""
        async def wrapped(ctx: Any, params: Any) -> Any:
            result = await handler(ctx, params)
            return {"resultType": "complete", **result}
        return wrapped

    server = ListChangedServer(
        NAME, version="1.0.0", get_tool_input_schema=lambda name: next(
            (t["inputSchema"] for t in tools if t["name"] == name), None),
        cache_hints={method: CacheHint(ttl_ms=0, scope="private") for method in CACHEABLE_METHODS},
        on_list_tools=finished(lambda ctx, params: listed(tools, "tools")), on_call_tool=finished(call_tool),
        on_list_resources=finished(lambda ctx, params: listed(RESOURCES, "resources")),
        on_list_resource_templates=finished(lambda ctx, params: listed(TEMPLATES, "resourceTemplates")),
        on_read_resource=finished(read_resource), on_subscribe_resource=finished(subscribe),
        on_unsubscribe_resource=finished(unsubscribe),
        on_list_prompts=finished(lambda ctx, params: listed(prompts, "prompts")), on_get_prompt=finished(get_prompt),
        on_completion=finished(complete), on_set_logging_level=set_level, on_subscriptions_listen=ListenHandler(bus))
    # The SDK's own requestState boundary: seals state in an envelope, so a tampered one is refused (-32602).
    tasks.install(server)
    server.middleware.append(RequestStateBoundary(RequestStateSecurity.ephemeral(), default_audience=NAME))
    return server


class ListChangedServer(Server[Any]):
    """Advertises `listChanged` for every family, also over HTTP (the session manager passes no options)."""

    def create_initialization_options(self, notification_options: NotificationOptions | None = None,
                                      *args: Any, **kwargs: Any) -> Any:
        return super().create_initialization_options(notification_options or NotificationOptions(True, True, True),
                                                     *args, **kwargs)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--transport", choices=["stdio", "http"], default="stdio")
    parser.add_argument("--port", type=int, default=0)
    parser.add_argument("--name", default=NAME, help="only shown in the process list (the tests mark their runs)")
    parser.add_argument("--unavailable-calls", type=int, default=0, help="HTTP 503 to the first K tools/call POSTs")
    parser.add_argument("--endless-503", action="store_true", help="the 503s' bodies never end")
    args = parser.parse_args()
    tasks = Tasks()
    server = build_server(tasks)

    async def serve() -> None:
        async with anyio.create_task_group() as tg:
            await tg.start(tasks.run)
            if args.transport == "stdio":
                await serve_stdio(server)
            else:
                await serve_http(server, "http", args.port, args.unavailable_calls,
                                 endless_unavailable=args.endless_503)
            tg.cancel_scope.cancel()

    anyio.run(serve)


if __name__ == "__main__":
    main()
