"""`triad plan` and `triad explain` take serve's listen settings: off loopback, the remote deny list applies."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

from tests.conftest import PYTHON, ROOT, TRIAD, marker, write_config

NAMED = ROOT / "tests" / "servers" / "named_upstream.py"


def config_with_exec(tmp_path: Path, host: str = "127.0.0.1") -> Path:
    upstream = {"command": PYTHON, "args": [str(NAMED), "--name", marker("host-ex"), "--tool", "exec",
                                            "--tool", "read"]}
    return write_config(tmp_path, {"listen": {"host": host}, "upstreams": {"ex": upstream}})


def triad(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([*TRIAD, *args], capture_output=True, text=True, timeout=120)


@pytest.mark.parametrize(("host", "visible"), [(None, True), ("127.0.0.1", True), ("0.0.0.0", False), ("::", False)])
def test_explain_applies_the_remote_deny_list_for_the_host_serve_would_use(tmp_path: Path, host: str | None,
                                                                           visible: bool) -> None:
    path = config_with_exec(tmp_path)
    done = triad("explain", "-c", str(path), "--client", "local", "exec", "--json",
                 *(("--host", host) if host else ()))
    assert done.returncode == (0 if visible else 1), done.stderr
    report = json.loads(done.stdout)
    assert report["visible"] is visible
    gateway_layer = next(layer for layer in report["layers"] if layer["layer"] == 5)
    assert gateway_layer["allowed"] is visible


def test_plan_takes_the_host_too(tmp_path: Path) -> None:
    path = config_with_exec(tmp_path)
    local = json.loads(triad("plan", "-c", str(path), "--json").stdout)
    remote = json.loads(triad("plan", "-c", str(path), "--json", "--host", "0.0.0.0").stdout)
    assert {t["name"] for t in local["visible"]} == {"exec", "read"}
    assert {t["name"] for t in remote["visible"]} == {"read"}
    assert [h["name"] for h in remote["hidden"]] == ["exec"]


def test_a_config_that_listens_off_loopback_is_explained_as_served(tmp_path: Path) -> None:
    path = config_with_exec(tmp_path, host="0.0.0.0")
    assert triad("explain", "-c", str(path), "--client", "local", "exec").returncode == 1
    assert triad("explain", "-c", str(path), "--client", "local", "exec", "--host", "127.0.0.1").returncode == 0
