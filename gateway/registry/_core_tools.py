"""The core tools' descriptors: `search_tools` and `call_tool`, which Triad itself offers in `tools_mode: search`.

What a search-mode client lists is built here (`listed_tools`, for `gateway.registry`); what the tools do when
called is `gateway.calls` (their executors).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from gateway.registry._schemas import normalize

SEARCH_TOOLS = "search_tools"
CALL_TOOL = "call_tool"
TRIAD_TOOLS = frozenset({SEARCH_TOOLS, CALL_TOOL})
DEFAULT_LIMIT = 5
MAX_LIMIT = 50
MAX_QUERY_CHARS = 1024
"""A query longer than this is refused: a task description, not a document."""

SEARCH_WIRE: dict[str, Any] = {
    "name": SEARCH_TOOLS,
    "title": "Search tools",
    "description": "Find tools for a task among the many this gateway offers (only a few are listed). Describe "
                   "what you want to do in plain words; returns the best matching tools with their descriptions and "
                   "input schemas. Call a found tool directly by its name, or through call_tool.",
    "inputSchema": {"type": "object", "properties": {
        "query": {"type": "string", "description": "What you want to do, in natural language"},
        "limit": {"type": "integer", "minimum": 1, "maximum": MAX_LIMIT, "default": DEFAULT_LIMIT,
                  "description": "How many tools to return"}}, "required": ["query"]},
    "annotations": {"readOnlyHint": True, "openWorldHint": False},
}
CALL_WIRE: dict[str, Any] = {
    "name": CALL_TOOL,
    "title": "Call a tool",
    "description": "Call a tool found with search_tools, by its name, with its arguments.",
    "inputSchema": {"type": "object", "properties": {
        "name": {"type": "string", "description": "The tool's name, as search_tools gave it"},
        "arguments": {"type": "object", "description": "The tool's arguments, as its input schema describes"}},
        "required": ["name"]},
}


def listed_tools(kept: Sequence[dict[str, Any]], profile: str | None) -> tuple[dict[str, Any], ...]:
    """What a search-mode client's `tools/list` holds: its always-listed tools, then the two Triad tools (their
    schemas after the client's profile, like every other)."""
    own = [{**wire, "inputSchema": normalize(wire["inputSchema"], profile)} if profile not in (None, "anthropic")
           else dict(wire) for wire in (SEARCH_WIRE, CALL_WIRE)]
    return (*kept, *own)
