"""The core tools' descriptors: `search_tools` and `call_tool`, which Triad itself offers in `tools_mode: search`.

They are ordinary descriptors (owner `core`, `ExecutorRef(kind="core")`), merged into the registry first
(`core_source`) whenever the config puts some client in search mode, and planned, filtered by policy and listed like
any tool: their availability is the caller's tools mode (`TOOLS_MODE_KEY`, set per caller by `build_view`), so a
search-mode client sees them and any other client does not. Their names are reserved for every client, whatever
its mode: an upstream tool never takes one. What they do when called is `gateway.calls` (their executors).
"""

from __future__ import annotations

from consumers import JSONObject
from gateway.config import TriadConfig
from gateway.registry._descriptors import ExecutorRef, OwnerRef, ToolDescriptor, ToolSource

DEFAULT_LIMIT = 5
MAX_LIMIT = 50
MAX_QUERY_CHARS = 1024
"""A query longer than this is refused: a task description, not a document."""

SEARCH_WIRE: JSONObject = {
    "name": "search_tools",
    "title": "Search tools",
    "description": "Find tools for a task among the many this gateway offers (only a few are listed). Describe "
                   "what you want to do in plain words; returns the best matching tools with their descriptions and "
                   "input schemas (a query of several steps gets tools for each). Call a found tool directly by its "
                   "name, or through call_tool.",
    "inputSchema": {"type": "object", "properties": {
        "query": {"type": "string", "description": "What you want to do, in natural language; for a task of several "
                                                   "steps, name each, separated by ';' or 'then'"},
        "limit": {"type": "integer", "minimum": 1, "maximum": MAX_LIMIT, "default": DEFAULT_LIMIT,
                  "description": "How many tools to return"}}, "required": ["query"]},
    "annotations": {"readOnlyHint": True, "openWorldHint": False},
}
CALL_WIRE: JSONObject = {
    "name": "call_tool",
    "title": "Call a tool",
    "description": "Call a tool found with search_tools, by its name, with its arguments.",
    "inputSchema": {"type": "object", "properties": {
        "name": {"type": "string", "description": "The tool's name, as search_tools gave it"},
        "arguments": {"type": "object", "description": "The tool's arguments, as its input schema describes"}},
        "required": ["name"]},
}


TOOLS_MODE_KEY = "the client's tools mode"
"""Availability context key: the caller's `tools_mode` (a fact of the caller, set per view like `TAKES_TASKS_KEY`)."""
_IN_SEARCH_MODE = {"kind": "context", "key": TOOLS_MODE_KEY, "equals": "search"}


def _core(wire: JSONObject, rank: int) -> ToolDescriptor:
    return ToolDescriptor(name=wire["name"], description=wire["description"], input_schema=wire["inputSchema"],
                          owner=OwnerRef("core"), title=wire.get("title"), executor=ExecutorRef("core", wire["name"]),
                          availability=_IN_SEARCH_MODE, annotations=wire.get("annotations"), wire=wire,
                          sort_key=f"\U0010ffff{rank}")


CORE_TOOLS = (_core(SEARCH_WIRE, 0), _core(CALL_WIRE, 1))
"""In the order a search-mode client lists them, after its always-listed tools (`sort_key` puts them last)."""
CORE_NAMES = frozenset(tool.name for tool in CORE_TOOLS)
"""Reserved for the core tools, whether the config enables them or not: a name means one tool for every client."""


def core_source(config: TriadConfig) -> ToolSource:
    """The core tools, when some client is in search mode (otherwise none: nobody could see them)."""
    searching = config.search.tools_mode == "search" or any(c.tools_mode == "search" for c in config.clients.values())
    return ToolSource("core", "", CORE_TOOLS if searching else ())
