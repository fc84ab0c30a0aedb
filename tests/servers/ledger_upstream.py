"""The fixture upstream over HTTP, printing one line per `tools/call` it executes: `CALL <name> <arguments JSON>`.

The cluster tests count these lines to prove that no call was executed twice (nor lost) while replicas come and go.
"""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any

import anyio
from fixture_upstream import build_server, serve_http


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--name", default="ledger")
    options = parser.parse_args()
    args = argparse.Namespace(name=options.name, prefix="", extra_tools=0, echo_description="Echo the text.",
                              task_tool=False, page_size=1000, subscribable=False, loop_cursor=False,
                              hang_initialize=False, slow_first_ping=0.0, lists_by_capabilities=False,
                              redos_tool=False)
    server = build_server(args)

    async def ledger(ctx: Any, call_next: Any) -> Any:
        if ctx.method == "tools/call":
            params = ctx.params if isinstance(ctx.params, dict) else {}
            print(f"CALL {params.get('name')} {json.dumps(params.get('arguments') or {}, sort_keys=True)}",
                  file=sys.stderr, flush=True)
        return await call_next(ctx)

    server.middleware.append(ledger)
    anyio.run(serve_http, server, "http", 0)


if __name__ == "__main__":
    main()
