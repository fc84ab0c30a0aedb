"""The tool-search quality evaluation: rank every task of `tasks.txt` over the tools of `tools.json`.

    python -m tests.search_eval.evaluate [--ranker bm25|module:attr] [--failures] [--tools FILE --tasks FILE]

`--tools`/`--tasks` read another set, e.g. the blind one (`tests/search_eval_blind/`), whose task lines carry a
kind first: `kind | task | tools` (see its README). A `policy.yaml` beside the tasks (or `--policy FILE`) is the
probe policy: a `policy` task is ranked over the tools it leaves visible only (policy before ranking, as Triad
does), and every result of a probe is checked against what it hides.

Prints recall@1, @5, @10 and MRR, in all and by kind. A task is found at rank r when any of its expected tools is
at r; a multi-tool task when a tool of each of its groups is within the first r (r is the deepest group's first
hit). A probe that no visible tool serves (`-`) has no rank: it only counts hidden tools returned. --failures
lists each task not found in the first five, with what came first instead.
"""

from __future__ import annotations

import argparse
import json
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path

import yaml

from gateway.registry._descriptors import ExecutorRef, OwnerRef, ToolDescriptor
from gateway.search._ranker import Ranker, SearchDocument, document_for, load_ranker
from policy import ToolFacts, compile_patterns

HERE = Path(__file__).resolve().parent


@dataclass(frozen=True)
class Task:
    text: str
    expected: frozenset[str]
    """Any of these serves the task (for a blind-set task, the union of its groups)."""
    kind: str = ""
    groups: tuple[frozenset[str], ...] = ()
    """Blind-set tasks: a tool from each group is needed (several groups: a multi-tool task; none: no visible tool)."""


@dataclass(frozen=True)
class Outcome:
    task: Task
    rank: int | None
    """1-based rank by which the task is served (its first expected tool; for several groups, the deepest group's
    first tool), None when it is not in the results."""
    top: tuple[str, ...]
    hidden_returned: tuple[str, ...] = ()
    """Results the probe policy hides (for a `policy` task; always empty when policy comes before ranking)."""


@dataclass(frozen=True)
class Report:
    outcomes: tuple[Outcome, ...]
    """Every task's; a probe without an expected tool has no rank and stays out of the figures below."""
    hidden: frozenset[str] = field(default_factory=frozenset)

    @property
    def ranked(self) -> tuple[Outcome, ...]:
        return tuple(o for o in self.outcomes if o.task.expected)

    def recall_at(self, k: int) -> float:
        ranked = self.ranked
        return sum(1 for o in ranked if o.rank is not None and o.rank <= k) / max(len(ranked), 1)

    @property
    def mrr(self) -> float:
        ranked = self.ranked
        return sum(1 / o.rank for o in ranked if o.rank is not None) / max(len(ranked), 1)

    @property
    def hidden_returned(self) -> int:
        return sum(len(o.hidden_returned) for o in self.outcomes)

    def of_kind(self, kind: str) -> Report:
        return Report(tuple(o for o in self.outcomes if o.task.kind == kind), self.hidden)

    def kinds(self) -> list[str]:
        return list(dict.fromkeys(o.task.kind for o in self.outcomes))

    def failures(self, k: int = 5) -> list[Outcome]:
        return [o for o in self.ranked if o.rank is None or o.rank > k]

    def summary(self) -> str:
        return (f"recall@1 {self.recall_at(1):.3f}, recall@5 {self.recall_at(5):.3f}, "
                f"recall@10 {self.recall_at(10):.3f}, MRR {self.mrr:.3f}")


def corpus(path: Path = HERE / "tools.json") -> list[SearchDocument]:
    """Every collected tool as Triad would expose it behind several upstreams: `<server>__<tool>`."""
    documents = []
    for server in json.loads(path.read_text())["servers"]:
        for tool in server["tools"]:
            descriptor = ToolDescriptor(
                name=f"{server['server']}__{tool['name']}", description=tool.get("description", ""),
                input_schema=tool.get("inputSchema", {}), owner=OwnerRef("mcp", server["server"]),
                title=tool.get("title") or (tool.get("annotations") or {}).get("title"),
                executor=ExecutorRef("mcp", server["server"], tool["name"]))
            documents.append(document_for(descriptor))
    return documents


def tasks(path: Path = HERE / "tasks.txt") -> list[Task]:
    found = []
    for line in path.read_text().splitlines():
        if not line.strip() or line.startswith("#"):
            continue
        if line.count("|") == 2:  # the blind set's `kind | task | group + group`, a group `a/x, b/y` or `-`
            kind, text, expected = (field.strip() for field in line.split("|"))
            groups = tuple(frozenset(e.strip().replace("/", "__") for e in group.split(","))
                           for group in expected.split("+") if group.strip() != "-")
            found.append(Task(text, frozenset().union(*groups), kind, groups))
            continue
        text, _, expected = line.rpartition("|")
        found.append(Task(text.strip(), frozenset(e.strip().replace("/", "__") for e in expected.split(","))))
    return found


def hidden_by(policy_path: Path, tools_path: Path) -> frozenset[str]:
    """The tools a probe policy's global deny list (`policy.profile.deny`) hides, by Triad's own matchers."""
    deny = compile_patterns(yaml.safe_load(policy_path.read_text())["policy"]["profile"]["deny"], {})
    found = set()
    for server in json.loads(tools_path.read_text())["servers"]:
        for tool in server["tools"]:
            name = f"{server['server']}__{tool['name']}"
            facts = ToolFacts.from_annotations(name, server["server"], tool["name"], tool.get("annotations"))
            if any(m.matches(facts) for m in deny):
                found.add(name)
    return frozenset(found)


def served_at(task: Task, top: Iterable[str]) -> int | None:
    """The rank by which `top` serves `task`: a tool of each group (or, without groups, any expected tool)."""
    groups = task.groups or (task.expected,)
    ranks = [next((r for r, name in enumerate(top, 1) if name in group), None) for group in groups]
    return None if None in ranks or not ranks else max(r for r in ranks if r is not None)


def evaluate(ranker: Ranker, depth: int = 10, tools_path: Path = HERE / "tools.json",
             tasks_path: Path = HERE / "tasks.txt", policy_path: Path | None = None) -> Report:
    """Rank every task; `policy_path` (default: a `policy.yaml` beside the tasks) is the probes' policy."""
    if policy_path is None and (tasks_path.parent / "policy.yaml").exists():
        policy_path = tasks_path.parent / "policy.yaml"
    documents = corpus(tools_path)
    index = ranker.index(documents)
    hidden = hidden_by(policy_path, tools_path) if policy_path is not None else frozenset()
    visible = [d for d in documents if d.name not in hidden]
    probe_index = ranker.index(visible) if hidden else index
    outcomes = []
    for task in tasks(tasks_path):
        probe = task.kind == "policy"
        pool, searched = (visible, probe_index) if probe else (documents, index)
        top = tuple(pool[i].name for i, _ in searched.rank(task.text, depth))
        outcomes.append(Outcome(task, served_at(task, top), top,
                                tuple(n for n in top if n in hidden) if probe else ()))
    return Report(tuple(outcomes), hidden)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--ranker", default="bm25")
    parser.add_argument("--failures", action="store_true")
    parser.add_argument("--tools", type=Path, default=HERE / "tools.json")
    parser.add_argument("--tasks", type=Path, default=HERE / "tasks.txt")
    parser.add_argument("--policy", type=Path, default=None, help="the probes' policy (default: beside the tasks)")
    args = parser.parse_args()
    report = evaluate(load_ranker(args.ranker), tools_path=args.tools, tasks_path=args.tasks,
                      policy_path=args.policy)
    print(f"{len(corpus(args.tools))} tools, {len(report.outcomes)} tasks ({len(report.ranked)} ranked): "
          f"{report.summary()}")
    if len(report.kinds()) > 1:
        print("| kind | tasks | R@1 | R@5 | R@10 | MRR |\n|---|---|---|---|---|---|")
        for kind in report.kinds():
            part = report.of_kind(kind)
            print(f"| {kind} | {len(part.ranked)} | {part.recall_at(1):.3f} | {part.recall_at(5):.3f} | "
                  f"{part.recall_at(10):.3f} | {part.mrr:.3f} |")
    if report.hidden:
        print(f"probe policy hides {len(report.hidden)} tools; hidden tools returned to probes: "
              f"{report.hidden_returned}")
    if args.failures:
        for outcome in report.failures():
            print(f"- {outcome.task.text!r}: rank {outcome.rank}; expected {sorted(outcome.task.expected)}; "
                  f"top {list(outcome.top[:3])}")


if __name__ == "__main__":
    main()
