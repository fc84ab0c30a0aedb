"""A run-level list narrows a view without building one (issue 28, point 1): the narrowed view of a whole list
(`narrow_by_run_list`, one list at a time) and the one-name view of a call (`narrow_to_name`, every list at once,
from the caller's unlisted view) must decide exactly as the seven-layer pipeline does on a view built from scratch,
for generated catalogs, policies and lists."""

from __future__ import annotations

import dataclasses

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from consumers import Catalog
from gateway.identity import MAX_RUN_LIST_WORK, Identity, RunListTooLarge
from gateway.registry._catalog import UpstreamSnapshot, build_upstream_sources
from gateway.registry._descriptors import build_registry
from gateway.registry._views import build_view, narrow_by_run_list, narrow_to_name
from gateway.runtime._loading import parse_config
from policy import Glob, Pipeline

CONFIG = parse_config("""
upstreams:
  alpha: {command: x}
  beta: {command: y}
policy:
  gateway_deny: ["*secret*"]
""")
WORDS = st.sampled_from(["read", "write", "delete", "secret", "file", "list", "echo", "a", "b"])
NAMES = st.lists(st.builds("_".join, st.lists(WORDS, min_size=1, max_size=3)), min_size=1, max_size=12, unique=True)
PATTERN = st.one_of(
    st.builds("".join, st.lists(st.one_of(WORDS, st.just("*"), st.just("_"), st.just("__")), min_size=1, max_size=5)),
    st.sampled_from(["alpha__*", "*__echo", "beta:*", "group:alpha", "group:readonly", "*", ""]))


@settings(max_examples=150, deadline=None)
@given(alpha=NAMES, beta=NAMES, lists=st.lists(st.lists(PATTERN, max_size=6), min_size=1, max_size=2))
def test_narrowed_views_decide_as_a_view_built_whole(alpha: list[str], beta: list[str],
                                                     lists: list[list[str]]) -> None:
    def catalog(names: list[str]) -> Catalog:
        return Catalog(tools=tuple({"name": n, "inputSchema": {"type": "object"},
                                    "annotations": {"readOnlyHint": n.startswith("read")}} for n in names),
                       capabilities={"tools": {}})

    built = build_upstream_sources(CONFIG, {"alpha": UpstreamSnapshot(catalog(alpha), "ready"),
                                            "beta": UpstreamSnapshot(catalog(beta), "ready")})
    registry = build_registry(1, built.sources, built.context)
    pipeline = Pipeline(CONFIG.policy, {})
    caller = Identity("ide")
    view = build_view(registry, caller, pipeline)
    for patterns in lists:
        listed = dataclasses.replace(caller, run_lists=(*caller.run_lists, tuple(patterns)))
        whole = build_view(registry, listed, pipeline)
        narrowed = narrow_by_run_list(view, listed, registry, pipeline)
        assert list(narrowed.tools) == list(whole.tools)
        assert narrowed.tools_wire == whole.tools_wire
        assert narrowed.prompts_wire == whole.prompts_wire and narrowed.resources_wire == whole.resources_wire
        assert {d.name for d, _ in narrowed.denied} == {d.name for d, _ in whole.denied}
        for name in registry.tools:
            one = narrow_to_name(build_view(registry, Identity("ide"), pipeline), listed, pipeline, name)
            assert set(one.tools) == ({name} & set(whole.tools))
            assert any(d.name == name for d, _ in one.denied) == any(d.name == name for d, _ in whole.denied)
            assert not one.tools_wire and not one.prompts and not one.resources_wire  # nothing else to find
        view, caller = narrowed, listed


def test_a_list_over_many_tools_runs_no_glob_scan_per_tool(monkeypatch: pytest.MonkeyPatch) -> None:
    """The cost class (issue 28 point 1): each tool was tried against each inner glob of a fresh list in Python
    (5,000 tools x 32 globs: 230 ms per request); now each pattern is looked up among the tools and the inner globs
    run in RE2, one call per tool, so no glob scans a name one by one (1,000 tools, 32 inner globs: 32,000 scans
    before). The narrowed view is the one built whole."""
    names = [f"tool_{i:03d}" for i in range(500)]
    catalog = Catalog(tools=tuple({"name": n, "inputSchema": {"type": "object"}} for n in names),
                      capabilities={"tools": {}})
    built = build_upstream_sources(CONFIG, {"alpha": UpstreamSnapshot(catalog, "ready"),
                                            "beta": UpstreamSnapshot(catalog, "ready")})
    registry = build_registry(1, built.sources, built.context)
    pipeline = Pipeline(CONFIG.policy, {})
    patterns = (*(f"*{c}*5" for c in "abcdefghijklmnopqrstuvwxyz012345"), "alpha__*", "*_007", "beta__tool_001")
    listed = Identity("ide", run_lists=(patterns,))
    whole = build_view(registry, listed, pipeline)
    view = build_view(registry, Identity("ide"), pipeline)
    scans = 0
    scan = Glob._matches

    def counted(self: Glob, text: str) -> bool:
        nonlocal scans
        scans += 1
        return scan(self, text)

    monkeypatch.setattr(Glob, "_matches", counted)
    narrowed = narrow_by_run_list(view, listed, registry, pipeline)
    assert list(narrowed.tools) == list(whole.tools)
    assert scans == 0


@pytest.mark.parametrize("tools", [10, 400, 1_000, 2_000])
def test_a_list_whose_inner_globs_times_the_tools_are_over_the_work_budget_is_refused_naming_it(tools: int) -> None:
    """Every inner glob is matched against every tool of the view: their product is bounded, whatever the view's
    size; exact names, prefixes and suffixes cost one lookup each and are never counted."""
    catalog = Catalog(tools=tuple({"name": f"tool_{i:04d}", "inputSchema": {"type": "object"}} for i in range(tools)),
                      capabilities={"tools": {}})
    built = build_upstream_sources(CONFIG, {"alpha": UpstreamSnapshot(catalog, "ready")})
    registry = build_registry(1, built.sources, built.context)
    pipeline = Pipeline(CONFIG.policy, {})
    view = build_view(registry, Identity("ide"), pipeline)
    for stars in (2, 16, 64):
        patterns = (*(f"*{i}*x" for i in range(stars // 2)), *(f"alpha__tool_{i:04d}*" for i in range(400)))
        listed = Identity("ide", run_lists=(patterns,))
        if stars * len(view.index) > MAX_RUN_LIST_WORK:
            with pytest.raises(RunListTooLarge, match=f"{stars} stars .* the limit is 64,000 .MAX_RUN_LIST_WORK."):
                narrow_by_run_list(view, listed, registry, pipeline)
        else:
            assert list(narrow_by_run_list(view, listed, registry, pipeline).tools) == \
                list(build_view(registry, listed, pipeline).tools)
