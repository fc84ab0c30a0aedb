"""Sandboxed stdio upstreams (`sandbox:`, bubblewrap): a hostile server tries each escape in a tool call, through
Triad, once sandboxed and once bare; each escape works bare and is refused sandboxed, the server keeps answering,
and what the sandbox allows answers the same both ways. The published filesystem and everything servers run
sandboxed. `triad check` and a down upstream name what keeps a sandbox from being set up."""

from __future__ import annotations

import json
import shutil
import socket
import subprocess
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from gateway.cli import main
from gateway.cli._reports import format_plan
from gateway.errors import ConfigError
from gateway.runtime._loading import parse_config
from tests.conftest import NODE_DIR, PYTHON, ROOT, TRIAD, Proc, node_bin, start_triad, write_config
from tests.test_gateway_e2e import all_tools, call, http_session

HOSTILE = ROOT / "tests" / "servers" / "hostile_upstream.py"
LIMITS = {"memory": "512M", "pids": 16}


def bwrap() -> str:
    found = shutil.which("bwrap")
    if found is None:
        pytest.fail("bubblewrap is required for the sandbox tests (Debian: apt-get install bubblewrap; "
                    "`make system-tools` does it)")
    return found


@pytest.fixture
def listener() -> Iterator[int]:
    """A loopback listener outside any sandbox that greets whoever connects; yields its port."""
    server = socket.create_server(("127.0.0.1", 0))
    stop = threading.Event()

    def serve() -> None:
        while not stop.is_set():
            try:
                conn, _ = server.accept()
            except OSError:
                return
            with conn:
                conn.sendall(b"hello")

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    yield server.getsockname()[1]
    stop.set()
    server.close()
    thread.join(5)


@pytest.fixture
def in_root(tmp_path: Path) -> Iterator[Path]:
    """A path below ROOT, where the venv of the sandboxed command is bound (so ROOT is a mount point in the
    sandbox); a bare run writes it, and it is removed."""
    path = ROOT / f".sandbox-test-{tmp_path.name}"
    yield path
    path.unlink(missing_ok=True)


def text(result: dict[str, Any]) -> str:
    assert not result.get("isError"), result
    return str(result["content"][0]["text"])


@pytest.mark.anyio
async def test_hostile_server_is_refused_each_escape_and_answers_the_rest_as_bare(
        procs: list[Proc], tmp_path: Path, listener: int, in_root: Path) -> None:
    bwrap()
    home, allowed, out = tmp_path / "home", tmp_path / "allowed", tmp_path / "out"
    for directory in (home / ".ssh", allowed, out):
        directory.mkdir(parents=True)
    (home / ".ssh" / "id_ed25519").write_text("PRIVATE KEY")
    (allowed / "data.txt").write_text("allowed data")
    upstream = {"command": PYTHON, "args": [str(HOSTILE)], "env": {"GIVEN": "${SANDBOX_PASSED}"}}
    sandbox = {"read": [str(HOSTILE), str(allowed)], "write": [str(out)], "network": "none",
               "env": ["SANDBOX_PASSED"], **LIMITS}
    config = write_config(tmp_path, {"upstreams": {"bare": upstream, "boxed": {**upstream, "sandbox": sandbox}}})
    url = start_triad(procs, config, wait_ready=2,
                      env={"HOME": str(home), "SANDBOX_SECRET": "s3cret", "SANDBOX_PASSED": "passed"})
    escapes: list[tuple[str, dict[str, Any], str]] = [
        ("read_file", {"path": str(config)}, "refused: ENOENT"),  # the config file
        ("read_file", {"path": str(home / ".ssh" / "id_ed25519")}, "refused: ENOENT"),
        ("write_file", {"path": str(allowed / "new.txt"), "text": "x"}, "refused: EROFS"),  # read, not write
        ("write_file", {"path": str(in_root), "text": "x"}, "refused: EROFS"),  # beside its own command's files
        ("connect", {"port": listener}, "refused: ECONNREFUSED"),  # network: none
        ("get_env", {"name": "SANDBOX_SECRET"}, "unset"),  # not in env: (nor in its parent's, /proc is its own)
        ("spawn", {"count": 40}, "refused: EAGAIN"),  # pids: 16
        ("allocate", {"megabytes": 1024}, "refused: MemoryError"),  # memory: 512M
    ]
    allowed_calls: list[tuple[str, dict[str, Any]]] = [
        ("read_file", {"path": str(allowed / "data.txt")}),
        ("write_file", {"path": str(out / "result.txt"), "text": "written"}),
        ("read_file", {"path": str(out / "result.txt")}),
        ("get_env", {"name": "GIVEN"}),  # the upstream's own env, with its ${VAR}
        ("get_env", {"name": "SANDBOX_PASSED"}),  # listed in env:
        ("spawn", {"count": 2}),
        ("own_loopback", {}),  # its own loopback is up, in its own network namespace
        ("allocate", {"megabytes": 16}),
    ]
    async with http_session(url) as session:
        for tool, arguments, refused in escapes:
            assert text(await call(session, f"boxed__{tool}", arguments)) == refused, (tool, arguments)
        # a write outside `write` lands, if anywhere, in the sandbox's own /tmp or home: never on the host
        for outside in (tmp_path / "evil.txt", home / ".bashrc"):
            assert text(await call(session, "boxed__write_file", {"path": str(outside), "text": "x"}))
            assert not outside.exists()
        for tool, arguments, refused in escapes:  # what makes each a test: bare, every escape works
            assert text(await call(session, f"bare__{tool}", arguments)) != refused, (tool, arguments)
        boxed = [text(await call(session, f"boxed__{tool}", arguments)) for tool, arguments in allowed_calls]
        (out / "result.txt").unlink()
        bare = [text(await call(session, f"bare__{tool}", arguments)) for tool, arguments in allowed_calls]
    assert boxed == bare
    assert boxed[0] == "ok: allowed data" and boxed[3] == "ok: passed"


@pytest.mark.anyio
async def test_published_servers_run_sandboxed_through_triad(procs: list[Proc], tmp_path: Path) -> None:
    bwrap()
    node_bin()
    data = tmp_path / "data"
    data.mkdir()
    (data / "note.txt").write_text("a note")
    binaries = NODE_DIR / "node_modules" / ".bin"
    config = write_config(tmp_path, {"upstreams": {
        "fs": {"command": str(binaries / "mcp-server-filesystem"), "args": [str(data)],
               "sandbox": {"write": [str(data)], "network": "none", "pids": 64}},
        "everything": {"command": str(binaries / "mcp-server-everything"), "args": ["stdio"],
                       "sandbox": {"network": "none"}},
    }})
    url = start_triad(procs, config, wait_ready=2)
    async with http_session(url) as session:
        names = {t["name"] for t in await all_tools(session)}
        assert {"fs__read_text_file", "fs__write_file", "everything__echo"} <= names
        assert text(await call(session, "fs__read_text_file", {"path": str(data / "note.txt")})) == "a note"
        await call(session, "fs__write_file", {"path": str(data / "new.txt"), "content": "from the sandbox"})
        assert (data / "new.txt").read_text() == "from the sandbox"
        assert "hi" in text(await call(session, "everything__echo", {"message": "hi"}))


INVALID = [
    ("{network: wifi}", "upstreams.a.sandbox.network: must be 'none', 'loopback' or 'host' (line 4)"),
    ("{memory: lots}", "upstreams.a.sandbox.memory: not a size (use e.g. 512M, 2G) (line 4)"),
    ("{memory: 512}", "upstreams.a.sandbox.memory: must be at least 16M (line 4)"),
    ("{pids: 0}", "upstreams.a.sandbox.pids: must be greater than or equal to 1 (line 4)"),
    ("{cpu: forever}", "upstreams.a.sandbox.cpu: not a CPU time (use e.g. 300s, 5m, or whole seconds) (line 4)"),
    ("{reads: [/x]}", "upstreams.a.sandbox.reads: unknown key 'reads' (did you mean 'read'?) (line 4)"),
    ("yes", "upstreams.a.sandbox: must be a mapping (`key: value` lines, or `{key: value}`) (line 4)"),
]


@pytest.mark.parametrize(("sandbox", "problem"), INVALID)
def test_an_invalid_sandbox_is_refused_with_its_key_path_and_line(sandbox: str, problem: str) -> None:
    with pytest.raises(ConfigError) as raised:
        parse_config(f"upstreams:\n  a:\n    command: python3\n    sandbox: {sandbox}\n")
    assert raised.value.problems == [problem]


def test_a_sandbox_on_an_http_upstream_is_refused() -> None:
    with pytest.raises(ConfigError) as raised:
        parse_config("upstreams:\n  a:\n    url: http://127.0.0.1:1/mcp\n    sandbox: {network: none}\n")
    assert raised.value.problems == ["upstreams.a.sandbox: applies to stdio upstreams (a command) only (line 4)"]


CHECKED = [
    ({"read": ["/nonexistent/triad"]}, "upstreams.boxed.sandbox.read.0: path not found: /nonexistent/triad"),
    ({"write": ["/nonexistent/triad"]}, "upstreams.boxed.sandbox.write.0: path not found: /nonexistent/triad"),
    ({"read": ["/usr", "/nonexistent/b"]}, "upstreams.boxed.sandbox.read.1: path not found: /nonexistent/b"),
]


@pytest.mark.parametrize(("sandbox", "problem"), CHECKED)
def test_check_names_what_keeps_a_sandbox_from_being_set_up(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                                              sandbox: dict[str, Any], problem: str) -> None:
    bwrap()
    config = tmp_path / "triad.yaml"
    config.write_text(yaml.safe_dump({"upstreams": {"boxed": {"command": PYTHON, "sandbox": sandbox}}}))
    bad = problem.rsplit(": ", 1)[1]
    line = next(n for n, text in enumerate(config.read_text().splitlines(), 1) if bad in text)
    assert main(["check", "-c", str(config)]) == 1
    assert f"{problem} (line {line})" in capsys.readouterr().err


def test_check_names_a_missing_bubblewrap(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                          monkeypatch: pytest.MonkeyPatch) -> None:
    config = tmp_path / "triad.yaml"
    config.write_text(yaml.safe_dump({"sandbox_default": {"network": "none"},
                                      "upstreams": {"plain": {"command": PYTHON}, "opted_out": {
                                          "command": PYTHON, "sandbox": False}}}))
    monkeypatch.setenv("PATH", str(tmp_path))
    assert main(["check", "-c", str(config)]) == 1
    err = capsys.readouterr().err
    assert "sandbox_default: bubblewrap (bwrap) is not installed" in err
    assert "(for upstream 'plain') (line 1)" in err
    assert "opted_out" not in err


@pytest.mark.anyio
async def test_a_sandbox_that_cannot_be_set_up_is_a_down_upstream_with_the_reason(
        procs: list[Proc], tmp_path: Path) -> None:
    bwrap()
    upstream = {"command": PYTHON, "args": [str(HOSTILE)]}
    config = write_config(tmp_path, {"upstreams": {
        "bare": upstream, "boxed": {**upstream, "sandbox": {"read": [str(tmp_path / "gone")]}}}})
    url = start_triad(procs, config, wait_ready=1)
    procs[-1].wait_for(r"upstream boxed .*sandbox\.read\.0: path not found: " + str(tmp_path / "gone"))
    async with http_session(url) as session:
        assert text(await call(session, "bare__get_env", {"name": "PATH"})).startswith("ok: ")


@pytest.mark.anyio
async def test_each_client_session_gets_a_sandbox_and_home_of_its_own(procs: list[Proc], tmp_path: Path) -> None:
    bwrap()
    home = tmp_path / "home"
    home.mkdir()
    config = write_config(tmp_path, {"upstreams": {"boxed": {
        "command": PYTHON, "args": [str(HOSTILE)], "sessions": "per_client", "sandbox": {"read": [str(HOSTILE)]}}}})
    url = start_triad(procs, config, wait_ready=1, env={"HOME": str(home)})
    note = str(home / "note.txt")
    async with http_session(url) as first, http_session(url) as second:
        assert text(await call(first, "write_file", {"path": note, "text": "first's"})) == "ok: written"
        assert text(await call(first, "read_file", {"path": note})) == "ok: first's"
        assert text(await call(second, "read_file", {"path": note})) == "refused: ENOENT"
    assert not (home / "note.txt").exists()


def test_plan_shows_each_upstreams_sandbox(tmp_path: Path) -> None:
    bwrap()
    upstream = {"command": PYTHON, "args": [str(HOSTILE)]}
    config = tmp_path / "triad.yaml"
    config.write_text(yaml.safe_dump({"sandbox_default": {"read": [str(HOSTILE)], "memory": "1G", "cpu": "5m"},
                                      "upstreams": {"boxed": upstream, "bare": {**upstream, "sandbox": False}}}))
    done = subprocess.run([*TRIAD, "plan", "-c", str(config), "--json"], capture_output=True, text=True, cwd=ROOT)
    report = json.loads(done.stdout)
    upstreams = report["upstreams"]
    assert upstreams["boxed"]["state"] == "ready" and upstreams["bare"]["state"] == "ready"
    assert upstreams["boxed"]["sandbox"] == {"read": [str(HOSTILE)], "write": [], "network": "none", "env": [],
                                             "memory": 1 << 30, "pids": None, "cpu": 300, "tmp": "private"}
    assert "sandbox" not in upstreams["bare"]
    assert f"    sandbox: network none; read {HOSTILE}; write -; tmp private; limits memory 1024M, cpu 300s" \
        in format_plan(report).splitlines()  # what `triad plan` prints of the same report
