"""A synthetic upstream for the fleet benchmark: 100 tools, stdio, plain JSON-RPC, starts in milliseconds.

Each request it receives is logged on stderr as `fleet-request <method>`, so the benchmark can count how many
upstream requests a downstream `tools/list` caused (Triad logs upstream stderr lines).
"""

from __future__ import annotations

import json
import sys

TOOLS = [{"name": f"tool_{i:03d}", "description": f"Synthetic tool {i}.",
          "inputSchema": {"type": "object", "properties": {"x": {"type": "integer"}}}} for i in range(100)]


def main() -> None:
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
            result = {"tools": TOOLS}
        elif method == "tools/call":
            result = {"content": [{"type": "text", "text": "ok"}]}
        else:
            result = {}
        sys.stdout.write(json.dumps({"jsonrpc": "2.0", "id": ident, "result": result}) + "\n")
        sys.stdout.flush()


if __name__ == "__main__":
    main()
