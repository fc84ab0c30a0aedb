"""One name per policy layer, and one spelling per outcome, wherever Triad reports them (issue #31, point 10): the
`triad_denied_calls_total{layer}` label, the `layer` field of the denial log line and of the audit record, and
`explain`; a tool error is `tool_error` in the audit as in `triad.calls` and the metrics. A table over every layer
and every outcome, through the real metrics registry, logger and audit hook."""

from __future__ import annotations

import json
import logging
from pathlib import Path

import anyio
import pytest

from gateway.config import HookSpec
from gateway.hooks import CallContext, Outcome, Session, build_chain
from gateway.observe import OUTCOMES, Metrics, log_denied
from policy import LAYER_NAMES, Step
from policy.config import PolicyConfig

POLICY_KEYS = {"profile": "profile", "agent": "agents", "provider": "providers", "group": "groups",
               "gateway_deny": "gateway_deny", "owner_only": "owner_only", "run_level": None}
"""Each layer's name and the `policy:` key that configures it (run-level lists come with the request)."""


def context() -> CallContext:
    return CallContext("tool", "ide", Session(), "fx__echo", "fx", "echo", {})


@pytest.mark.parametrize("layer", sorted(LAYER_NAMES))
def test_a_layer_has_one_name_in_metrics_logs_and_audit(layer: int, tmp_path: Path,
                                                        caplog: pytest.LogCaptureFixture) -> None:
    metrics = Metrics()
    metrics.deny(layer)
    labels = {s.labels["layer"] for m in metrics.registry.collect() if m.name == "triad_denied_calls"
              for s in m.samples if s.name == "triad_denied_calls_total"}
    with caplog.at_level(logging.INFO):
        log_denied("ide", "fx__echo", None, Step(layer, "config", False, "fx__*", "denied by fx__*"))
    logged = {getattr(record, "layer", None) for record in caplog.records if record.getMessage().startswith("denied")}
    audit = tmp_path / "audit.jsonl"
    chain = build_chain([HookSpec(name="audit", options={"path": str(audit)})])
    anyio.run(chain.denied, context(), layer, "fx__*", "denied by fx__*")
    audited = {json.loads(line)["layer"] for line in audit.read_text().splitlines()}
    name = LAYER_NAMES[layer]
    assert labels == logged == audited == {name}
    assert name in Step(layer, "config", False, None, "").describe()
    key = POLICY_KEYS[name]
    assert key is None or key in PolicyConfig.model_fields  # the name is the config's own spelling


@pytest.mark.parametrize(("outcome", "expected"), [
    (Outcome({"content": [], "isError": True}, None, 0.0), "tool_error"),
    (Outcome({"content": []}, None, 0.0), "ok"),
    (Outcome(None, "upstream down", 0.0), "error"),
    (Outcome({"content": [], "isError": True}, None, 0.0, True), "blocked"),
])
def test_an_outcome_has_one_spelling_in_the_audit_and_the_call_log(outcome: Outcome, expected: str,
                                                                   tmp_path: Path) -> None:
    audit = tmp_path / "audit.jsonl"
    chain = build_chain([HookSpec(name="audit", options={"path": str(audit)})])
    anyio.run(chain.after, context(), outcome)
    assert json.loads(audit.read_text())["outcome"] == expected
    assert expected in OUTCOMES  # the outcomes of `triad.calls` and `triad_calls_total`
