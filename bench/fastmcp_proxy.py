"""A FastMCP 4 proxy reusing one upstream session (its best case), for comparison. Runs in its own venv.

`python fastmcp_proxy.py UPSTREAM_URL PORT`
"""

from __future__ import annotations

import sys

from fastmcp import Client
from fastmcp.server import create_proxy

if __name__ == "__main__":
    proxy = create_proxy(Client(sys.argv[1]), name="fastmcp-proxy")
    proxy.run("http", host="127.0.0.1", port=int(sys.argv[2]), log_level="WARNING")
