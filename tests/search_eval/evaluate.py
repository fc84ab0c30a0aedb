"""The tool-search quality evaluation: rank every task of `tasks.txt` over the tools of `tools.json`.

    python -m tests.search_eval.evaluate [--ranker bm25|module:attr] [--failures] [--tools FILE --tasks FILE]

`--tools`/`--tasks` read another set, e.g. the blind one (`tests/search_eval_blind/`), whose task lines carry a
kind first: `kind | task | tools` (see its README).

Prints recall@1, recall@5 and MRR (a task counts as found at rank r when any of its expected tools is at r), and
with --failures each task whose expected tools are not in the first five, with what came first instead.
"""

from __future__ import annotations

import argparse
import json
from dataclasses import dataclass
from pathlib import Path

from gateway.registry._descriptors import ExecutorRef, OwnerRef, ToolDescriptor
from gateway.search._ranker import Ranker, SearchDocument, document_for, load_ranker

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
    """1-based rank of the first expected tool, None when it is not in the results."""
    top: tuple[str, ...]


@dataclass(frozen=True)
class Report:
    outcomes: tuple[Outcome, ...]

    def recall_at(self, k: int) -> float:
        return sum(1 for o in self.outcomes if o.rank is not None and o.rank <= k) / len(self.outcomes)

    @property
    def mrr(self) -> float:
        return sum(1 / o.rank for o in self.outcomes if o.rank is not None) / len(self.outcomes)

    def failures(self, k: int = 5) -> list[Outcome]:
        return [o for o in self.outcomes if o.rank is None or o.rank > k]


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


def evaluate(ranker: Ranker, depth: int = 10, tools_path: Path = HERE / "tools.json",
             tasks_path: Path = HERE / "tasks.txt") -> Report:
    documents = corpus(tools_path)
    index = ranker.index(documents)
    outcomes = []
    for task in tasks(tasks_path):
        top = tuple(documents[i].name for i, _ in index.rank(task.text, depth))
        rank = next((r for r, name in enumerate(top, 1) if name in task.expected), None)
        outcomes.append(Outcome(task, rank, top))
    return Report(tuple(outcomes))


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--ranker", default="bm25")
    parser.add_argument("--failures", action="store_true")
    parser.add_argument("--tools", type=Path, default=HERE / "tools.json")
    parser.add_argument("--tasks", type=Path, default=HERE / "tasks.txt")
    args = parser.parse_args()
    report = evaluate(load_ranker(args.ranker), tools_path=args.tools, tasks_path=args.tasks)
    print(f"{len(corpus(args.tools))} tools, {len(report.outcomes)} tasks: recall@1 {report.recall_at(1):.3f}, "
          f"recall@5 {report.recall_at(5):.3f}, MRR {report.mrr:.3f}")
    if args.failures:
        for outcome in report.failures():
            print(f"- {outcome.task.text!r}: rank {outcome.rank}; expected {sorted(outcome.task.expected)}; "
                  f"top {list(outcome.top[:3])}")


if __name__ == "__main__":
    main()
