"""Tool search without a daemon: quality on real tool definitions, the index cache, scores from visible tools only,
the ranker plugin point and its config check."""

from __future__ import annotations

import subprocess
from collections.abc import Mapping, Sequence
from pathlib import Path

import anyio
import pytest

from gateway.registry._descriptors import ExecutorRef, OwnerRef, ToolDescriptor
from gateway.search._ranker import Bm25Ranker, RankedIndex, SearchDocument, SearchIndexes, load_ranker
from gateway.search._tokens import words
from tests.conftest import TRIAD, write_config
from tests.search_eval.evaluate import corpus, evaluate, tasks

RECALL_AT_5_FLOOR = 0.92
RECALL_AT_1_FLOOR = 0.72
MRR_FLOOR = 0.80
"""Measured on the committed data (362 tools, 141 tasks) with BM25F alone (`bm25`): recall@5 0.957, recall@1
0.773, MRR 0.854 (BM25 before issue 33: 0.950, 0.766, 0.845; the default `hybrid`: 0.972, 0.794, 0.866). Each floor
sits about three points (four or five tasks) below, so that a bm25s or Snowball patch release that moves a tie or
two still passes, while losing stemming (recall@5 0.915), the name and title weights (recall@1 0.738, MRR 0.829)
or the issue's target of recall@5 0.9 fails."""


def tool(name: str, description: str, upstream: str = "up", **properties: str) -> ToolDescriptor:
    schema = {"type": "object", "properties": {key: {"type": "string", "description": text}
                                               for key, text in properties.items()}}
    return ToolDescriptor(f"{upstream}__{name}", description, schema, OwnerRef("mcp", upstream),
                          executor=ExecutorRef("mcp", upstream, name))


def test_the_evaluation_has_over_300_real_tools_with_their_sources() -> None:
    import json

    servers = json.loads((Path(__file__).parent / "search_eval" / "tools.json").read_text())["servers"]
    assert all(s["package"] and s["registry"] in ("npm", "pypi") and s["version"] for s in servers)
    assert len({d.name for d in corpus()}) >= 300
    names = {d.name for d in corpus()}
    missing = {name for task in tasks() for name in task.expected if name not in names}
    assert not missing, f"tasks expect tools the data does not have: {sorted(missing)}"


def test_search_quality_meets_the_floor() -> None:
    report = evaluate(Bm25Ranker())
    failed = "\n".join(f"  {o.task.text!r}: rank {o.rank}, top {list(o.top[:3])}" for o in report.failures())
    summary = (f"recall@1 {report.recall_at(1):.3f}, recall@5 {report.recall_at(5):.3f}, MRR {report.mrr:.3f}; "
               f"not in the first five:\n{failed}")
    assert report.recall_at(5) >= RECALL_AT_5_FLOOR, summary
    assert report.recall_at(1) >= RECALL_AT_1_FLOOR, summary
    assert report.mrr >= MRR_FLOOR, summary


def test_identifiers_are_split_into_words() -> None:
    assert words("get_file_info") == "get file info"
    assert words("listAllowedDirectories").lower() == "list allowed directories"
    assert words("API-post-search") == "API post search"
    assert words("HTTPServer.start") == "HTTP Server start"


def test_parameters_and_upstream_names_are_searched() -> None:
    descriptors = {d.name: d for d in (tool("run", "Runs it.", "alpha", zeitgeist="The zeitgeist to use."),
                                       tool("go", "Goes.", "weatherly"))}
    found = anyio.run(_search, descriptors, "zeitgeist")
    assert [name for name, _ in found] == ["alpha__run"]
    assert [name for name, _ in anyio.run(_search, descriptors, "weatherly")] == ["weatherly__go"]


async def _search(descriptors: Mapping[str, ToolDescriptor], query: str, version: int = 1,
                  indexes: SearchIndexes | None = None) -> list[tuple[str, float]]:
    indexes = indexes or SearchIndexes(Bm25Ranker())
    found = await indexes.get(version, frozenset(descriptors), lambda: descriptors)
    return [(found.documents[i].name, score) for i, score in found.index.rank(query, 10)]


def test_scores_come_from_the_visible_tools_only() -> None:
    """A caller's scores are those of a registry without the tools it may not see: a hidden tool neither shows
    nor moves term statistics (here, it would make `backup` common and lower its weight)."""
    visible = {d.name: d for d in (tool("backup", "Backup the database."), tool("list", "List the tables."))}
    hidden = {f"up__h{i}": tool(f"h{i}", "Backup everything, backup now.") for i in range(5)}
    alone = anyio.run(_search, visible, "backup the database")
    indexes = SearchIndexes(Bm25Ranker())
    anyio.run(_search, {**visible, **hidden}, "backup", 1, indexes)  # the same registry version, another view
    narrowed = anyio.run(_search, visible, "backup the database", 1, indexes)
    assert narrowed == alone
    assert anyio.run(_search, {**visible, **hidden}, "backup the database")[0][1] != alone[0][1]


class CountingRanker:
    def __init__(self) -> None:
        self.built: list[int] = []
        self.inner = Bm25Ranker()

    def index(self, documents: Sequence[SearchDocument]) -> RankedIndex:
        self.built.append(len(documents))
        return self.inner.index(documents)


@pytest.mark.anyio
async def test_an_index_is_built_once_per_version_and_visible_set() -> None:
    ranker = CountingRanker()
    indexes = SearchIndexes(ranker)
    tools = {d.name: d for d in (tool("a", "Alpha."), tool("b", "Beta."), tool("c", "Gamma."))}
    some = {name: d for name, d in tools.items() if name != "up__c"}
    async with anyio.create_task_group() as tg:  # concurrent searches wait for the one build
        for _ in range(5):
            tg.start_soon(_search, tools, "alpha", 1, indexes)
    await _search(tools, "beta", 1, indexes)
    await _search(some, "beta", 1, indexes)
    assert ranker.built == [3, 2]
    assert [name for name, _ in await _search({**tools, "up__d": tool("d", "Alpha too.")}, "alpha", 2, indexes)] \
        == ["up__a", "up__d"]
    assert ranker.built == [3, 2, 4]


def test_a_ranker_plugin_replaces_bm25() -> None:
    ranker = load_ranker("tests.plugins.sample_ranker:ReverseNameRanker")
    descriptors = {d.name: d for d in (tool("a", "Alpha."), tool("b", "Beta."))}
    indexes = SearchIndexes(ranker)
    assert [name for name, _ in anyio.run(_search, descriptors, "anything", 1, indexes)] == ["up__b", "up__a"]


def test_check_names_a_ranker_that_cannot_load(tmp_path: Path) -> None:
    config = write_config(tmp_path, {"search": {"ranker": "no_such_module_for_triad:Ranker"}})
    done = subprocess.run([*TRIAD, "check", "-c", str(config)], capture_output=True, text=True, timeout=60)
    assert done.returncode == 1
    assert "search.ranker" in done.stderr and "no_such_module_for_triad" in done.stderr
    bad = write_config(tmp_path, {"clients": {"ide": {"tools_mode": "lazy"}}}, "bad.yaml")
    done = subprocess.run([*TRIAD, "check", "-c", str(bad)], capture_output=True, text=True, timeout=60)
    assert done.returncode == 1 and "clients.ide.tools_mode" in done.stderr


@pytest.mark.parametrize("query", ["", "zzzz qqqq"])
def test_a_query_without_known_words_finds_nothing(query: str) -> None:
    descriptors = {d.name: d for d in (tool("a", "Alpha."),)}
    assert anyio.run(_search, descriptors, query) == []
