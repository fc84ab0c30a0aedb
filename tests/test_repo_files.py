"""The checkout's own files (issue #31, point 13): `make run` takes a port and a host; what `pip wheel` and
`python -m build` leave behind is ignored by git."""

from __future__ import annotations

import subprocess

import pytest

from tests.conftest import ROOT


@pytest.mark.parametrize(("variables", "expected"), [
    ([], ""), (["PORT=9123"], " --port 9123"), (["PORT=0"], " --port 0"),
    (["HOST=127.0.0.2"], " --host 127.0.0.2"), (["PORT=8000", "HOST=::1"], " --port 8000 --host ::1"),
])
def test_make_run_passes_its_port_and_host_to_serve(variables: list[str], expected: str) -> None:
    done = subprocess.run(["make", "-n", "--always-make", "run", *variables], cwd=ROOT, capture_output=True,
                          text=True, timeout=30, check=True)
    serve = next(line for line in done.stdout.replace("\\\n", " ").splitlines() if "triad serve" in line)
    assert " ".join(serve.split("config.example.yaml", 1)[1].split()) == expected.strip()


@pytest.mark.parametrize("leftover", ["build/", "build/lib/gateway/__init__.py", "build/bdist.linux-x86_64/",
                                      "dist/mcp_triad-0.1.0-py3-none-any.whl", "mcp_triad-0.1.0-py3-none-any.whl",
                                      "dist/mcp_triad-0.1.0.tar.gz", "mcp_triad.egg-info/PKG-INFO"])
def test_what_building_a_wheel_leaves_is_ignored(leftover: str) -> None:
    done = subprocess.run(["git", "check-ignore", "--no-index", "-q", leftover], cwd=ROOT, timeout=30, check=False)
    assert done.returncode == 0, f"{leftover} is not ignored by .gitignore"
