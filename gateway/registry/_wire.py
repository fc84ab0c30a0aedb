"""Shaping what crosses the hop, both ways: which `_meta` a request carries to an upstream, and how a result is
named for the client (the upstream's era stamp stripped, resource links namespaced as Triad lists them).
Pure functions of wire dicts; the dispatcher applies them on the call path.
"""

from __future__ import annotations

from collections.abc import Mapping

from consumers import JSON, JSONObject
from consumers.listing import ERA_META_PREFIX
from gateway.registry._naming import expose_uri

RUN_LIST_META_KEY = "triad/tools"
"""A request's own run-level allow list (layer 7); Triad's business, never forwarded."""


def forwardable_meta(meta: JSON) -> JSONObject | None:
    """The client's `_meta` minus the era envelope, its progress token (the upstream hop has its own) and
    Triad's run-level list."""
    if not isinstance(meta, Mapping):
        return None
    out = {k: v for k, v in meta.items()
           if not k.startswith(ERA_META_PREFIX) and k not in ("progressToken", RUN_LIST_META_KEY)}
    return out or None


def input_round(params: Mapping[str, JSON]) -> JSONObject:
    """A 2026-07-28 retry's answers to an `input_required` result, passed on to the upstream that asked."""
    return {key: params[key] for key in ("inputResponses", "requestState") if params.get(key) is not None}


RESULT_STAMP = ("io.modelcontextprotocol/serverInfo",)
"""The 2026-07-28 stamp on an upstream's result: who answered, which Triad states itself. Any other key of the
reserved prefix (`related-task`, `ui`, what a later revision defines) is the result's own and passes on."""


def clean_result(result: JSONObject) -> JSONObject:
    """Strip the upstream's era stamp from a result's `_meta`; everything else passes through untouched."""
    meta = result.get("_meta")
    if isinstance(meta, dict) and any(k in RESULT_STAMP for k in meta):
        stripped = {k: v for k, v in meta.items() if k not in RESULT_STAMP}
        result = {**result, "_meta": stripped} if stripped else {k: v for k, v in result.items() if k != "_meta"}
    return result


def expose_links(result: JSONObject, server_part: str | None, key: str = "content") -> JSONObject:
    """A result's resource links and embedded resources named as the client can read them back: the upstream's
    URI namespaced as `resources/list` shows it (`server_part` None: URIs are not namespaced)."""
    if server_part is None:
        return result

    def exposed(item: JSON) -> JSON:
        if not isinstance(item, dict):
            return item
        if item.get("type") == "resource_link" and isinstance(item.get("uri"), str):
            return {**item, "uri": expose_uri(item["uri"], server_part)}
        resource = item.get("resource")
        if item.get("type") == "resource" and isinstance(resource, dict) and isinstance(resource.get("uri"), str):
            return {**item, "resource": {**resource, "uri": expose_uri(resource["uri"], server_part)}}
        return item

    content = result.get(key)
    if key == "messages" and isinstance(content, list):  # a prompt: each message holds one content item
        result[key] = [{**m, "content": exposed(m.get("content"))} if isinstance(m, dict) else m for m in content]
    elif isinstance(content, list):
        result[key] = [exposed(item) for item in content]
    return result
