"""An upstream that plants a secret in every string field of everything it sends a client, for the `redact` tests.

    python planted_upstream.py [--transport stdio|http]

What it sends is generated from the SDK's own models (`mcp_types`), walking their fields recursively: every `str`
field gets a planted secret that names its own path (`sk-Tool_description_ZZZZ...`, one of `redact`'s default
patterns), every list of a union holds one item of each variant, every dictionary or `Any` a planted key and value.
So a field the spec adds is planted too. Left as the spec needs them: literals (`type`, `role`), numbers, base64
payloads, and the identifiers a client calls, reads or gets by (tool and prompt names, a prompt argument's name,
listed resource URIs and templates), which `redact` keeps.

Tools: `result` answers with a planted `CallToolResult`; `relay` sends a planted log message, a progress message, a
sampling request and a form and a URL elicitation request to its client, then answers `relayed`.
"""

from __future__ import annotations

import argparse
import re
import types as pytypes
from collections.abc import Mapping
from typing import Annotated, Any, Literal, Union, get_args, get_origin, get_type_hints

import anyio
import mcp_types as types
from mcp.server import Server
from mcp.shared.exceptions import MCPError
from mcp.shared.message import ServerMessageMetadata
from pydantic import BaseModel

BASE64 = "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mNk+M9QDwADhgGAWjR9awAAAABJRU5ErkJggg=="
PLANTED = re.compile(r"sk-[A-Za-z0-9_]+?_Z{12}")
"""A planted secret, wherever it shows up (`planted`)."""
OMIT = object()
"""A field left out: a request's `_meta` and `task` (which would make it a task), a tool's `execution`."""
INPUT_SCHEMA = "inputSchema"
TOOL_NAMES = ("result", "relay")
URI, TEMPLATE, PROMPT, ARGUMENT = "planted://resource", "planted://items/{id}", "greet", "who"


def planted(where: str) -> str:
    """A secret `redact` masks by default (an OpenAI-style key), naming the field it was planted in."""
    return "sk-" + re.sub(r"[^A-Za-z0-9]+", "_", where).strip("_") + "_" + "Z" * 12


def fill(model: type[BaseModel], where: str, keep: Mapping[str, object] | None = None) -> dict[str, Any]:
    """`model` in wire form with every field set: planted strings, or what `keep` says (by wire name)."""
    keep = keep or {}
    out: dict[str, Any] = {}
    hints = get_type_hints(model, include_extras=True)  # forward references resolved
    for name, field in model.model_fields.items():
        alias = field.alias or name
        value = keep[alias] if alias in keep else _value(hints[name], f"{where}.{alias}", alias)
        if value is not OMIT:
            out[alias] = value
    return out


def variants(model: type[BaseModel], where: str) -> list[dict[str, Any]]:
    """`model` filled once per variant of each of its fields that is a union of models (a resource's text or blob
    contents, a prompt message's content of each type): every variant is planted somewhere."""
    base = fill(model, where)
    found = [base]
    hints = get_type_hints(model, include_extras=True)
    for name, field in model.model_fields.items():
        alias = field.alias or name
        models = [a for a in _options(hints[name]) if _is_model(a)]
        found += [{**base, alias: _model(option, f"{where}.{alias}")} for option in models[1:]]
    return found


def _value(annotation: Any, where: str, name: str) -> Any:
    if get_origin(annotation) is Annotated:
        annotation = get_args(annotation)[0]
    if name in ("data", "blob") and annotation is str:
        return BASE64  # base64 payloads (an image's or audio's `data`, a blob), which redact leaves whole
    if name == INPUT_SCHEMA or name in ("outputSchema", "requestedSchema"):
        return {"type": "object", "description": planted(where), "title": planted(f"{where}.title"),
                "properties": {"text": {"type": "string", "description": planted(f"{where}.text"),
                                        "default": planted(f"{where}.default")}}}
    if annotation is str:
        return planted(where)
    if annotation is bool:
        return False
    if annotation in (int, float):
        return 1
    origin, args = get_origin(annotation), get_args(annotation)
    if origin is Literal:
        return args[0]
    if _is_model(annotation):
        return _model(annotation, where)
    if origin is list:
        return [item for i, option in enumerate(_options(args[0]))
                for item in (_items(option, f"{where}.{i}") if _is_model(option) else [_value(option, where, "")])]
    if origin in (Union, pytypes.UnionType):
        options = _options(annotation)
        literal = [o for o in options if get_origin(o) is Literal]
        lists = [o for o in options if get_origin(o) is list]
        return _value((literal or lists or options)[0], where, name)
    return {"planted": planted(where), planted(f"{where}.key"): 1}  # a dictionary, `Any`


def _items(model: type[BaseModel], where: str) -> list[dict[str, Any]]:
    if model is types.Tool:
        return [_model(model, where)]
    return variants(model, where)


def _model(model: type[BaseModel], where: str) -> dict[str, Any]:
    if model is types.Tool:  # a tool inside a sampling request: listed by name, as in tools/list
        return tool("sampled", where)
    return fill(model, where, {"_meta": OMIT, "task": OMIT} if model.__name__.endswith("RequestParams") else None)


def _options(annotation: Any) -> list[Any]:
    if get_origin(annotation) is Annotated:
        annotation = get_args(annotation)[0]
    if get_origin(annotation) in (Union, pytypes.UnionType):
        return [a for a in get_args(annotation) if a is not type(None)]
    return [annotation]


def _is_model(annotation: Any) -> bool:
    if get_origin(annotation) is Annotated:
        annotation = get_args(annotation)[0]
    return isinstance(annotation, type) and issubclass(annotation, BaseModel)


def tool(name: str, where: str = "Tool") -> dict[str, Any]:
    return fill(types.Tool, where, {"name": name, "execution": OMIT})


def catalog() -> dict[str, list[dict[str, Any]]]:
    prompt = fill(types.Prompt, "Prompt", {"name": PROMPT})
    prompt["arguments"] = [fill(types.PromptArgument, "PromptArgument", {"name": ARGUMENT, "required": False})]
    return {"tools": [tool(name) for name in TOOL_NAMES],
            "resources": [fill(types.Resource, "Resource", {"uri": URI})],
            "resourceTemplates": [fill(types.ResourceTemplate, "ResourceTemplate", {"uriTemplate": TEMPLATE})],
            "prompts": [prompt]}


def relayed_requests() -> list[tuple[Any, Any]]:
    """(request, result model) of each server->client request the spec defines with something to say."""
    elicit_url = fill(types.ElicitRequestURLParams, "ElicitRequestURLParams",
                      {"_meta": OMIT, "task": OMIT, "elicitationId": "planted-elicitation"})
    return [
        (types.CreateMessageRequest(params=types.CreateMessageRequestParams.model_validate(
            _model(types.CreateMessageRequestParams, "CreateMessageRequestParams"))), types.CreateMessageResult),
        (types.ElicitRequest(params=types.ElicitRequestFormParams.model_validate(
            _model(types.ElicitRequestFormParams, "ElicitRequestFormParams"))), types.ElicitResult),
        (types.ElicitRequest(params=types.ElicitRequestURLParams.model_validate(elicit_url)), types.ElicitResult),
    ]


def build_server() -> Server[Any]:
    lists = catalog()

    async def list_tools(ctx: Any, params: Any) -> dict[str, Any]:
        return {"tools": lists["tools"]}

    async def list_resources(ctx: Any, params: Any) -> dict[str, Any]:
        return {"resources": lists["resources"]}

    async def list_templates(ctx: Any, params: Any) -> dict[str, Any]:
        return {"resourceTemplates": lists["resourceTemplates"]}

    async def list_prompts(ctx: Any, params: Any) -> dict[str, Any]:
        return {"prompts": lists["prompts"]}

    async def call_tool(ctx: Any, params: Any) -> dict[str, Any]:
        if params.name == "result":
            return fill(types.CallToolResult, "CallToolResult", {"isError": False, "resultType": OMIT})
        log = fill(types.LoggingMessageNotificationParams, "LoggingMessageNotificationParams", {"_meta": OMIT})
        await ctx.session.send_log_message(log["level"], log["data"], logger=log["logger"],
                                           related_request_id=ctx.request_id)
        await ctx.session.report_progress(1, 2, planted("ProgressNotificationParams.message"))
        answers = []
        for request, result_type in relayed_requests():
            try:
                answer = await ctx.session.send_request(
                    request, result_type, metadata=ServerMessageMetadata(related_request_id=ctx.request_id))
                answers.append(type(answer).__name__)
            except MCPError as exc:
                answers.append(f"refused: {exc.error.message}")
        text = "relayed: " + ", ".join(answers)
        return {"content": [{"type": "text", "text": text}], "structuredContent": {"text": text}}

    async def read_resource(ctx: Any, params: Any) -> dict[str, Any]:
        return fill(types.ReadResourceResult, "ReadResourceResult", {"resultType": OMIT, "ttlMs": OMIT,
                                                                     "cacheScope": OMIT})

    async def get_prompt(ctx: Any, params: Any) -> dict[str, Any]:
        return fill(types.GetPromptResult, "GetPromptResult", {"resultType": OMIT})

    async def complete(ctx: Any, params: Any) -> dict[str, Any]:
        return fill(types.CompleteResult, "CompleteResult", {"resultType": OMIT})

    return Server("planted", version="1.0", on_list_tools=list_tools, on_call_tool=call_tool,
                  on_list_resources=list_resources, on_list_resource_templates=list_templates,
                  on_read_resource=read_resource, on_list_prompts=list_prompts, on_get_prompt=get_prompt,
                  on_completion=complete)


async def serve_stdio(server: Server[Any]) -> None:
    from mcp.server.stdio import stdio_server

    async with stdio_server() as (read, write):
        await server.run(read, write, server.create_initialization_options())


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--name", default="planted", help="for the test run's marker only")
    parser.parse_args()
    anyio.run(serve_stdio, build_server())


if __name__ == "__main__":
    main()
