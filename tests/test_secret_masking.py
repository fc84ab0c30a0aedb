"""Configured secrets never show where upstream output or config is shown: a table over every kind of secret (a
`${VAR}` in env, args, headers and a URL, literal env, headers, URL password and query, a client token, an OAuth
client secret) x every place (`/readyz`, the daemon's log, `triad plan` as text and JSON, `/metrics`, an error
relayed to a client), with a real stdio child that prints its args, its env and every other secret on stderr."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import httpx2
import pytest

from tests.conftest import ROOT, TRIAD, Proc, stdio_upstream, write_config
from tests.raw_clients import HandshakeSession, answer_of, dumps

pytestmark = pytest.mark.anyio

VARIABLES = {"ENV_SECRET": "env-var-secret-1a2b", "ARG_SECRET": "arg-var-secret-3c4d",
             "HEADER_SECRET": "header-var-secret-5e6f", "QUERY_SECRET": "query-var-secret-7a8b"}
LITERALS = {"env literal": "env-literal-secret-9c0d", "header literal": "header-literal-secret-1e2f",
            "URL password": "url-password-secret-3a4b", "query literal": "query-literal-secret-5c6d",
            "client token": "client-token-secret-7e8f", "OAuth client secret": "oauth-client-secret-9a0b"}
SECRETS = {**{f"${{{name}}}": value for name, value in VARIABLES.items()}, **LITERALS}
"""Every kind of secret, by how the config gives it."""

LEAKY_CHILD = """
import os, sys
lines = [*sys.argv[1:], *(os.environ[k] for k in ("LIT", "VAR")), *open(os.environ["OTHERS"]).read().split()]
for line in lines:
    print("leaking", line, file=sys.stderr)
print("all of them:", " ".join(lines), file=sys.stderr)
sys.exit(3)
"""


def masking_config(tmp_path: Path) -> Path:
    others = tmp_path / "others.txt"  # what the child cannot know from its own config: the test tells it
    others.write_text("\n".join(value for value in SECRETS.values()))
    return write_config(tmp_path, {
        "upstreams": {
            "leaky": {"command": sys.executable, "args": ["-c", LEAKY_CHILD, "--key", "${ARG_SECRET}"],
                      "env": {"LIT": LITERALS["env literal"], "VAR": "${ENV_SECRET}", "OTHERS": str(others)}},
            "web": {"url": f"http://user:{LITERALS['URL password']}@127.0.0.1:1/mcp?api_key="
                           f"{LITERALS['query literal']}&other=${{QUERY_SECRET}}",
                    "headers": {"X-Api-Key": LITERALS["header literal"], "X-Other": "${HEADER_SECRET}"}},
            "tracker": {"url": "http://127.0.0.1:1/mcp",
                        "auth": {"type": "oauth", "grant": "client_credentials", "client_id": "triad",
                                 "client_secret": LITERALS["OAuth client secret"]}},
            "fx": stdio_upstream("masking")},
        "clients": {"ops": {"token": LITERALS["client token"], "owner": True}},
        "min_ready": 1})


def leaks(text: str) -> list[str]:
    """Each kind of secret that `text` shows, with the first line that shows it."""
    return [f"{kind}: {next(line for line in text.splitlines() if value in line)[:300]}"
            for kind, value in SECRETS.items() if value in text]


async def test_no_configured_secret_shows_anywhere_upstream_output_or_config_is_shown(procs: list[Proc],
                                                                                      tmp_path: Path) -> None:
    config = masking_config(tmp_path)
    env = {**VARIABLES}
    proc = Proc([*TRIAD, "serve", "-c", str(config), "--port", "0", "--log-level", "DEBUG"], env=env)
    procs.append(proc)
    url = "http://127.0.0.1:{}/mcp".format(
        (await proc.until(r"listening on http://127\.0\.0\.1:(\d+)/mcp")).group(1))
    await proc.until("upstream fx ready")
    await proc.until(r"upstream leaky is down: .*all of them")
    auth = {"Authorization": f"Bearer {LITERALS['client token']}"}
    places: dict[str, str] = {}
    async with httpx2.AsyncClient(timeout=30) as http:
        ready = (await http.get(url.removesuffix("/mcp") + "/readyz", headers=auth)).json()
        reason = ready["upstreams"]["leaky"]["reason"]
        assert "exit code 3" in reason and "${ARG_SECRET}" in reason and "***" in reason, reason
        places["/readyz"] = json.dumps(ready)
        places["/metrics"] = (await http.get(url.removesuffix("/mcp") + "/metrics", headers=auth)).text
        session = HandshakeSession(http, url)
        session.headers |= auth
        await session.open()
        errors = []
        for index, value in enumerate(SECRETS.values()):  # the upstream's error quotes the URI asked for
            body = {"jsonrpc": "2.0", "id": index, "method": "resources/read",
                    "params": {"uri": f"fixture://fx/{value}"}}
            errors.append(answer_of(await session.post(dumps(body)))["error"])
        assert all("Resource not found" in error["message"] for error in errors), errors
        places["an error relayed to a client"] = json.dumps(errors)
    for form in ([], ["--json"]):
        done = subprocess.run(  # noqa: ASYNC221 (the daemon runs in a process of its own meanwhile)
            [*TRIAD, "plan", "-c", str(config), *form], capture_output=True, text=True, cwd=ROOT,
            env={**os.environ, **env}, timeout=120)
        assert "all of them" in done.stdout, done.stdout + done.stderr
        places[f"triad plan {' '.join(form)}".strip()] = done.stdout + done.stderr
    places["the daemon's log"] = proc.stderr
    assert "leaking" in proc.stderr
    assert {place: leaks(text) for place, text in places.items()} == {place: [] for place in places}
