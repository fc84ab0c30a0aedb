"""Forty broken configs, each as a new user might write it, and what `triad check` answers (issue 31): every one
gets a problem (or, for what is valid but surely not meant, a warning) naming the file, the key path, the line and
what to write instead. A case is (id, file content, key path, line or None for a file-wide problem, the fix)."""

from __future__ import annotations

from pathlib import Path

import pytest

from gateway.cli import main

CASES: list[tuple[str, str | bytes, str, int | None, str]] = [
    ("unknown top-level key", "upstream:\n  demo: {command: srv}\n", "upstream", 1, "did you mean 'upstreams'?"),
    ("misspelt upstream key", "upstreams:\n  demo:\n    comand: srv\n", "upstreams.demo.comand", 3,
     "did you mean 'command'?"),
    ("neither command nor url", "upstreams:\n  demo:\n    args: [x]\n", "upstreams.demo", 2,
     "needs either a command (stdio) or a url"),
    ("unknown transport", "upstreams:\n  demo:\n    url: http://127.0.0.1:9/mcp\n    transport: websocket\n",
     "upstreams.demo.transport", 4, "must be 'stdio', 'streamable-http' or 'sse'"),
    ("timeout in words", "upstreams:\n  demo:\n    command: srv\n    timeout: 30 seconds\n", "upstreams.demo.timeout",
     4, "use e.g. 30s, 500ms, 2m"),
    ("args as one string", "upstreams:\n  demo:\n    command: srv\n    args: --port 80\n", "upstreams.demo.args", 4,
     "must be a list (`- item` lines, or `[a, b]`)"),
    ("env as a list", "upstreams:\n  demo:\n    command: srv\n    env: [A=1]\n", "upstreams.demo.env", 4,
     "must be a mapping (`key: value` lines"),
    ("port in words", "listen:\n  port: eighty\n", "listen.port", 2, "must be a whole number"),
    ("public host, no auth", "listen:\n  host: 0.0.0.0\n", "listen.host", 2, "give a client a token, or set "
     "auth.oauth"),
    ("${VAR:default}", "upstreams:\n  demo:\n    command: srv\n    env:\n      TOKEN: ${GH_TOKEN:default}\n",
     "upstreams.demo.env.TOKEN", 5, "write ${GH_TOKEN:-default}"),
    ("bare $VAR in a header", "upstreams:\n  demo:\n    url: https://example.com/mcp\n    headers:\n"
     "      Authorization: Bearer $API_TOKEN\n", "upstreams.demo.headers.Authorization", 5, "write ${API_TOKEN}"),
    ("unclosed ${VAR", "clients:\n  ide:\n    token: ${IDE_TOKEN\n", "clients.ide.token", 3, "write ${IDE_TOKEN}"),
    ("unset variable", "clients:\n  ide:\n    token: ${TRIAD_SURELY_UNSET_VAR}\n", "clients.ide.token", 3,
     "set it, or write ${TRIAD_SURELY_UNSET_VAR:-default}"),
    ("tab indentation", "upstreams:\n\tdemo: {command: srv}\n", "(top level)", 2, "replace the tab with spaces"),
    ("unclosed flow mapping", "upstreams:\n  demo: {command: srv\n", "(top level)", 3,
     "the { opened on line 2 is never closed"),
    ("duplicate upstream", "upstreams:\n  demo: {command: srv}\n  demo: {command: other}\n", "upstreams.demo", 3,
     "also on line 2; keep one"),
    ("top level a list", "- upstreams\n", "(top level)", 1, "must be a mapping of keys (`upstreams:`"),
    ("hooks as a mapping", "hooks:\n  audit: {path: a.jsonl}\n", "hooks", 1, "must be a list (`- item` lines"),
    ("misspelt hook", "hooks:\n  - audti\n", "hooks.0", 2, "did you mean 'audit'?"),
    ("misspelt hook option", "hooks:\n  - timeout: {defualt: 30s}\n", "hooks.0.timeout.defualt", 2,
     "did you mean 'default'?"),
    ("hook rate in words", "hooks:\n  - rate_limit: {per_client: lots}\n", "hooks.0.rate_limit.per_client", 2,
     "use e.g. 20/s, 100/m, 1000/h"),
    ("min_ready above upstreams", "upstreams:\n  demo: {command: srv}\nmin_ready: 4\n", "min_ready", 3,
     "set min_ready: 1 or lower"),
    ("regex as a deny pattern", "upstreams:\n  demo: {command: srv}\npolicy:\n  profile:\n    deny: ['^.*exec.*$']\n",
     "policy.profile.deny", 5, "did you mean '*exec*'?"),
    ("regex ? in a pattern", "upstreams:\n  demo: {command: srv}\npolicy:\n  gateway_deny:\n    - 'demo__ech?'\n",
     "policy.gateway_deny", 5, "did you mean 'demo__ec*'?"),
    ("use of a missing profile", "policy:\n  use: strict\n  profiles: {ro: {deny: ['*']}}\n", "policy.use", 2,
     "(profiles: ro)"),
    ("anonymous unknown", "clients:\n  ide: {token: ide-token-1234567}\nanonymous: guest\n", "anonymous", 3,
     "(clients: ide)"),
    ("two clients, one token", "clients:\n  a: {token: same-token-123456}\n  b: {token: same-token-123456}\n",
     "clients.b.token", 3, "give each client a token of its own"),
    ("naming prefix value", "naming:\n  prefix: sometimes\n", "naming.prefix", 2,
     "must be 'always', 'conditional' or 'never'"),
    ("separator in an upstream name", "upstreams:\n  my__fs: {command: srv}\n  web: {command: srv}\n",
     "upstreams.my__fs", 2, "rename it or change naming.separator"),
    ("overlapping prefixes", "upstreams:\n  fs: {command: srv}\n  fs_: {command: srv}\n", "upstreams.fs_", 3,
     "rename one of them"),
    ("missing cwd", "upstreams:\n  demo:\n    command: srv\n    cwd: /no/such/dir/anywhere\n", "upstreams.demo.cwd",
     4, "create it, or correct the path"),
    ("upstreams and mcpServers", "upstreams: {a: {command: srv}}\nmcpServers: {b: {command: srv}}\n", "(top level)",
     1, "use either upstreams or mcpServers, not both"),
    ("unknown group", "upstreams:\n  demo: {command: srv}\npolicy:\n  profile: {deny: ['group:nosuch']}\n",
     "policy.profile.deny", 4, "groups: demo, destructive, readonly"),
    ("misspelt upstream in a pattern", "upstreams:\n  demo: {command: srv}\n  web: {command: srv}\npolicy:\n"
     "  profile: {deny: ['dmeo__*']}\n", "policy.profile.deny", 5, "they start with demo__, web__"),
    ("misspelt client key", "clients:\n  ide: {token: ide-token-1234567, tokne: x}\n", "clients.ide.tokne", 2,
     "did you mean 'token'?"),
    ("circuit breaker in words", "upstreams:\n  demo:\n    command: srv\n    circuit_breaker: {failures: many}\n",
     "upstreams.demo.circuit_breaker.failures", 4, "must be a whole number"),
    ("oauth audience not a URL", "clients:\n  ide: {token: ide-token-1234567}\nauth:\n  oauth:\n"
     "    issuer: https://id.example.com\n    audience: triad\n", "auth.oauth.audience", 6,
     "must be an http:// or https:// URL"),
    ("cluster without its keys", "cluster:\n  redis: redis://127.0.0.1:6379/0\n", "cluster.replica_id", 1,
     "required key is missing (add `replica_id:`)"),
    ("saved as Latin-1", "upstreams:\n  demo: {command: caf\xe9}\n".encode("latin-1"), "", None,
     "not UTF-8 text (byte 0xe9 on line 2, column 22; Latin-1 or Windows-1252, probably); save it as UTF-8"),
    ("saved as UTF-16", "upstreams: {}\n".encode("utf-16"), "", None, "the file is UTF-16 text; save it as UTF-8"),
    ("a colon in an upstream's name", "upstreams:\n  'p:read':\n    command: srv\n", "upstreams.p:read", 2,
     "which separates an upstream from its tool in pins and state"),
]


def test_at_least_forty_cases() -> None:
    assert len(CASES) >= 40 and len({case[0] for case in CASES}) == len(CASES)


@pytest.mark.parametrize(("content", "key", "line", "fix"), [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_check_names_file_key_line_and_fix(tmp_path: Path, capsys: pytest.CaptureFixture[str], content: str | bytes,
                                           key: str, line: int | None, fix: str) -> None:
    path = tmp_path / "triad.yaml"
    if isinstance(content, bytes):
        path.write_bytes(content)
    else:
        path.write_text(content)
    code = main(["check", "-c", str(path)])
    err = capsys.readouterr().err
    assert "Traceback" not in err, err
    if key and code == 0:  # valid, but surely not what was meant: a warning on its own line, with the file
        [said] = [w for w in err.splitlines() if w.startswith(f"warning: {path}: {key}: ")]
    elif key:
        assert code == 1 and (err.startswith(f"triad: {path}: ")), err
        said = next(w for w in err.splitlines() if w.strip().startswith(f"{key}: ") or f": {key}: " in w)
    else:  # the whole file: it is the key
        assert code == 1, err
        [said] = [w for w in err.splitlines() if w.strip().startswith(f"{path}: ")]
    assert fix in said, said
    assert line is None or said.endswith(f"(line {line})"), said
