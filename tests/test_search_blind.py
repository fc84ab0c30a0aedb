"""The blind tool-search set (`tests/search_eval_blind/`): how its tasks are scored (a tool of every group for a
multi-tool task, the probe policy before ranking) and the quality the default ranker reaches on its dev half."""

from __future__ import annotations

from pathlib import Path

import pytest

from gateway.search._ranker import Bm25Ranker, load_ranker
from tests.search_eval.evaluate import Task, evaluate, served_at, tasks

BLIND = Path(__file__).parent / "search_eval_blind"
DEV_RECALL_AT_5_FLOOR = 0.80
DEV_MRR_FLOOR = 0.64
"""The default ranker on the dev half (186 tasks): recall@5 0.828, MRR 0.669 measured (BM25 before issue 33: 0.739,
0.589). About five tasks below, for a patch release of the stemmer or the model that moves a tie."""


@pytest.mark.parametrize(("groups", "top", "rank"), [
    ((frozenset({"a"}),), ("x", "a"), 2),
    ((frozenset({"a", "b"}),), ("b", "a"), 1),
    ((frozenset({"a"}), frozenset({"b"})), ("a", "x", "b"), 3),
    ((frozenset({"a"}), frozenset({"b"})), ("b", "a"), 2),
    ((frozenset({"a"}), frozenset({"b"})), ("a", "x"), None),
    ((frozenset({"a"}), frozenset({"b", "c"})), ("c", "x", "a"), 3),
])
def test_a_multi_tool_task_is_served_only_when_every_group_is(groups: tuple[frozenset[str], ...],
                                                             top: tuple[str, ...], rank: int | None) -> None:
    assert served_at(Task("t", frozenset().union(*groups), "multi", groups), top) == rank


def test_every_task_line_of_the_blind_set_reads_with_its_kind_and_groups() -> None:
    for half in ("dev", "heldout"):
        for task in tasks(BLIND / f"tasks_{half}.txt"):
            assert task.kind and (task.groups or task.kind == "policy"), task
            assert task.kind != "multi" or len(task.groups) >= 2, task


def test_probes_are_ranked_over_the_tools_the_probe_policy_leaves_visible() -> None:
    report = evaluate(Bm25Ranker(), tools_path=BLIND / "tools.json", tasks_path=BLIND / "tasks_dev.txt")
    probes = report.of_kind("policy")
    assert len(report.hidden) == 194  # the README's count: the policy file is read and applied
    assert probes.outcomes and report.hidden_returned == 0
    assert not any(name in report.hidden for o in probes.outcomes for name in o.top)
    assert any(name in report.hidden for o in report.outcomes if o.task.kind != "policy" for name in o.top), \
        "the other kinds are ranked over every tool"


def test_the_default_ranker_meets_the_floor_on_the_dev_half() -> None:
    report = evaluate(load_ranker("hybrid"), tools_path=BLIND / "tools.json", tasks_path=BLIND / "tasks_dev.txt")
    assert report.recall_at(5) >= DEV_RECALL_AT_5_FLOOR, report.summary()
    assert report.mrr >= DEV_MRR_FLOOR, report.summary()
