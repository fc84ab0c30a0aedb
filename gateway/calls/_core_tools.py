"""The executors of the core tools (`ExecutorRef(kind="core")`): `search_tools` and `call_tool`.

Their descriptors are in the registry (`gateway.registry`), so a search-mode client lists them, and policy, hooks
and the audit see them, as any tool. `search_tools` ranks the caller's visible tools only (`gateway.search`: policy
before ranking) and runs inside the hook chain as a call of `search_tools`, with no upstream. `call_tool` runs
nothing itself: `inner_call` unwraps its `name` and `arguments` into the call the dispatcher then makes, with the
same view, so the inner tool has its own lookup (a hidden or unknown name gets the same error as a direct call),
policy, run-level lists, hooks and audit, under its own name.

Both are plain functions of what they are given; neither knows the dispatcher.
"""

from __future__ import annotations

import json
from collections.abc import Mapping

from consumers import JSON, JSONObject
from gateway.config import ToolsMode, TriadConfig
from gateway.registry import DEFAULT_LIMIT, MAX_LIMIT, MAX_QUERY_CHARS, ClientView, tool_wire
from gateway.search import SearchIndexes, find

CALL_THROUGH = "call_tool"
"""The core executor that is a call of another tool (`inner_call`), not a run of its own."""


def settings_for(config: TriadConfig, client_id: str) -> tuple[ToolsMode, tuple[str, ...]]:
    """A client's tools mode and always-listed patterns (the global ones, then its own)."""
    client = config.clients.get(client_id)
    mode = client.tools_mode if client is not None and client.tools_mode is not None else config.search.tools_mode
    return mode, (*config.search.always_list, *(client.always_list if client is not None else ()))


def inner_call(params: Mapping[str, JSON]) -> JSONObject | str:
    """`call_tool`'s params -> the params of the call it stands for (its other keys, `_meta`, `task`, kept), or
    what is wrong with them, for a tool error the model can correct (`tool_error`)."""
    arguments = params.get("arguments")
    arguments = arguments if isinstance(arguments, Mapping) else {}
    name, inner = arguments.get("name"), arguments.get("arguments")
    if not isinstance(name, str) or not (inner is None or isinstance(inner, Mapping)):
        return "call_tool needs `name` (a string) and `arguments` (an object)"
    forwarded = {key: value for key, value in params.items() if key not in ("name", "arguments")}
    return {**forwarded, "name": name, "arguments": inner or {}}


async def run_core(executor: str, indexes: SearchIndexes, view: ClientView, arguments: Mapping[str, JSON],
                   schemas: dict[tuple[str, str], JSONObject]) -> JSONObject:
    """Run the core executor named `executor` for `view`'s caller (`schemas`: the snapshot's schema cache)."""
    if executor != "search_tools":  # a descriptor names an executor this version does not have: fail closed
        return tool_error(f"Triad has no core executor {executor!r}")
    return await search_tools(indexes, view, arguments, schemas)


async def search_tools(indexes: SearchIndexes, view: ClientView, arguments: Mapping[str, JSON],
                       schemas: dict[tuple[str, str], JSONObject]) -> JSONObject:
    query, limit = arguments.get("query"), arguments.get("limit", DEFAULT_LIMIT)
    if not isinstance(query, str) or not query.strip():
        return tool_error("search_tools needs `query`: what you want to do, in words")
    if len(query) > MAX_QUERY_CHARS:
        return tool_error(f"the query has {len(query)} characters; the limit is {MAX_QUERY_CHARS}")
    if isinstance(limit, bool) or not isinstance(limit, int) or not 1 <= limit <= MAX_LIMIT:
        return tool_error(f"`limit` must be an integer from 1 to {MAX_LIMIT}")
    found = await find(indexes, view, query, limit)
    tools = [tool_wire(view.tools[name].descriptor, view.profile, schemas) for name, _ in found]
    structured = {"tools": [_hit(wire) for wire in tools]}
    return {"content": [{"type": "text", "text": json.dumps(structured, ensure_ascii=False)}],
            "structuredContent": structured}


def _hit(wire: JSONObject) -> JSONObject:
    """A found tool as `search_tools` returns it: name, title (the top-level one, else `annotations.title`, where
    many servers put it), description and input schema."""
    hit = {key: wire[key] for key in ("name", "title", "description", "inputSchema") if key in wire}
    annotations = wire.get("annotations")
    if "title" not in hit and isinstance(annotations, Mapping) and isinstance(annotations.get("title"), str):
        hit["title"] = annotations["title"]
    return {key: hit[key] for key in ("name", "title", "description", "inputSchema") if key in hit}


def tool_error(message: str) -> JSONObject:
    """Bad arguments are told to the model as a tool error it can correct (the spec's advice for input errors)."""
    return {"content": [{"type": "text", "text": message}], "isError": True}
