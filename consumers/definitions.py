"""An upstream's tool definitions, judged one by one: taken as they are, repaired, or dropped, each with a note.

Real servers list odd definitions (GitLab's has input schemas without `type`). The SDK's result check refuses the
whole page for one of them, which lost every tool of such a server, and a client's SDK does the same with a list
that carries one: so every tool is checked on its own against the result schema of every protocol revision Triad
serves, after repairs that keep what the upstream meant (an input schema without `type` is an object's, as the spec
says a tool's input is; a field of the wrong type is left out). What still fails is dropped; the others stay.
"""

from __future__ import annotations

from collections.abc import Iterable

from mcp_types import methods
from pydantic import ValidationError

from consumers._json import JSON, JSONObject

VERSIONS = tuple(sorted(version for method, version in methods.SERVER_RESULTS if method == "tools/list"))
"""The protocol revisions whose `tools/list` result a served tool must fit (clients of each may connect)."""
OPTIONAL_FIELDS: dict[str, type] = {"title": str, "description": str, "annotations": dict, "icons": list,
                                    "_meta": dict, "execution": dict}
"""Optional fields that are left out when they have the wrong type (the tool is usable without them)."""
KINDS: dict[type, str] = {str: "text", dict: "an object", list: "a list"}


def usable_tools(upstream: str, tools: Iterable[JSON]) -> tuple[tuple[JSONObject, ...], tuple[str, ...]]:
    """The tools clients can be given, repaired where needed, and one note per repair or drop."""
    kept: list[JSONObject] = []
    notes: list[str] = []
    for index, tool in enumerate(tools, 1):
        repaired, changes = _repaired(tool)
        label = f"tool {tool['name']!r}" if isinstance(tool, dict) and isinstance(tool.get("name"), str) \
            and tool["name"] else f"tool #{index} of its list"
        problem = _problem(repaired) if repaired is not None else "it is not an object"
        if problem is not None:
            notes.append(f"upstream {upstream}: {label} dropped: {problem}")
            continue
        assert repaired is not None
        if changes:
            notes.append(f"upstream {upstream}: {label} repaired: {'; '.join(changes)}")
        kept.append(repaired)
    return tuple(kept), tuple(notes)


def _repaired(tool: JSON) -> tuple[JSONObject | None, list[str]]:
    if not isinstance(tool, dict):
        return None, []
    out = dict(tool)
    changes: list[str] = []
    for key in ("inputSchema", "outputSchema"):
        schema = out.get(key)
        if key == "inputSchema" and schema is None:
            out[key] = {"type": "object"}
            changes.append("it had no inputSchema (an object's is used: any arguments)")
        elif isinstance(schema, dict) and "type" not in schema:
            out[key] = {"type": "object", **schema}
            changes.append(f"its {key} had no type (`type: object` added)")
        elif key == "outputSchema" and key in out and not isinstance(schema, dict):
            del out[key]
            changes.append(f"its outputSchema was {type(schema).__name__}, not an object (left out)")
    for key, kind in OPTIONAL_FIELDS.items():
        if key in out and not isinstance(out[key], kind):
            changes.append(f"its {key} was {type(out[key]).__name__}, not {KINDS[kind]} (left out)")
            del out[key]
    return out, changes


def _problem(tool: JSONObject) -> str | None:
    """Why a client's SDK would refuse the tool (the first error of the first revision that does), or None."""
    for version in VERSIONS:
        try:
            methods.validate_server_result("tools/list", version, {"tools": [tool]})
        except ValidationError as exc:  # the result's own fields (2026-07-28 `resultType`...) are not the tool's
            errors = [error for error in exc.errors() if error["loc"][:1] == ("tools",)]
            if errors:
                where = ".".join(str(part) for part in errors[0]["loc"][2:]) or "the tool"
                return f"{where}: {errors[0]['msg']} (protocol {version})"
    return None
