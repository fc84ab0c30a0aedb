"""Collect the tool definitions of real MCP servers into `tools.json`, the corpus of the tool-search evaluation.

Not run by the tests: it regenerates the committed data. Install the servers somewhere outside the repository
(npm packages with `npm install --ignore-scripts`, PyPI ones in a venv of their own), then:

    python tests/search_eval/collect.py --npm-dir /tmp/search-eval --python /tmp/search-eval/pyvenv/bin/python

Each server is started over stdio with placeholder credentials (listing tools calls no remote API), asked for
every page of `tools/list`, and recorded with its package, registry and version. Servers that fail to start are
reported and left out.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
from pathlib import Path
from typing import Any

import anyio
import mcp_types as types
from mcp import ClientSession, StdioServerParameters, stdio_client

HERE = Path(__file__).resolve().parent
PLACEHOLDER = "placeholder-not-a-secret"

NPM_SERVERS: list[tuple[str, str, list[str], dict[str, str]]] = [
    # (short name, npm package, arguments after the entry point, environment)
    ("everything", "@modelcontextprotocol/server-everything", ["stdio"], {}),
    ("filesystem", "@modelcontextprotocol/server-filesystem", ["{tmp}"], {}),
    ("memory", "@modelcontextprotocol/server-memory", [], {"MEMORY_FILE_PATH": "{tmp}/memory.json"}),
    ("sequential-thinking", "@modelcontextprotocol/server-sequential-thinking", [], {}),
    ("github", "@modelcontextprotocol/server-github", [], {"GITHUB_PERSONAL_ACCESS_TOKEN": PLACEHOLDER}),
    ("gitlab", "@modelcontextprotocol/server-gitlab", [], {"GITLAB_PERSONAL_ACCESS_TOKEN": PLACEHOLDER}),
    ("slack", "@modelcontextprotocol/server-slack", [], {"SLACK_BOT_TOKEN": PLACEHOLDER, "SLACK_TEAM_ID": "T0"}),
    ("google-maps", "@modelcontextprotocol/server-google-maps", [], {"GOOGLE_MAPS_API_KEY": PLACEHOLDER}),
    ("puppeteer", "@modelcontextprotocol/server-puppeteer", [], {}),
    ("redis", "@modelcontextprotocol/server-redis", ["redis://127.0.0.1:1"], {}),
    ("brave-search", "@modelcontextprotocol/server-brave-search", [], {"BRAVE_API_KEY": PLACEHOLDER}),
    ("playwright", "@playwright/mcp", [], {}),
    ("notion", "@notionhq/notion-mcp-server", [], {"NOTION_TOKEN": PLACEHOLDER}),
    ("kubernetes", "mcp-server-kubernetes", [], {}),
    ("chrome-devtools", "chrome-devtools-mcp", [], {}),
    ("desktop-commander", "@wonderwhy-er/desktop-commander", [], {}),
    ("mongodb", "mongodb-mcp-server", [], {}),
    ("supabase", "@supabase/mcp-server-supabase", ["--access-token", PLACEHOLDER], {}),
    ("airtable", "airtable-mcp-server", [], {"AIRTABLE_API_KEY": PLACEHOLDER}),
    ("firecrawl", "firecrawl-mcp", [], {"FIRECRAWL_API_KEY": PLACEHOLDER}),
    ("tavily", "tavily-mcp", [], {"TAVILY_API_KEY": PLACEHOLDER}),
    ("context7", "@upstash/context7-mcp", [], {}),
    ("stripe", "@stripe/mcp", ["--tools=all", f"--api-key=sk_test_{PLACEHOLDER}"], {}),
    ("heroku", "@heroku/mcp-server", [], {"HEROKU_API_KEY": PLACEHOLDER}),
    ("exa", "exa-mcp-server", [], {"EXA_API_KEY": PLACEHOLDER}),
    ("sentry", "@sentry/mcp-server", [f"--access-token={PLACEHOLDER}"], {}),
    ("hubspot", "@hubspot/mcp-server", [], {"PRIVATE_APP_ACCESS_TOKEN": PLACEHOLDER}),
]

PYPI_SERVERS: list[tuple[str, str, list[str]]] = [
    # (short name, PyPI distribution, module arguments)
    ("git", "mcp-server-git", ["-m", "mcp_server_git", "--repository", "{tmp}"]),
    ("fetch", "mcp-server-fetch", ["-m", "mcp_server_fetch"]),
    ("time", "mcp-server-time", ["-m", "mcp_server_time"]),
    ("sqlite", "mcp-server-sqlite", ["-m", "mcp_server_sqlite", "--db-path", "{tmp}/eval.db"]),
]

KEPT_FIELDS = ("name", "title", "description", "inputSchema", "annotations")


def _npm_entry(npm_dir: Path, package: str) -> Path:
    manifest = json.loads((npm_dir / "node_modules" / package / "package.json").read_text())
    bins = manifest.get("bin")
    entry = bins if isinstance(bins, str) else next(iter((bins or {}).values()), manifest.get("main"))
    return npm_dir / "node_modules" / package / entry


def _version(npm_dir: Path, package: str) -> str:
    return str(json.loads((npm_dir / "node_modules" / package / "package.json").read_text())["version"])


def _pypi_version(python: str, dist: str) -> str:
    import subprocess

    code = f"import importlib.metadata as m; print(m.version({dist!r}))"
    return subprocess.run([python, "-c", code], capture_output=True, text=True, check=True).stdout.strip()


async def _tools(params: StdioServerParameters) -> list[dict[str, Any]]:
    found: list[dict[str, Any]] = []
    with anyio.fail_after(60), open(os.devnull, "w") as errlog:  # noqa: ASYNC230 (a one-off script)
        async with stdio_client(params, errlog=errlog) as (read, write), ClientSession(read, write) as session:
            await session.initialize()
            cursor = None
            while True:
                page = await session.list_tools(params=types.PaginatedRequestParams(cursor=cursor) if cursor else None)
                for tool in page.tools:
                    wire = tool.model_dump(by_alias=True, exclude_none=True, mode="json")
                    found.append({key: wire[key] for key in KEPT_FIELDS if key in wire})
                cursor = page.next_cursor
                if not cursor:
                    return found


async def collect(npm_dir: Path, python: str) -> list[dict[str, Any]]:
    servers = []
    with tempfile.TemporaryDirectory() as tmp:
        jobs: list[tuple[str, str, str, str, StdioServerParameters]] = []
        for short, package, args, env in NPM_SERVERS:
            if not (npm_dir / "node_modules" / package).is_dir():
                print(f"skip {short}: {package} not installed", file=sys.stderr)
                continue
            argv = [str(_npm_entry(npm_dir, package)), *(a.format(tmp=tmp) for a in args)]
            environ = {**os.environ, **{k: v.format(tmp=tmp) for k, v in env.items()}}
            jobs.append((short, package, "npm", _version(npm_dir, package),
                         StdioServerParameters(command="node", args=argv, env=environ, cwd=tmp)))
        for short, dist, args in PYPI_SERVERS:
            try:
                version = _pypi_version(python, dist)
            except Exception:
                print(f"skip {short}: {dist} not installed", file=sys.stderr)
                continue
            if short == "git":
                import subprocess

                subprocess.run(["git", "init", "-q", tmp], check=True)  # noqa: ASYNC221
            jobs.append((short, dist, "pypi", version,
                         StdioServerParameters(command=python, args=[a.format(tmp=tmp) for a in args], cwd=tmp)))
        for short, package, registry, version, params in jobs:
            try:
                tools = await _tools(params)
            except Exception as exc:
                print(f"skip {short}: {type(exc).__name__}: {exc}", file=sys.stderr)
                continue
            print(f"{short}: {len(tools)} tools", file=sys.stderr)
            servers.append({"server": short, "package": package, "registry": registry, "version": version,
                            "tools": tools})
    return servers


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--npm-dir", type=Path, required=True, help="where the npm packages are installed")
    parser.add_argument("--python", required=True, help="a Python with the PyPI servers installed")
    parser.add_argument("--out", type=Path, default=HERE / "tools.json")
    args = parser.parse_args()
    servers = anyio.run(collect, args.npm_dir.resolve(), args.python)
    total = sum(len(s["tools"]) for s in servers)
    args.out.write_text(json.dumps({"servers": servers}, indent=1, sort_keys=False) + "\n")
    print(f"{total} tools from {len(servers)} servers -> {args.out}", file=sys.stderr)


if __name__ == "__main__":
    main()
