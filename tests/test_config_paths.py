"""Every path in the config means the same from any working directory: relative to the config file's directory
(Claude Desktop starts Triad from `/`, where nothing may be written)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

from gateway.config import TriadConfig
from gateway.runtime._loading import parse_config
from tests.conftest import RUN_MARKER, TRIAD, Proc, stdio_upstream, write_config
from tests.test_gateway_e2e import call, http_session

pytestmark = pytest.mark.anyio

PathOf = Callable[[TriadConfig], str | None]
PATH_SETTINGS: dict[str, tuple[str, PathOf]] = {
    # setting: (YAML that sets it to `rel/x`, how the loaded config resolves it)
    "state_dir": ("state_dir: rel/x\n", lambda c: str(c.state_directory())),
    "upstreams.*.cwd": ("upstreams: {s: {command: x, cwd: rel/x}}\n",
                        lambda c: c.resolve_cwd(c.enabled_upstreams()["s"])),
    "upstreams.*.tls.ca_bundle": ("upstreams: {h: {url: 'https://h.example/mcp', tls: {ca_bundle: rel/x}}}\n",
                                  lambda c: (c.enabled_upstreams()["h"].tls or _no()).ca_bundle),
    "upstreams.*.tls.client_cert": ("upstreams: {h: {url: 'https://h.example/mcp', tls: {client_cert: rel/x}}}\n",
                                    lambda c: (c.enabled_upstreams()["h"].tls or _no()).client_cert),
    "upstreams.*.tls.client_key": ("upstreams: {h: {url: 'https://h.example/mcp', "
                                   "tls: {client_cert: c.pem, client_key: rel/x}}}\n",
                                   lambda c: (c.enabled_upstreams()["h"].tls or _no()).client_key),
    "upstreams.*.auth.token_store": ("upstreams: {h: {url: 'https://h.example/mcp', auth: {token_store: rel/x}}}\n",
                                     lambda c: (c.enabled_upstreams()["h"].auth or _no()).token_store),
    "hooks.audit.path": ("hooks: [{audit: {path: rel/x}}]\n",
                         lambda c: c.resolve_path(str(c.hooks[0].options["path"]))),
    "hooks.pin_definitions.state": ("hooks: [{pin_definitions: {state: rel/x}}]\n",
                                    lambda c: c.resolve_path(str(c.hooks[0].options["state"]))),
}


def _no() -> object:
    raise AssertionError("the setting was dropped")


@pytest.mark.parametrize("setting", list(PATH_SETTINGS))
def test_every_relative_path_setting_resolves_against_the_config_files_directory(setting: str,
                                                                                 tmp_path: Path) -> None:
    text, resolved = PATH_SETTINGS[setting]
    source = tmp_path / "conf" / "triad.yaml"
    (tmp_path / "conf/rel/x").mkdir(parents=True)  # a cwd must exist
    assert Path(str(resolved(parse_config(text, source=source)))).resolve() == (tmp_path / "conf/rel/x").resolve()


async def test_a_daemon_started_from_root_keeps_its_state_audit_and_pins_beside_its_config(tmp_path: Path) -> None:
    """Started with cwd `/`: the upstream's relative cwd, the ledger (state_dir), the audit file and the pins file
    are all beside the config, and calls are not blocked."""
    (tmp_path / "work").mkdir()
    config = write_config(tmp_path, {
        "state_dir": "state",
        "upstreams": {"fx": stdio_upstream("paths", cwd="work")},
        "hooks": [{"audit": {"path": "logs/audit.jsonl"}}, {"pin_definitions": {"state": "pins.json"}}],
    })
    (tmp_path / "state").mkdir()
    (tmp_path / "logs").mkdir()
    triad = Proc([*TRIAD, "serve", "-c", str(config), "--port", "0", "--log-level", "DEBUG"],
                 env={"TRIAD_TEST_MARK": RUN_MARKER}, cwd=Path("/"))
    try:
        port = (await triad.until(r"listening on http://127\.0\.0\.1:(\d+)/mcp")).group(1)
        await triad.until(r"upstream fx ready")
        async with http_session(f"http://127.0.0.1:{port}/mcp") as session:
            result = await call(session, "echo", {"text": "from /"})
        assert result["content"][0]["text"] == "from /", result
        written = {"state_dir": any((tmp_path / "state").glob("*.names.json")),
                   "audit.path": (tmp_path / "logs" / "audit.jsonl").is_file(),
                   "pin_definitions.state": (tmp_path / "pins.json").is_file()}
        assert written == dict.fromkeys(written, True), triad.stderr
    finally:
        triad.terminate()
