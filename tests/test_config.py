"""Configuration: the example file, Claude Desktop's shape, interpolation, and `triad check` on broken files."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from gateway.cli import main
from gateway.config._models import parse_duration
from gateway.config._yaml import MAX_DEPTH, load_with_lines
from gateway.errors import ConfigError
from gateway.runtime._loading import load_config, parse_config
from tests.conftest import ROOT, TRIAD


def test_example_config_loads() -> None:
    config = load_config(ROOT / "config.example.yaml")
    assert list(config.upstreams) == ["demo", "everything"]
    assert config.upstreams["demo"].kind == "stdio"
    # The demo upstream ships in the package and runs from any working directory (no cwd).
    assert config.upstreams["demo"].args == ("-m", "gateway.starter.demo_upstream")
    assert config.upstreams["demo"].cwd is None
    assert config.naming.prefix == "conditional"


def test_claude_desktop_file_is_accepted_as_upstreams(tmp_path: Path) -> None:
    path = tmp_path / "claude_desktop_config.json"
    path.write_text(json.dumps({"mcpServers": {
        "filesystem": {"command": "npx", "args": ["-y", "@modelcontextprotocol/server-filesystem", "/tmp"],
                       "env": {"DEBUG": 1, "VERBOSE": True}},
        "remote": {"type": "http", "url": "https://example.com/mcp", "headers": {"X-Key": "abc"}},
        "legacy": {"type": "sse", "url": "https://example.com/events"},
        "cursor-style": {"url": "https://example.com/sse"},
        "vscode-style": {"type": "stdio", "command": "node", "args": ["server.js"]},
    }}))
    config = load_config(path)
    kinds = {name: up.kind for name, up in config.upstreams.items()}
    assert kinds == {"filesystem": "stdio", "remote": "streamable-http", "legacy": "sse", "cursor-style": "sse",
                     "vscode-style": "stdio"}
    assert config.upstreams["filesystem"].env["DEBUG"].get_secret_value() == "1"
    assert config.upstreams["filesystem"].env["VERBOSE"].get_secret_value() == "true"


@pytest.mark.parametrize(("upstream", "kind"), [
    ({"command": "x", "url": "http://h/sse", "transport": "sse"}, "stdio"),   # a command always means stdio
    ({"url": "http://h/anything", "transport": "sse"}, "sse"),                 # then the explicit transport
    ({"url": "http://h/mcp"}, "streamable-http"),
    ({"url": "http://h/sse"}, "sse"),
    ({"url": "http://h/sse/?x=1"}, "sse"),
    ({"url": "http://h/other"}, "streamable-http"),
    ({"url": "http://h/x", "transport": "streamableHttp"}, "streamable-http"),
])
def test_transport_precedence(upstream: dict[str, str], kind: str) -> None:
    config = parse_config(json.dumps({"upstreams": {"u": upstream}}))
    assert config.upstreams["u"].kind == kind


@pytest.mark.parametrize(("text", "seconds"), [("30s", 30), ("500ms", 0.5), ("2m", 120), ("1h", 3600), (5, 5),
                                               ("1.5s", 1.5)])
def test_durations(text: str | int, seconds: float) -> None:
    assert parse_duration(text) == seconds


def test_interpolation_with_defaults_and_environment() -> None:
    text = 'upstreams:\n  u: {url: "${BASE:-http://127.0.0.1:1}/mcp", headers: {A: "Bearer ${TOKEN}"}}\n'
    config = parse_config(text, environ={"TOKEN": "s3cret"})
    assert config.upstreams["u"].url == "http://127.0.0.1:1/mcp"
    assert config.upstreams["u"].headers["A"].get_secret_value() == "Bearer s3cret"
    assert "s3cret" not in repr(config)


BROKEN = [
    ("bad YAML", "upstreams: [1\n", "(top level): not valid YAML"),
    ("top level not a mapping", "- a\n- b\n",
     "(top level): the top level must be a mapping of keys (`upstreams:`, `clients:`...), not a list or a value "
     "(line 1)"),
    ("unknown key with suggestion", "listen:\n  host: 127.0.0.1\n  prot: 9\n",
     "listen.prot: unknown key 'prot' (did you mean 'port'?) (line 3)"),
    ("unknown top-level key", "upstreams: {}\nupstrams: {}\n",
     "upstrams: unknown key 'upstrams' (did you mean 'upstreams'?) (line 2)"),
    ("wrong type", "listen: {port: eighty}\n", "listen.port: must be a whole number"),
    ("port out of range", "listen: {port: 70000}\n", "listen.port: must be less than or equal to 65535"),
    ("unset variable", "upstreams:\n  s:\n    url: http://h/mcp\n    headers: {A: \"${TRIAD_TEST_UNSET_VAR}\"}\n",
     "upstreams.s.headers.A: environment variable TRIAD_TEST_UNSET_VAR is not set (and has no default): set it, or "
     "write ${TRIAD_TEST_UNSET_VAR:-default} (line 4)"),
    ("bad URL", "upstreams:\n  search:\n    url: ftp://search.example/mcp\n",
     "upstreams.search.url: not an http(s) URL (line 3)"),
    ("no command nor url", "upstreams:\n  empty: {timeout: 5s}\n",
     "upstreams.empty: needs either a command (stdio) or a url (streamable-http, sse) (line 2)"),
    ("bad duration", "upstreams:\n  s: {command: x, timeout: 10 parsecs}\n",
     "upstreams.s.timeout: not a duration (use e.g. 30s, 500ms, 2m) (line 2)"),
    ("zero duration", "upstreams:\n  s: {command: x, timeout: 0s}\n",
     "upstreams.s.timeout: a duration must be greater than zero (line 2)"),
    ("duplicate upstream after sanitising", "upstreams:\n  a.b: {command: x}\n  a-b: {command: y}\n",
     "upstreams.a-b: same name as upstream 'a.b' once sanitised for tool names ('a-b') (line 3)"),
    ("duplicate key", "upstreams:\n  a: {command: x}\n  a: {command: y}\n",
     "upstreams.a: duplicate key: also on line 2; keep one (the last would win) (line 3)"),
    ("bad transport", "upstreams:\n  s: {url: 'http://h/mcp', transport: pigeon}\n",
     "upstreams.s.transport: must be 'stdio', 'streamable-http' or 'sse' (line 2)"),
    ("bad prefix mode", "naming: {prefix: sometimes}\n",
     "naming.prefix: must be 'always', 'conditional' or 'never' (line 1)"),
    ("name limit above the spec", "naming: {max_length: 500}\n",
     "naming.max_length: must be less than or equal to 128 (line 1)"),
    ("both upstreams and mcpServers", "upstreams: {}\nmcpServers: {}\n", "use either upstreams or mcpServers"),
    ("empty token", "clients:\n  c: {token: ''}\n", "clients.c.token: token is empty (line 2)"),
    ("empty file", "", "(top level): the file is empty"),
    ("only comments", "# upstreams:\n\n   \n", "(top level): the file is empty"),
]


@pytest.mark.parametrize(("case", "text", "expected"), BROKEN, ids=[b[0] for b in BROKEN])
def test_check_reports_key_path_and_line(case: str, text: str, expected: str, tmp_path: Path,
                                         capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "broken.yaml"
    path.write_text(text)
    assert main(["check", "-c", str(path)]) == 1
    err = capsys.readouterr().err
    assert expected in err, err


def test_check_reports_every_problem_at_once() -> None:
    with pytest.raises(ConfigError) as raised:
        parse_config("listen: {prot: 1}\nupstreams:\n  a: {}\n  b: {url: ftp://x}\nnaming: {prefix: x}\n")
    assert len(raised.value.problems) == 4


def test_check_never_prints_secret_values(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "secret.yaml"
    path.write_text("upstreams:\n  s:\n    url: 'ftp://user:hunter2@h/mcp'\n    headers: {A: 12}\n"
                    "    env: {K: {nested: hunter2}}\n")
    assert main(["check", "-c", str(path)]) == 1
    err = capsys.readouterr().err
    assert "hunter2" not in err
    assert "upstreams.s.url: not an http(s) URL" in err


def test_check_of_a_missing_file(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["check", "-c", "/nonexistent/triad.yaml"]) == 1
    assert "cannot read" in capsys.readouterr().err


def test_check_command_exit_codes(tmp_path: Path) -> None:
    good = subprocess.run([*TRIAD, "check", "-c", str(ROOT / "config.example.yaml")], capture_output=True, text=True)
    assert good.returncode == 0, good.stderr
    assert "valid" in good.stdout
    bad_path = tmp_path / "bad.yaml"
    bad_path.write_text("listen: {port: -1}\n")
    bad = subprocess.run([*TRIAD, "check", "-c", str(bad_path)], capture_output=True, text=True)
    assert bad.returncode == 1
    assert "listen.port: must be greater than or equal to 0 (line 1)" in bad.stderr


def test_the_example_config_serves_the_demo_upstream_whatever_npx_does(tmp_path: Path) -> None:
    """What `make run` starts: the demo upstream is ready; `everything` is ready, or down with its reason when npx
    or the network is missing, and never takes the demo down with it."""
    env = {**os.environ, "PATH": f"{Path(sys.executable).parent}:{os.environ.get('PATH', '')}"}
    done = subprocess.run([*TRIAD, "plan", "-c", str(ROOT / "config.example.yaml"), "--json"], capture_output=True,
                          text=True, timeout=180, env=env, cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    report = json.loads(done.stdout)
    assert report["upstreams"]["demo"]["state"] == "ready"
    assert {"demo__echo", "demo__add", "demo__word_count"} <= {t["name"] for t in report["visible"]}
    everything = report["upstreams"]["everything"]
    assert everything["state"] == "ready" or everything["reason"], everything


LEAKY = [
    ("anonymous", "anonymous: '${TRIAD_TEST_SECRET}'\n"),
    ("named profile", "policy: {use: '${TRIAD_TEST_SECRET}'}\n"),
    ("hook name", "hooks: ['${TRIAD_TEST_SECRET}']\n"),
    ("plugin module", "hooks: ['my_${TRIAD_TEST_SECRET}:Hook']\n"),
    ("hook option", "hooks: [{rate_limit: {per_client: '${TRIAD_TEST_SECRET}'}}]\n"),
    ("unknown hook option", "hooks: [{audit: {path: a.jsonl, colour: 'x ${TRIAD_TEST_SECRET}'}}]\n"),
]


@pytest.mark.parametrize(("case", "text"), LEAKY, ids=[leak[0] for leak in LEAKY])
def test_check_shows_the_variable_name_never_its_value(case: str, text: str, tmp_path: Path,
                                                       monkeypatch: pytest.MonkeyPatch,
                                                       capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setenv("TRIAD_TEST_SECRET", "tok-3f9a1c77e2")
    path = tmp_path / "leaky.yaml"
    path.write_text(text)
    assert main(["check", "-c", str(path)]) == 1
    err = capsys.readouterr().err
    assert "3f9a1c77e2" not in err, err
    if case != "unknown hook option":  # pydantic's own message names the key, not the value
        assert "${TRIAD_TEST_SECRET}" in err, err


def test_a_short_value_is_hidden_where_a_message_quotes_it() -> None:
    with pytest.raises(ConfigError) as raised:
        parse_config("anonymous: '${V}'\n", environ={"V": "1"})
    assert raised.value.problems == ["anonymous: no client named '${V}' under clients (there are no clients) (line 1)"]


@pytest.mark.parametrize(("listen", "direct", "problem"), [
    ({}, True, None),
    ({"direct_path": False}, False, None),
    ({"lean_path": False}, False, None),
    ({"lean_path": True}, True, None),
    ({"lean_path": False, "direct_path": False}, False, None),
    ({"lean_path": True, "direct_path": False}, None, "old name of `direct_path`"),
    ({"lean_path": False, "direct_path": True}, None, "old name of `direct_path`"),
])
def test_lean_path_is_read_as_direct_path_and_check_says_to_rename_it(
        listen: dict[str, bool], direct: bool | None, problem: str | None, tmp_path: Path,
        capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "triad.yaml"
    path.write_text(json.dumps({"upstreams": {}, "listen": listen}))
    code = main(["check", "-c", str(path)])
    err = capsys.readouterr().err
    if problem is not None:
        assert code == 1 and problem in err
        return
    assert code == 0 and load_config(path).listen.direct_path is direct
    assert ("listen.lean_path is deprecated" in err) == ("lean_path" in listen)


def _nested(kind: str, depth: int) -> str:
    if kind == "flow-list":
        return "x: " + "[" * depth + "]" * depth + "\n"
    if kind == "flow-map":
        return "x: " + "{a: " * depth + "1" + "}" * depth + "\n"
    if kind == "block-map":
        return "".join("  " * i + f"k{i}:\n" for i in range(depth)) + "  " * depth + "v: 1\n"
    return "x:\n" + "".join("  " * i + "-\n" for i in range(1, depth)) + "  " * depth + "- 1\n"  # block list


def _bomb(fan_out: int, depth: int) -> str:
    lines = [f"a0: &a0 [{', '.join(['x'] * fan_out)}]"]
    lines += [f"a{i}: &a{i} [{', '.join([f'*a{i - 1}'] * fan_out)}]" for i in range(1, depth)]
    return "\n".join(lines) + "\n"


HOSTILE_YAML = {
    **{f"{kind}-{depth}": (_nested(kind, depth), "levels deep")
       for kind in ("flow-list", "flow-map", "block-map", "block-list") for depth in (MAX_DEPTH + 1, 300, 3000)},
    "alias-in-its-own-list": ("a: &a [*a]\n", "refers to a node that contains it"),
    "alias-in-its-own-map": ("a: &a {b: *a}\n", "refers to a node that contains it"),
    "alias-deep-inside-itself": ("a: &a {b: [1, {c: [*a]}]}\n", "refers to a node that contains it"),
    "alias-in-an-upstream": ("upstreams:\n  u: &u {command: x, args: [*u]}\n", "refers to a node that contains it"),
    "alias-at-the-top": ("&top {a: *top}\n", "refers to a node that contains it"),
    **{f"bomb-{fan}x{depth}": (_bomb(fan, depth), "values once aliases are expanded")
       for fan, depth in ((9, 9), (2, 40), (100, 4), (3, 14))},
}


@pytest.mark.parametrize("case", sorted(HOSTILE_YAML))
def test_a_file_that_nests_for_ever_or_expands_without_end_is_one_clear_problem(
        case: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Self-containing aliases, nesting past the limit and alias bombs are problems of the file like any other:
    `check` names them (no traceback), and parsing them costs time linear in the file, not in their expansion."""
    text, expected = HOSTILE_YAML[case]
    with pytest.raises(ConfigError) as caught:
        parse_config(text)
    assert expected in " ".join(caught.value.problems)
    path = tmp_path / "triad.yaml"
    path.write_text(text)
    assert main(["check", "-c", str(path)]) == 1
    err = capsys.readouterr().err
    assert expected in err and "Traceback" not in err


@pytest.mark.parametrize("depth", [1, 10, MAX_DEPTH - 1])
def test_nesting_and_aliases_within_the_limits_are_read(depth: int) -> None:
    shared = "upstreams:\n  a: {command: x, env: &d {A: '1'}}\n  b: {command: y, env: *d}\n"
    config = parse_config(shared)
    assert config.upstreams["a"].env == config.upstreams["b"].env
    loaded = load_with_lines("x: " + "[" * depth + "]" * depth + "\n")
    value, levels = loaded.data["x"], 1
    while value:
        value, levels = value[0], levels + 1
    assert not loaded.problems and levels == depth


PER_USER_UPSTREAM = {"url": "http://127.0.0.1:1/mcp", "auth": {"type": "oauth", "mode": "per_user"}}
OAUTH_INBOUND = {"oauth": {"issuer": "https://login.example", "audience": "https://triad.example/mcp"}}
IDENTITY_KINDS: list[tuple[str, dict[str, Any], str | None]] = [
    # (how callers are told apart, the rest of the config, what the refusal names; None: accepted)
    ("anonymous callers share one client", {"clients": {"ide": {"token": "ide-token-0123456789"}, "anon": {}},
                                            "anonymous": "anon"}, "anonymous"),
    ("anonymous acts as a client that also has a token",
     {"clients": {"ide": {"token": "ide-token-0123456789"}}, "anonymous": "ide"}, "anonymous"),
    ("anonymous beside inbound OAuth", {"clients": {"anon": {}}, "anonymous": "anon", "auth": OAUTH_INBOUND},
     "anonymous"),
    ("no authentication: every HTTP caller is local", {}, "authentication"),
    ("no authentication, clients without tokens", {"clients": {"ide": {}, "ops": {}}}, "authentication"),
    ("static tokens tell clients apart", {"clients": {"ide": {"token": "ide-token-0123456789"}}}, None),
    ("OAuth callers are told apart by issuer and subject", {"auth": OAUTH_INBOUND}, None),
]


@pytest.mark.parametrize(("case", "rest", "named"), IDENTITY_KINDS, ids=[k[0] for k in IDENTITY_KINDS])
def test_a_per_user_credential_is_never_reachable_by_a_shared_identity(
        case: str, rest: dict[str, Any], named: str | None, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """`auth: {mode: per_user}` keys an upstream credential per identity: every identity that several people
    share (`anonymous:`, the `local` client of a config without authentication) is refused by `check` and by
    `parse_config` (what a reload reads), naming the upstream and why; identities that tell people apart pass."""
    for upstream in (PER_USER_UPSTREAM, {**PER_USER_UPSTREAM, "enabled": False}):
        path = tmp_path / "per-user.yaml"
        path.write_text(json.dumps({"upstreams": {"tracker": upstream}, **rest}))
        code = main(["check", "-c", str(path)])
        err = capsys.readouterr().err
        if named is None:
            assert code == 0, err
            parse_config(path.read_text())
            continue
        assert code == 1 and "upstreams.tracker.auth.mode" in err and named in err, err
        with pytest.raises(ConfigError) as raised:
            parse_config(path.read_text())
        assert any("upstreams.tracker.auth.mode" in p and named in p for p in raised.value.problems)
    gateway_mode = {"upstreams": {"tracker": {**PER_USER_UPSTREAM, "auth": {"type": "oauth"}}}, **rest}
    parse_config(json.dumps(gateway_mode))  # one credential, Triad's: no identity decides whose it is
