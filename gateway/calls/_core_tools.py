"""The two tools Triad gives a client in `tools_mode: search`: `search_tools` and `call_tool`.

A search-mode client lists only its always-listed tools and these two; every other tool it may see stays callable
by its exposed name, and is found with `search_tools`, which ranks the caller's visible tools only (`gateway.search`:
policy before ranking). `call_tool` unwraps its `name` and `arguments` and goes down the dispatcher's ordinary call
path with the same view: the same lookup (a hidden or unknown name gets the same error as a direct call), policy,
run-level lists, hooks and audit, under the inner tool's own name. `search_tools` itself runs through the hook chain
as a call of `search_tools` (audited, rate-limited), with no upstream.

The dispatcher calls `call_triad_tool` and `settings_for`; views call `listed_tools`.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from gateway.config import ToolsMode, TriadConfig
from gateway.hooks import CallContext, Session
from gateway.registry import CALL_TOOL, DEFAULT_LIMIT, MAX_LIMIT, MAX_QUERY_CHARS, SEARCH_TOOLS, SEARCH_WIRE
from gateway.search import find
from gateway.tasks import Era

if TYPE_CHECKING:
    from consumers import ProgressFn
    from gateway.calls._dispatcher import Dispatcher
    from gateway.registry import ClientView

def settings_for(config: TriadConfig, client_id: str) -> tuple[ToolsMode, tuple[str, ...]]:
    """A client's tools mode and always-listed patterns (the global ones, then its own)."""
    client = config.clients.get(client_id)
    mode = client.tools_mode if client is not None and client.tools_mode is not None else config.search.tools_mode
    return mode, (*config.search.always_list, *(client.always_list if client is not None else ()))


async def call_triad_tool(dispatcher: Dispatcher, view: ClientView, params: Mapping[str, Any],
                          progress: ProgressFn | None, session: Session | None,
                          era: Era = "2025-11-25") -> dict[str, Any]:
    """`era`: the client's, for `call_tool`'s inner call as for a direct one (whether it runs as a task, and how
    the task is named and translated: `gateway.tasks`)."""
    arguments = params.get("arguments")
    arguments = dict(arguments) if isinstance(arguments, Mapping) else {}
    if params.get("name") == CALL_TOOL:
        name, inner = arguments.get("name"), arguments.get("arguments")
        if not isinstance(name, str) or not (inner is None or isinstance(inner, Mapping)):
            return _tool_error("call_tool needs `name` (a string) and `arguments` (an object)")
        forwarded = {key: value for key, value in params.items() if key not in ("name", "arguments")}
        return await dispatcher.call_visible_tool(view, {**forwarded, "name": name, "arguments": inner or {}},
                                                  progress, session, era)

    async def run(ctx: CallContext | None) -> dict[str, Any]:
        return await search(dispatcher, view, ctx.arguments if ctx is not None else arguments)

    if not dispatcher.hooks:
        return await run(None)
    ctx = CallContext("tool", view.identity.client_id, session or Session(), SEARCH_TOOLS, "", SEARCH_TOOLS,
                      arguments, SEARCH_WIRE["annotations"], SEARCH_WIRE["inputSchema"])
    return await dispatcher.hooks.run(ctx, run)


async def search(dispatcher: Dispatcher, view: ClientView, arguments: Mapping[str, Any]) -> dict[str, Any]:
    query, limit = arguments.get("query"), arguments.get("limit", DEFAULT_LIMIT)
    if not isinstance(query, str) or not query.strip():
        return _tool_error("search_tools needs `query`: what you want to do, in words")
    if len(query) > MAX_QUERY_CHARS:
        return _tool_error(f"the query has {len(query)} characters; the limit is {MAX_QUERY_CHARS}")
    if isinstance(limit, bool) or not isinstance(limit, int) or not 1 <= limit <= MAX_LIMIT:
        return _tool_error(f"`limit` must be an integer from 1 to {MAX_LIMIT}")
    found = await find(dispatcher.search, view, query, limit)
    tools = [dispatcher.tool_wire(view, view.tools[name].descriptor) for name, _ in found]
    structured = {"tools": [{key: wire[key] for key in ("name", "title", "description", "inputSchema")
                             if key in wire} for wire in tools]}
    return {"content": [{"type": "text", "text": json.dumps(structured, ensure_ascii=False)}],
            "structuredContent": structured}


def _tool_error(message: str) -> dict[str, Any]:
    """Bad arguments are told to the model as a tool error it can correct (the spec's advice for input errors)."""
    return {"content": [{"type": "text", "text": message}], "isError": True}
