"""`approval:` in the config: each bad value is one problem naming its key path and line (`triad check`)."""

from __future__ import annotations

from pathlib import Path

import pytest

from gateway.cli import main
from gateway.runtime._loading import parse_config

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
