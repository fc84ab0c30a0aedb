"""A synthetic upstream for the fleet benchmark: 100 tools, stdio, plain JSON-RPC, starts in milliseconds. With
`--real N` its 100 tools are real definitions (for the search benchmark, `bench/search.py`).

Each request it receives is logged on stderr as `fleet-request <method>`, so the benchmark can count how many
upstream requests a downstream `tools/list` caused (Triad logs upstream stderr lines).
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

TOOLS = [{"name": f"tool_{i:03d}", "description": f"Synthetic tool {i}.",
          "inputSchema": {"type": "object", "properties": {"x": {"type": "integer"}}}} for i in range(100)]
REAL_TOOLS = Path(__file__).resolve().parent.parent / "tests" / "search_eval" / "tools.json"


def real_tools(offset: int) -> list[dict]:
    """`--real N`: 100 real tool definitions (the search evaluation's), starting at the N-th hundred, cycling;
    a name met twice gets a suffix."""
    every = [tool for server in json.loads(REAL_TOOLS.read_text())["servers"] for tool in server["tools"]]
    chosen, seen = [], set()
    for i in range(100):
        tool = dict(every[(offset * 100 + i) % len(every)])
        while tool["name"] in seen:
            tool["name"] += "_2"
        seen.add(tool["name"])
        chosen.append(tool)
    return chosen


def main() -> None:
    tools = real_tools(int(sys.argv[2])) if sys.argv[1:2] == ["--real"] else TOOLS
    for line in sys.stdin:
        message = json.loads(line)
        method, ident = message.get("method"), message.get("id")
        print(f"fleet-request {method}", file=sys.stderr, flush=True)
        if ident is None:
            continue
        if method == "initialize":
            result = {"protocolVersion": message["params"]["protocolVersion"], "capabilities": {"tools": {}},
                      "serverInfo": {"name": "fleet", "version": "1"}}
        elif method == "tools/list":
            result = {"tools": tools}
        elif method == "tools/call":
            result = {"content": [{"type": "text", "text": "ok"}]}
        else:
            result = {}
        sys.stdout.write(json.dumps({"jsonrpc": "2.0", "id": ident, "result": result}) + "\n")
        sys.stdout.flush()


if __name__ == "__main__":
    main()
