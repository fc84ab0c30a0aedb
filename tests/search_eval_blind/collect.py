"""Install the blind evaluation's servers and collect their tool definitions into `tools.json` (same format as
`tests/search_eval/tools.json`).

Not run by the tests: it regenerates the committed, frozen data. Everything is installed outside the repository,
each server on its own, every version pinned below: an npm package under `<dir>/npm/<short name>/` with
`npm install --ignore-scripts --save-exact`, a PyPI distribution in a venv `<dir>/py/<short name>/` (their pins
conflict with one another). Then each server is started over stdio with placeholder credentials (listing tools
calls no remote API), asked for every page of `tools/list`, and each tool recorded raw (name, title, description,
inputSchema, annotations), with its server's package, registry and version. Servers that fail are reported and
left out.

    python tests/search_eval_blind/collect.py --dir /work/scratch-blind --install
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

import anyio
import mcp_types as types
from mcp import ClientSession, StdioServerParameters, stdio_client

HERE = Path(__file__).resolve().parent
PLACEHOLDER = "placeholder-not-a-secret"
CLOSED = "127.0.0.1:1"  # a loopback port nothing listens on: a server that connects early fails fast
KEPT_FIELDS = ("name", "title", "description", "inputSchema", "annotations")
AWS = {"AWS_REGION": "us-east-1", "AWS_ACCESS_KEY_ID": "AKIA" + "0" * 16, "AWS_SECRET_ACCESS_KEY": PLACEHOLDER}

NPM_SERVERS: list[tuple[str, str, str, list[str], dict[str, str]]] = [
    # (short name, npm package, version, arguments after the entry point, environment)
    ("postgres", "@modelcontextprotocol/server-postgres", "0.6.2", [f"postgresql://{CLOSED}/app"], {}),
    ("mysql", "@benborla29/mcp-server-mysql", "2.0.9", [],
     {"MYSQL_HOST": "127.0.0.1", "MYSQL_PORT": "1", "MYSQL_USER": "app", "MYSQL_PASS": PLACEHOLDER, "MYSQL_DB": "app"}),
    ("dbhub", "@bytebase/dbhub", "1.4.0", ["--transport", "stdio", "--dsn", "sqlite:///{tmp}/dbhub.db"], {}),
    ("neon", "@neondatabase/mcp-server-neon", "0.6.5", ["start", PLACEHOLDER], {}),
    ("pinecone", "@pinecone-database/mcp", "0.3.0", [], {"PINECONE_API_KEY": PLACEHOLDER}),
    ("elasticsearch", "@elastic/mcp-server-elasticsearch", "0.3.1", [],
     {"ES_URL": f"http://{CLOSED}", "ES_API_KEY": PLACEHOLDER}),
    ("cloudflare", "@cloudflare/mcp-server-cloudflare", "0.2.0", ["run", "0" * 32],
     {"CLOUDFLARE_API_TOKEN": PLACEHOLDER}),
    ("netlify", "@netlify/mcp", "1.15.1", [], {"NETLIFY_PERSONAL_ACCESS_TOKEN": PLACEHOLDER}),
    ("cloud-run", "@google-cloud/cloud-run-mcp", "1.10.0", [], {}),
    ("azure-devops", "@azure-devops/mcp", "2.10.0", ["example-org"], {}),
    ("circleci", "@circleci/mcp-server-circleci", "0.20.0", [], {"CIRCLECI_TOKEN": PLACEHOLDER}),
    ("argocd", "argocd-mcp", "0.9.0", ["stdio"],
     {"ARGOCD_BASE_URL": f"http://{CLOSED}", "ARGOCD_API_TOKEN": PLACEHOLDER}),
    ("jira", "@aashari/mcp-server-atlassian-jira", "3.3.0", [],
     {"ATLASSIAN_SITE_NAME": "example", "ATLASSIAN_USER_EMAIL": "user@example.com",
      "ATLASSIAN_API_TOKEN": PLACEHOLDER}),
    ("bitbucket", "@aashari/mcp-server-atlassian-bitbucket", "3.1.0", [],
     {"ATLASSIAN_BITBUCKET_USERNAME": "user", "ATLASSIAN_BITBUCKET_APP_PASSWORD": PLACEHOLDER}),
    ("linear", "linear-mcp", "1.2.0", [], {"LINEAR_API_KEY": PLACEHOLDER}),
    ("asana", "@roychri/mcp-server-asana", "1.8.0", [], {"ASANA_ACCESS_TOKEN": PLACEHOLDER}),
    ("todoist", "@doist/todoist-mcp", "11.0.0", [], {"TODOIST_API_KEY": PLACEHOLDER}),
    ("shortcut", "@shortcut/mcp", "0.25.0", [], {"SHORTCUT_API_TOKEN": PLACEHOLDER}),
    ("monday", "@mondaydotcomorg/monday-api-mcp", "3.3.0", ["-t", PLACEHOLDER], {}),
    ("discord", "mcp-discord", "1.3.4", [], {"DISCORD_TOKEN": PLACEHOLDER}),
    ("datadog", "@winor30/mcp-server-datadog", "1.8.0", [],
     {"DATADOG_API_KEY": PLACEHOLDER, "DATADOG_APP_KEY": PLACEHOLDER}),
    ("launchdarkly", "@launchdarkly/mcp-server", "0.6.2", ["start", "--api-key", PLACEHOLDER], {}),
    ("google-calendar", "@cocal/google-calendar-mcp", "2.6.3", [],
     {"GOOGLE_OAUTH_CREDENTIALS": "{tmp}/gcp-oauth.keys.json"}),
    ("gmail", "@gongrzhe/server-gmail-autoauth-mcp", "1.1.11", [], {"GMAIL_OAUTH_PATH": "{tmp}/gcp-oauth.keys.json"}),
    ("obsidian", "mcp-obsidian", "1.0.0", ["{tmp}"], {}),
    ("mapbox", "@mapbox/mcp-server", "0.14.0", [], {"MAPBOX_ACCESS_TOKEN": "pk." + PLACEHOLDER}),
    ("airbnb", "@openbnb/mcp-server-airbnb", "0.3.0", ["--ignore-robots-txt"], {}),
    ("charts", "@antv/mcp-server-chart", "0.9.10", [], {}),
    ("mermaid", "mcp-mermaid", "0.4.1", [], {}),
    ("figma", "figma-developer-mcp", "0.13.2", ["--stdio", f"--figma-api-key={PLACEHOLDER}"], {}),
    ("perplexity", "@perplexity-ai/mcp-server", "1.2.1", [], {"PERPLEXITY_API_KEY": PLACEHOLDER}),
    ("searxng", "mcp-searxng", "2.4.0", [], {"SEARXNG_URL": f"http://{CLOSED}"}),
    ("playwright-ea", "@executeautomation/playwright-mcp-server", "1.0.12", [], {}),
    ("browserbase", "@browserbasehq/mcp-server-browserbase", "2.4.3", [],
     {"BROWSERBASE_API_KEY": PLACEHOLDER, "BROWSERBASE_PROJECT_ID": PLACEHOLDER, "GEMINI_API_KEY": PLACEHOLDER}),
    ("git-cyanheads", "@cyanheads/git-mcp-server", "2.15.3", [], {"MCP_TRANSPORT_TYPE": "stdio"}),
    ("pdf-reader", "@sylphx/pdf-reader-mcp", "2.4.0", [], {}),
    ("apify", "@apify/actors-mcp-server", "0.16.0", [], {"APIFY_TOKEN": PLACEHOLDER}),
    ("line", "@line/line-bot-mcp-server", "0.5.0", [],
     {"CHANNEL_ACCESS_TOKEN": PLACEHOLDER, "DESTINATION_USER_ID": "U0"}),
    ("auth0", "@auth0/auth0-mcp-server", "0.1.0-beta.19", ["run"], {}),
    # Three of its services: all of them list 353 tools, a quarter of the set by one vendor.
    ("digitalocean", "@digitalocean/mcp", "1.0.70", ["--services", "droplets,apps,databases"],
     {"DIGITALOCEAN_API_TOKEN": PLACEHOLDER}),
]

PYPI_SERVERS: list[tuple[str, str, str, list[str], dict[str, str]]] = [
    # (short name = its venv's folder, PyPI distribution, version, console script and arguments, environment)
    ("aws-docs", "awslabs-aws-documentation-mcp-server", "1.2.3", ["awslabs.aws-documentation-mcp-server"], AWS),
    ("aws-iam", "awslabs-iam-mcp-server", "1.1.2", ["awslabs.iam-mcp-server"], AWS),
    ("aws-cloudwatch", "awslabs-cloudwatch-mcp-server", "0.3.1", ["awslabs.cloudwatch-mcp-server"], AWS),
    ("aws-dynamodb", "awslabs-dynamodb-mcp-server", "2.1.8", ["awslabs.dynamodb-mcp-server"], AWS),
    ("aws-eks", "awslabs-eks-mcp-server", "0.2.1", ["awslabs.eks-mcp-server"], AWS),
    ("atlassian", "mcp-atlassian", "0.23.1", ["mcp-atlassian"],
     {"JIRA_URL": "https://example.atlassian.net", "JIRA_USERNAME": "user@example.com", "JIRA_API_TOKEN": PLACEHOLDER,
      "CONFLUENCE_URL": "https://example.atlassian.net/wiki", "CONFLUENCE_USERNAME": "user@example.com",
      "CONFLUENCE_API_TOKEN": PLACEHOLDER}),
    ("grafana", "mcp-grafana", "2.1.1", ["mcp-grafana"], {"GRAFANA_URL": f"http://{CLOSED}",
                                                          "GRAFANA_API_KEY": PLACEHOLDER}),
    ("redis", "redis-mcp-server", "0.5.1", ["redis-mcp-server", "--url", f"redis://{CLOSED}/0"], {}),
    ("clickhouse", "mcp-clickhouse", "0.7.0", ["mcp-clickhouse"],
     {"CLICKHOUSE_HOST": "127.0.0.1", "CLICKHOUSE_PORT": "1", "CLICKHOUSE_USER": "app",
      "CLICKHOUSE_PASSWORD": PLACEHOLDER, "CLICKHOUSE_SECURE": "false"}),
    ("duckdb", "mcp-server-motherduck", "1.1.0",
     ["mcp-server-motherduck", "--db-path", ":memory:", "--read-write"], {}),
    ("neo4j", "mcp-neo4j-cypher", "0.6.0", ["mcp-neo4j-cypher"],
     {"NEO4J_URI": f"bolt://{CLOSED}", "NEO4J_USERNAME": "neo4j", "NEO4J_PASSWORD": PLACEHOLDER}),
    ("chroma", "chroma-mcp", "0.2.6", ["chroma-mcp", "--client-type", "ephemeral"], {}),
    ("excel", "excel-mcp-server", "2.2.2", ["excel-mcp-server", "stdio"], {"EXCEL_FILES_PATH": "{tmp}"}),
    ("arxiv", "arxiv-mcp-server", "0.8.2", ["arxiv-mcp-server", "--storage-path", "{tmp}/papers"], {}),
    ("gworkspace", "workspace-mcp", "2.2.1", ["workspace-mcp", "--transport", "stdio"],
     {"GOOGLE_OAUTH_CLIENT_ID": "0.apps.googleusercontent.com", "GOOGLE_OAUTH_CLIENT_SECRET": PLACEHOLDER}),
    ("telegram", "telegram-mcp", "0.6.3", ["telegram-mcp"],
     {"TELEGRAM_API_ID": "1", "TELEGRAM_API_HASH": PLACEHOLDER, "TELEGRAM_BOT_TOKEN": "1:" + PLACEHOLDER,
      "TELEGRAM_CHAT_ID": "1"}),
    ("zotero", "zotero-mcp", "0.3.1", ["zotero-mcp"], {"ZOTERO_LOCAL": "true"}),
    ("opensearch", "elasticsearch-mcp-server", "2.1.6", ["elasticsearch-mcp-server"],
     {"ELASTICSEARCH_HOSTS": f"http://{CLOSED}", "ELASTICSEARCH_API_KEY": PLACEHOLDER}),
    ("mysql-py", "mysql-mcp-server", "0.4.4", ["mysql_mcp_server"],
     {"MYSQL_HOST": "127.0.0.1", "MYSQL_PORT": "1", "MYSQL_USER": "app", "MYSQL_PASSWORD": PLACEHOLDER,
      "MYSQL_DATABASE": "app"}),
]


PYPI_EXTRA = {
    # Servers whose own requirements let the resolver pick an mcp or pydantic that breaks their imports.
    "chroma": ["mcp<2", "pydantic<2.12"],
    "telegram": ["mcp<2"],
}


def install(root: Path, only: set[str]) -> None:
    """npm packages with their install scripts off; one venv per PyPI server (uv when on PATH: much faster)."""
    uv = shutil.which("uv")
    for short, package, version, _, _ in NPM_SERVERS:
        if not only or short in only:
            prefix = root / "npm" / short
            prefix.mkdir(parents=True, exist_ok=True)
            _run(["npm", "install", "--prefix", str(prefix), "--ignore-scripts", "--no-audit", "--no-fund",
                  "--save-exact", f"{package}@{version}"], short)
    for short, dist, version, _, _ in PYPI_SERVERS:
        if not only or short in only:
            venv, specs = root / "py" / short, [f"{dist}=={version}", *PYPI_EXTRA.get(short, [])]
            if uv:
                _run([uv, "venv", "-q", "--allow-existing", "-p", sys.executable, str(venv)], short)
                _run([uv, "pip", "install", "-q", "--native-tls", "-p", str(venv / "bin" / "python"), *specs], short)
            else:
                _run([sys.executable, "-m", "venv", str(venv)], short)
                _run([str(venv / "bin" / "python"), "-m", "pip", "install", "-q", *specs], short)


def _run(argv: list[str], short: str) -> None:
    done = subprocess.run(argv, capture_output=True, text=True)
    if done.returncode:
        print(f"install {short} failed: {' '.join(argv)}\n{done.stderr[-2000:]}", file=sys.stderr)


def _npm_entry(npm_dir: Path, package: str) -> Path:
    manifest = json.loads((npm_dir / "node_modules" / package / "package.json").read_text())
    bins = manifest.get("bin")
    entry = bins if isinstance(bins, str) else next(iter((bins or {}).values()), manifest.get("main"))
    return npm_dir / "node_modules" / package / entry


def _npm_version(npm_dir: Path, package: str) -> str:
    return str(json.loads((npm_dir / "node_modules" / package / "package.json").read_text())["version"])


def _pypi_version(python: Path, dist: str) -> str:
    code = f"import importlib.metadata as m; print(m.version({dist!r}))"
    return subprocess.run([python, "-c", code], capture_output=True, text=True, check=True).stdout.strip()


async def _tools(params: StdioServerParameters, errlog_path: Path) -> list[dict[str, Any]]:
    found: list[dict[str, Any]] = []
    with anyio.fail_after(90), errlog_path.open("w") as errlog:
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


def _jobs(root: Path, tmp: str, only: set[str]) -> list[tuple[str, str, str, str, StdioServerParameters]]:
    home = Path(tmp) / "home"  # servers that read or write config under $HOME do it here, not in the user's
    home.mkdir(exist_ok=True)
    base = {"PATH": os.environ["PATH"], "HOME": str(home), "NO_COLOR": "1"}
    jobs = []
    for short, package, pinned, args, env in NPM_SERVERS:
        if only and short not in only:
            continue
        npm_dir = root / "npm" / short
        if not (npm_dir / "node_modules" / package).is_dir():
            print(f"skip {short}: {package} not installed", file=sys.stderr)
            continue
        if (version := _npm_version(npm_dir, package)) != pinned:
            print(f"skip {short}: {package} {version} installed, {pinned} pinned", file=sys.stderr)
            continue
        argv = [str(_npm_entry(npm_dir, package)), *(a.format(tmp=tmp) for a in args)]
        environ = {**base, **{k: v.format(tmp=tmp) for k, v in env.items()}}
        jobs.append((short, package, "npm", version, StdioServerParameters(command="node", args=argv, env=environ,
                                                                           cwd=tmp)))
    for short, dist, pinned, argv, env in PYPI_SERVERS:
        if only and short not in only:
            continue
        bin_dir = root / "py" / short / "bin"
        try:
            version = _pypi_version(bin_dir / "python", dist)
        except (OSError, subprocess.CalledProcessError):
            print(f"skip {short}: {dist} not installed in {bin_dir.parent}", file=sys.stderr)
            continue
        if version != pinned:
            print(f"skip {short}: {dist} {version} installed, {pinned} pinned", file=sys.stderr)
            continue
        environ = {**base, "PATH": f"{bin_dir}:{base['PATH']}", **{k: v.format(tmp=tmp) for k, v in env.items()}}
        jobs.append((short, dist, "pypi", version, StdioServerParameters(
            command=str(bin_dir / argv[0]), args=[a.format(tmp=tmp) for a in argv[1:]], env=environ, cwd=tmp)))
    return jobs


def _leaf(exc: BaseException) -> str:
    """The first error inside the task groups' wrappings, which alone say nothing."""
    while isinstance(exc, BaseExceptionGroup) and exc.exceptions:
        exc = exc.exceptions[0]
    return f"{type(exc).__name__}: {exc}"[:300]


async def collect(root: Path, logs: Path, only: set[str]) -> list[dict[str, Any]]:
    servers = []
    with tempfile.TemporaryDirectory() as tmp:
        # The Google servers read an OAuth client file before listing tools; a placeholder one is enough.
        client = {"installed": {"client_id": "0.apps.googleusercontent.com", "client_secret": PLACEHOLDER,
                                "redirect_uris": ["http://127.0.0.1"]}}
        (Path(tmp) / "gcp-oauth.keys.json").write_text(json.dumps(client))
        for short, package, registry, version, params in _jobs(root, tmp, only):
            try:
                tools = await _tools(params, logs / f"{short}.stderr")
            except Exception as exc:  # report and go on: one broken server must not stop the rest
                print(f"FAIL {short}: {_leaf(exc)} (stderr in {logs / short}.stderr)", file=sys.stderr)
                continue
            if not tools:
                print(f"FAIL {short}: no tools listed", file=sys.stderr)
                continue
            print(f"{short}: {len(tools)} tools", file=sys.stderr)
            servers.append({"server": short, "package": package, "registry": registry, "version": version,
                            "tools": tools})
    return servers


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument("--dir", type=Path, required=True, help="outside the repository: npm/ and py/ go there")
    parser.add_argument("--install", action="store_true", help="install (or complete) the pinned servers first")
    parser.add_argument("--only", nargs="*", default=[], help="collect these short names only (for debugging)")
    parser.add_argument("--out", type=Path, default=HERE / "tools.json")
    args = parser.parse_args()
    root = args.dir.resolve()
    if root.is_relative_to(HERE.parents[1]):
        parser.error(f"--dir {root} is inside the repository")
    if args.install:
        install(root, set(args.only))
    (root / "logs").mkdir(parents=True, exist_ok=True)
    servers = anyio.run(collect, root, root / "logs", set(args.only))
    total = sum(len(s["tools"]) for s in servers)
    args.out.write_text(json.dumps({"servers": servers}, indent=1, sort_keys=False) + "\n")
    print(f"{total} tools from {len(servers)} servers -> {args.out}", file=sys.stderr)


if __name__ == "__main__":
    main()
