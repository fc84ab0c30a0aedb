"""The policy pipeline: matcher semantics and each of the seven layers (reference section 8.2)."""

from __future__ import annotations

from typing import Any

import pytest

from gateway.config._models import PolicyConfig, ToolRule
from gateway.identity import infer_provider, run_list
from gateway.runtime._loading import parse_config
from policy import Identity, Pipeline, ToolFacts, compile_glob, compile_patterns
from policy.lint import unknown_patterns

ECHO = ToolFacts("gh__echo", "gh", "echo", read_only=True, destructive=False)
DELETE = ToolFacts("gh__delete_repo", "gh", "delete_repo", read_only=False, destructive=True)
FS_READ = ToolFacts("fs__read", "fs", "read", read_only=True, destructive=False)


@pytest.mark.parametrize(("pattern", "name", "matches"), [
    ("*", "anything", True),
    ("echo", "echo", True),
    ("echo", "echo2", False),
    ("ECHO", "echo", True),          # case is ignored on both sides
    ("echo", " Echo ", True),
    ("gh__*", "gh__echo", True),
    ("gh__*", "xgh__echo", False),   # anchored
    ("*delete*", "gh__delete_repo", True),
    ("a?c", "abc", False),           # ? is a literal
    ("a?c", "a?c", True),
    ("[ab]", "a", False),            # brackets are literals
    ("a.c", "abc", False),           # regex metacharacters are escaped
    ("a*b*c", "a-x-b-y-c", True),
])
def test_glob(pattern: str, name: str, matches: bool) -> None:
    glob = compile_glob(pattern)
    assert glob is not None and glob.matches_text(name) is matches


def test_empty_patterns_are_dropped() -> None:
    assert compile_glob("  ") is None
    assert compile_patterns(["", " ", "x"], {}) == compile_patterns(["x"], {})


@pytest.mark.parametrize(("pattern", "tool", "matches"), [
    ("group:gh", ECHO, True),
    ("group:GH", DELETE, True),
    ("group:fs", ECHO, False),
    ("group:readonly", ECHO, True),
    ("group:readonly", DELETE, False),
    ("group:destructive", DELETE, True),
    ("group:destructive", FS_READ, False),
    ("gh:echo", ECHO, True),          # the upstream:raw form
    ("gh:*", DELETE, True),
    ("fs:*", ECHO, False),
    ("group:mine", ECHO, True),       # a user-defined group
    ("group:mine", DELETE, False),
    ("group:loop", ECHO, False),      # a group that includes itself expands once and stops
])
def test_groups_and_forms(pattern: str, tool: ToolFacts, matches: bool) -> None:
    groups = {"mine": ("*echo",), "loop": ("group:loop",)}
    assert any(m.matches(tool) for m in compile_patterns([pattern], groups)) is matches


def test_annotations_follow_the_spec_defaults() -> None:
    assert ToolFacts.from_annotations("t", "u", "t", None).destructive  # no annotations: may be destructive
    assert not ToolFacts.from_annotations("t", "u", "t", {"readOnlyHint": True}).destructive
    assert not ToolFacts.from_annotations("t", "u", "t", {"destructiveHint": False}).destructive
    assert not ToolFacts.from_annotations("t", "u", "t", {"readOnlyHint": "yes"}).read_only


def pipeline(policy: dict[str, Any], clients: dict[str, Any] | None = None, *, remote: bool = False) -> Pipeline:
    config = PolicyConfig.model_validate(policy)
    rules = {k: ToolRule.model_validate(v) for k, v in (clients or {}).items()}
    return Pipeline(config, rules, remote=remote)


def decide(p: Pipeline, tool: ToolFacts, **identity: Any) -> tuple[bool, int | None]:
    decision = p.decide(Identity(identity.pop("client_id", "c"), **identity), tool)
    step = decision.denied_by
    return decision.allowed, step.layer if step else None


LAYER_CASES: list[tuple[str, dict[str, Any], dict[str, Any], ToolFacts, tuple[bool, int | None]]] = [
    ("no policy allows all", {}, {}, DELETE, (True, None)),
    ("profile deny", {"profile": {"deny": ["*delete*"]}}, {}, DELETE, (False, 1)),
    ("profile deny beats allow in the same layer",
     {"profile": {"allow": ["gh__*"], "deny": ["*delete*"]}}, {}, DELETE, (False, 1)),
    ("empty allow allows all", {"profile": {"allow": []}}, {}, DELETE, (True, None)),
    ("allow narrows", {"profile": {"allow": ["fs__*"]}}, {}, ECHO, (False, 1)),
    ("also_allow adds to allow", {"profile": {"allow": ["fs__*"], "also_allow": ["gh__echo"]}}, {}, ECHO,
     (True, None)),
    ("also_allow alone never narrows", {"profile": {"also_allow": ["fs__*"]}}, {}, ECHO, (True, None)),
    ("named profile in use", {"profiles": {"strict": {"allow": ["fs__*"]}}, "use": "strict"}, {}, ECHO, (False, 1)),
    ("a later layer cannot re-allow", {"profile": {"deny": ["gh__echo"]}, "agents": {"coder": {"allow": ["*"]}}},
     {"agent": "coder"}, ECHO, (False, 1)),
    ("agent allow", {"agents": {"coder": {"allow": ["fs__*"]}}}, {"agent": "coder"}, ECHO, (False, 2)),
    ("agent rule of another agent does not apply", {"agents": {"coder": {"allow": ["fs__*"]}}},
     {"agent": "writer"}, ECHO, (True, None)),
    ("agent names ignore case", {"agents": {"Coder": {"deny": ["gh__*"]}}}, {"agent": "CODER"}, ECHO, (False, 2)),
    ("provider deny", {"providers": {"google": {"deny": ["*delete*"]}}}, {"provider": "google"}, DELETE, (False, 3)),
    ("provider/model key wins over provider", {"providers": {"openai/gpt-5": {"deny": ["gh__echo"]},
                                                             "openai": {"allow": ["*"]}}},
     {"provider": "openai", "model": "gpt-5"}, ECHO, (False, 3)),
    ("provider key when the model has no rule", {"providers": {"openai/gpt-5": {"deny": ["gh__echo"]},
                                                               "openai": {"deny": ["*delete*"]}}},
     {"provider": "openai", "model": "gpt-4"}, ECHO, (True, None)),
    ("group allow", {"groups": {"eng": {"allow": ["fs__*"]}}}, {"groups": ("eng",)}, ECHO, (False, 4)),
    ("every group must pass", {"groups": {"eng": {"allow": ["*"]}, "ops": {"deny": ["gh__*"]}}},
     {"groups": ("eng", "ops")}, ECHO, (False, 4)),
    ("groups without a rule are ignored", {"groups": {"eng": {"allow": ["*"]}}}, {"groups": ("eng", "x")}, ECHO,
     (True, None)),
    ("empty groups list", {"groups": {"eng": {"deny": ["*"]}}}, {"groups": ()}, ECHO, (True, None)),
    ("gateway deny", {"gateway_deny": ["*delete*"]}, {}, DELETE, (False, 5)),
    ("owner-only for a non-owner", {"owner_only": ["gh__*"]}, {"owner": False}, ECHO, (False, 6)),
    ("owner-only for an owner", {"owner_only": ["gh__*"]}, {"owner": True}, ECHO, (True, None)),
    ("run-level list allows", {}, {"run_lists": (("gh__e*",),)}, ECHO, (True, None)),
    ("run-level list narrows", {}, {"run_lists": (("fs__*",),)}, ECHO, (False, 7)),
    ("an empty run-level list denies everything", {}, {"run_lists": ((),)}, ECHO, (False, 7)),
    ("several run-level lists intersect", {}, {"run_lists": (("gh__*",), ("*read*",))}, ECHO, (False, 7)),
    ("run-level lists cannot re-allow", {"profile": {"deny": ["gh__echo"]}}, {"run_lists": (("*",),)}, ECHO,
     (False, 1)),
]


@pytest.mark.parametrize(("case", "policy", "identity", "tool", "expected"), LAYER_CASES,
                         ids=[c[0] for c in LAYER_CASES])
def test_layers(case: str, policy: dict[str, Any], identity: dict[str, Any], tool: ToolFacts,
                expected: tuple[bool, int | None]) -> None:
    assert decide(pipeline(policy), tool, **identity) == expected


def test_the_clients_own_tools_block_counts_as_layer_2() -> None:
    p = pipeline({"agents": {"coder": {"allow": ["*"]}}}, {"ide": {"deny": ["gh__echo"]}})
    assert decide(p, ECHO, client_id="ide", agent="coder") == (False, 2)
    assert decide(p, ECHO, client_id="other", agent="coder") == (True, None)


def test_remote_defaults_apply_off_loopback_and_can_be_lifted_by_name() -> None:
    shell = ToolFacts("box__shell", "box", "shell")
    exec_ = ToolFacts("exec", "box", "exec")
    assert decide(pipeline({}, remote=False), shell) == (True, None)
    assert decide(pipeline({}, remote=True), shell) == (False, 5)
    assert decide(pipeline({}, remote=True), exec_) == (False, 5)
    assert decide(pipeline({"gateway_allow": ["shell"]}, remote=True), shell) == (True, None)


def test_every_decision_explains_each_layer_that_applied() -> None:
    p = pipeline({"profile": {"deny": ["*x*"]}, "agents": {"a": {"allow": ["gh__*"]}}, "owner_only": ["*delete*"]})
    decision = p.decide(Identity("c", agent="a"), DELETE)
    assert [(s.layer, s.allowed, s.pattern) for s in decision.steps] == [
        (1, True, None), (2, True, "gh__*"), (6, False, "*delete*")]
    assert decision.denied_by is not None
    assert decision.denied_by.describe() == "layer 6 (owner_only, owner_only): denied: owners only (pattern '*delete*')"


def test_run_list_parsing() -> None:
    assert run_list("a, b* ,") == ("a", "b*")
    assert run_list("") == ()


def test_provider_inference_from_client_name() -> None:
    config = parse_config("policy: {provider_map: {my-agent: xai}}\n")
    assert infer_provider(config, "claude-ai") == "anthropic"
    assert infer_provider(config, "My-Agent") == "xai"
    assert infer_provider(config, "unknown") is None


def test_use_must_name_a_profile() -> None:
    with pytest.raises(Exception, match="no profile named"):
        PolicyConfig.model_validate({"use": "nope"})


def test_lint_warns_about_patterns_that_match_nothing() -> None:
    policy = PolicyConfig.model_validate({
        "profile": {"allow": ["gh__*", "group:gh", "group:readonly", "gh:echo", "*", "plain"]},
        "agents": {"a": {"deny": ["zz__*", "group:nosuch", "nope:x"]}},
    })
    warnings = unknown_patterns(policy, {}, {"gh": "gh"}, "__")
    assert warnings == [
        "policy.agents.a.deny: pattern 'zz__*' matches nothing (no upstream's tools start with 'zz__'; they start "
        "with gh__)",
        "policy.agents.a.deny: pattern 'group:nosuch' matches nothing (no upstream, built-in group or "
        "tool_groups entry is called 'nosuch'; groups: destructive, gh, readonly)",
        "policy.agents.a.deny: pattern 'nope:x' matches nothing (no upstream is called 'nope'; upstreams: gh)",
    ]
    assert unknown_patterns(policy, {}, {"gh": "gh"}, None)[0].startswith("policy.agents.a.deny: pattern 'group:")
