"""The tool-search quality evaluation: rank every task of `tasks.txt` over the tools of `tools.json`.

    python -m tests.search_eval.evaluate [--ranker bm25|module:attr] [--failures]

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


def corpus() -> list[SearchDocument]:
    """Every collected tool as Triad would expose it behind several upstreams: `<server>__<tool>`."""
    documents = []
    for server in json.loads((HERE / "tools.json").read_text())["servers"]:
        for tool in server["tools"]:
            descriptor = ToolDescriptor(
                name=f"{server['server']}__{tool['name']}", description=tool.get("description", ""),
                input_schema=tool.get("inputSchema", {}), owner=OwnerRef("mcp", server["server"]),
                title=tool.get("title") or (tool.get("annotations") or {}).get("title"),
                executor=ExecutorRef("mcp", server["server"], tool["name"]))
            documents.append(document_for(descriptor))
    return documents


def tasks() -> list[Task]:
    found = []
    for line in (HERE / "tasks.txt").read_text().splitlines():
        if not line.strip() or line.startswith("#"):
            continue
        text, _, expected = line.rpartition("|")
        found.append(Task(text.strip(), frozenset(e.strip().replace("/", "__") for e in expected.split(","))))
    return found


def evaluate(ranker: Ranker, depth: int = 10) -> Report:
    documents = corpus()
    index = ranker.index(documents)
    outcomes = []
    for task in tasks():
        top = tuple(documents[i].name for i, _ in index.rank(task.text, depth))
        rank = next((r for r, name in enumerate(top, 1) if name in task.expected), None)
        outcomes.append(Outcome(task, rank, top))
    return Report(tuple(outcomes))


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--ranker", default="bm25")
    parser.add_argument("--failures", action="store_true")
    args = parser.parse_args()
    report = evaluate(load_ranker(args.ranker))
    print(f"{len(corpus())} tools, {len(report.outcomes)} tasks: recall@1 {report.recall_at(1):.3f}, "
          f"recall@5 {report.recall_at(5):.3f}, MRR {report.mrr:.3f}")
    if args.failures:
        for outcome in report.failures():
            print(f"- {outcome.task.text!r}: rank {outcome.rank}; expected {sorted(outcome.task.expected)}; "
                  f"top {list(outcome.top[:3])}")


if __name__ == "__main__":
    main()
