"""`approval:` in the config: each bad value is one problem naming its key path and line (`triad check`); `explain`
and `plan` show which rule applies to a tool."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from gateway.cli import main
from gateway.runtime._loading import parse_config
from tests.conftest import stdio_upstream, write_config
from tests.test_operator import run_triad

OWNER = "clients:\n  ops: {token: t0ps3cret, owner: true}\nconsole: {enabled: true}\n"
BAD = [
    ("unknown ask", "approval:\n  rules:\n    - {tools: [x], ask: email}\n",
     "approval.rules.0.ask: must be 'caller', 'console' or 'caller_then_console' (line 3)"),
    ("unknown remember", "approval:\n  rules:\n    - {tools: [x], remember: forever}\n",
     "approval.rules.0.remember: must be 'none' or 'session' (line 3)"),
    ("no tools", "approval:\n  rules:\n    - {tools: []}\n", "approval.rules.0.tools:"),
    ("an empty pattern", "approval:\n  rules:\n    - {tools: [' ']}\n", "an empty pattern matches no tool"),
    ("bad timeout", "approval:\n  rules:\n    - {tools: [x], timeout: soon}\n",
     "approval.rules.0.timeout: not a duration"),
    ("zero timeout", "approval:\n  rules:\n    - {tools: [x], timeout: 0s}\n",
     "approval.rules.0.timeout: a duration must be greater than zero"),
    ("timeout over an hour", "approval:\n  rules:\n    - {tools: [x], timeout: 2h}\n",
     "approval.rules.0.timeout: must be less than or equal to 3600"),
    ("unknown key", "approval:\n  rules:\n    - {tools: [x], asks: caller}\n",
     "approval.rules.0.asks: unknown key 'asks' (did you mean 'ask'?)"),
    ("approver not a client", OWNER + "approval:\n  approvers: [nobody]\n",
     "approval.approvers.0 names 'nobody', which is not in clients:"),
    ("console rule without the console", "clients:\n  ops: {token: t0ps3cret, owner: true}\n"
     "approval:\n  rules:\n    - {tools: [x], ask: console}\n",
     "approval.rules.0.ask: console needs the console (console.enabled: true)"),
    ("console rule nobody can answer", "clients:\n  c: {token: t0ps3cret}\nconsole: {enabled: true}\n"
     "approval:\n  rules:\n    - {tools: [x], ask: caller_then_console}\n",
     "needs someone to answer in the console: an owner client, or approval.approvers"),
]


@pytest.mark.parametrize(("case", "text", "expected"), BAD, ids=[b[0] for b in BAD])
def test_a_bad_approval_block_is_a_clear_problem(case: str, text: str, expected: str, tmp_path: Path,
                                                 capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "triad.yaml"
    path.write_text(text)
    assert main(["check", "-c", str(path)]) == 1
    err = capsys.readouterr().err
    assert expected in err, err
    assert "t0ps3cret" not in err


GOOD = [
    "approval:\n  rules:\n    - {tools: ['*delete*', 'git__push', 'group:payments'], timeout: 2m, remember: session}\n",
    OWNER + "approval:\n  rules:\n    - {tools: [x], ask: console}\n",
    OWNER + "approval:\n  approvers: [ops]\n  rules:\n    - {tools: [group:destructive], ask: caller_then_console}\n",
]


@pytest.mark.parametrize("text", GOOD)
def test_a_good_approval_block_is_read(text: str) -> None:
    config = parse_config(text)
    assert config.approval.rules
    assert config.approval.rules[0].timeout > 0


def test_explain_and_plan_show_which_rule_applies(tmp_path: Path) -> None:
    """The first matching rule, by name, `upstream:raw` or group; a tool the policy hides is never asked about."""
    config = write_config(tmp_path, {
        "upstreams": {"fx": stdio_upstream("approval-explain")},
        "policy": {"profile": {"deny": ["fail"]}},
        "approval": {"rules": [{"tools": ["fx:structured", "fail"], "timeout": "2m", "remember": "session"},
                               {"tools": ["group:destructive"], "timeout": "10s"}]}})
    plan = json.loads(run_triad("plan", "-c", str(config), "--json").stdout)
    rules = {tool["name"]: tool["approval"] for tool in plan["visible"]}
    assert rules["structured"]["rule"] == 0 and rules["structured"]["pattern"] == "fx:structured"
    assert rules["image"]["rule"] == 1 and rules["image"]["timeout"] == 10  # no annotations: destructive
    assert rules["echo"] is None  # read-only
    assert "fail" not in rules
    assert json.loads(run_triad("explain", "-c", str(config), "fail", "--json").stdout)["approval"] is None
    text = run_triad("explain", "-c", str(config), "structured").stdout
    assert "approval: approval.rules.0 (pattern 'fx:structured'): ask caller, timeout 120s, remember session" in text
