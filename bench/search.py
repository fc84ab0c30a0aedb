"""Tool search: what it costs and what it saves, over the 5,000-tool fleet (50 upstreams x 100 real tools).

    python bench/search.py [--queries N] [--out bench/results]

In process: the time to build the default (hybrid: BM25F and embeddings) and the BM25F index over the fleet's
5,000 tools (tokenizing and embedding, then again with both cached, as for a second visible set of one registry
version), the model's load time, the memory the index keeps, and search latency inside the index; beside them,
the same for `rank_bm25` and `tantivy` when they are installed, and the quality figures of `tests/search_eval`.
Through a real Triad (HTTP, loopback): `search_tools` latency p50/p99 for a search-mode client against one
`tools/list` page for a client in `all` mode, the first search of a registry version (the index build on a worker
thread), Triad's RSS before and after it, and the `tools/list` bytes a search-mode client receives against `all`.
Every process it starts is stopped at the end.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
import tracemalloc
from pathlib import Path
from typing import Any

import anyio
import httpx2

HERE = Path(__file__).resolve().parent
sys.path[:0] = [str(HERE.parent), str(HERE)]

from run import PY, RawSession, percentile, processes, start_triad, triad_config  # noqa: E402

from gateway.registry._descriptors import ExecutorRef, OwnerRef, ToolDescriptor  # noqa: E402
from gateway.search._bm25f import field_texts  # noqa: E402
from gateway.search._ranker import Bm25Ranker, SearchDocument, document_for, load_ranker  # noqa: E402
from gateway.search._tokens import words  # noqa: E402
from tests.search_eval.evaluate import evaluate, tasks  # noqa: E402

TOKEN = "bench-lister-token-0123456789"


def fleet_documents() -> list[SearchDocument]:
    sys.path.insert(0, str(HERE))
    from fleet_upstream import real_tools

    documents = []
    for upstream in range(50):
        for tool in real_tools(upstream):
            descriptor = ToolDescriptor(f"fleet{upstream:02d}__{tool['name']}", tool.get("description", ""),
                                        tool.get("inputSchema", {}), OwnerRef("mcp", f"fleet{upstream:02d}"),
                                        title=tool.get("title"),
                                        executor=ExecutorRef("mcp", f"fleet{upstream:02d}", tool["name"]))
            documents.append(document_for(descriptor))
    return documents


def in_process(queries: list[str]) -> dict[str, Any]:
    documents = fleet_documents()
    out: dict[str, Any] = {"tools": len(documents)}
    start = time.perf_counter()
    hybrid = load_ranker("hybrid")
    out["hybrid_model_load_ms"] = (time.perf_counter() - start) * 1000
    start = time.perf_counter()
    index = hybrid.index(documents)
    out["hybrid_build_ms"] = (time.perf_counter() - start) * 1000
    start = time.perf_counter()
    hybrid.index(documents[:4900])
    out["hybrid_build_cached_ms"] = (time.perf_counter() - start) * 1000
    out["hybrid_rank_p50_ms"], out["hybrid_rank_p99_ms"] = latency(lambda q: index.rank(q, 5), queries)
    ranker = Bm25Ranker()
    start = time.perf_counter()
    lexical = ranker.index(documents)
    out["bm25f_build_ms"] = (time.perf_counter() - start) * 1000
    start = time.perf_counter()
    ranker.index(documents[:4900])
    out["bm25f_build_cached_tokens_ms"] = (time.perf_counter() - start) * 1000
    tracemalloc.start()  # after the timings: it slows Python down several times
    fresh = Bm25Ranker()
    fresh.index(documents)
    out["bm25f_token_cache_mb"] = tracemalloc.get_traced_memory()[0] / 1e6
    before = tracemalloc.get_traced_memory()[0]
    kept = fresh.index(documents)  # noqa: F841 (alive while measured)
    out["bm25f_index_mb"] = (tracemalloc.get_traced_memory()[0] - before) / 1e6
    tracemalloc.stop()
    out["bm25f_rank_p50_ms"], out["bm25f_rank_p99_ms"] = latency(lambda q: lexical.rank(q, 5), queries)
    out.update(peers(documents, queries))
    report = evaluate(hybrid)
    out.update(quality_recall_at_1=report.recall_at(1), quality_recall_at_5=report.recall_at(5),
               quality_mrr=report.mrr)
    return out


def latency(run: Any, queries: list[str]) -> tuple[float, float]:
    times = []
    for query in queries:
        start = time.perf_counter()
        run(query)
        times.append((time.perf_counter() - start) * 1000)
    return percentile(times, 50), percentile(times, 99)


def peers(documents: list[SearchDocument], queries: list[str]) -> dict[str, Any]:
    """Other BM25 libraries on the same text, one field (`pip install '.[bench]'`)."""
    out: dict[str, Any] = {}
    ranker = Bm25Ranker()
    texts = [" ".join(field_texts(d.name, d.raw_name, d.upstream, d.title, d.description, d.parameters))
             for d in documents]
    try:
        import numpy as np
        from rank_bm25 import BM25Okapi

        start = time.perf_counter()
        okapi = BM25Okapi(ranker.tokens(texts), k1=1.2, b=0.75)
        out["rank_bm25_build_ms"] = (time.perf_counter() - start) * 1000
        out["rank_bm25_rank_p50_ms"], out["rank_bm25_rank_p99_ms"] = latency(
            lambda q: np.argsort(-okapi.get_scores(ranker.tokens([q])[0]))[:5], queries)
    except ImportError:
        pass
    try:
        import re

        import tantivy

        start = time.perf_counter()
        builder = tantivy.SchemaBuilder()
        builder.add_text_field("body", stored=False, tokenizer_name="en_stem")
        index = tantivy.Index(builder.build())
        writer = index.writer(heap_size=15_000_000, num_threads=1)
        for text in texts:
            writer.add_document(tantivy.Document(body=words(text)))
        writer.commit()
        index.reload()
        out["tantivy_build_ms"] = (time.perf_counter() - start) * 1000
        searcher = index.searcher()
        out["tantivy_rank_p50_ms"], out["tantivy_rank_p99_ms"] = latency(
            lambda q: searcher.search(index.parse_query(" ".join(re.findall(r"\w+", words(q))), ["body"]), 5),
            queries)
    except ImportError:
        pass
    return out


async def through_triad(tmp: Path, queries: list[str]) -> dict[str, Any]:
    fleet = {f"fleet{i:02d}": {"command": PY, "args": [str(HERE / "fleet_upstream.py"), "--real", str(i)]}
             for i in range(50)}
    config = triad_config(tmp, fleet, page_size=200, clients={"lister": {"token": TOKEN}, "finder": {
        "tools_mode": "search", "always_list": ["fleet00__*"]}}, anonymous="finder")
    out: dict[str, Any] = {}
    with processes() as started:
        triad, url = start_triad(tmp, config, "INFO")
        started.append(triad)
        await wait_ready(url, 50)
        async with httpx2.AsyncClient(timeout=120) as http:
            finder = await RawSession(http, url).open()
            lister = RawSession(http, url)
            lister.headers["Authorization"] = f"Bearer {TOKEN}"
            await lister.open()
            out["list_bytes_all"], out["list_tools_all"] = await listed_bytes(lister)
            out["list_bytes_search"], out["list_tools_search"] = await listed_bytes(finder)
            out["rss_before_search_mb"] = triad.memory("VmRSS")
            start = time.perf_counter()
            await search(finder, "take a screenshot of the page")
            out["first_search_ms"] = (time.perf_counter() - start) * 1000
            out["rss_after_search_mb"] = triad.memory("VmRSS")
            times = []
            for query in queries:
                start = time.perf_counter()
                await search(finder, query)
                times.append((time.perf_counter() - start) * 1000)
            out["search_p50_ms"], out["search_p99_ms"] = percentile(times, 50), percentile(times, 99)
            pages = []
            for _ in queries:
                start = time.perf_counter()
                await lister.request("tools/list")
                pages.append((time.perf_counter() - start) * 1000)
            out["list_page_p50_ms"], out["list_page_p99_ms"] = percentile(pages, 50), percentile(pages, 99)
    return out


async def wait_ready(url: str, count: int) -> None:
    """Until `count` upstreams are ready (`/readyz` shows them to a client with a token)."""
    async with httpx2.AsyncClient(headers={"Authorization": f"Bearer {TOKEN}"}) as http:
        with anyio.fail_after(300):
            while True:
                try:
                    body = (await http.get(url.replace("/mcp", "/readyz"))).json()
                    if sum(u["state"] == "ready" for u in body["upstreams"].values()) >= count:
                        return
                except httpx2.HTTPError:
                    pass
                await anyio.sleep(0.05)  # polling: /readyz has no push


async def search(session: RawSession, query: str) -> None:
    result = await session.request("tools/call", {"name": "search_tools", "arguments": {"query": query}})
    assert "structuredContent" in result, result


async def listed_bytes(session: RawSession) -> tuple[int, int]:
    size, count, cursor = 0, 0, None
    while True:
        page = await session.request("tools/list", {"cursor": cursor} if cursor else None)
        size += len(json.dumps(page["tools"], separators=(",", ":")).encode())
        count += len(page["tools"])
        if not (cursor := page.get("nextCursor")):
            return size, count


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--queries", type=int, default=600, help="searches timed (the evaluation's tasks, cycled)")
    parser.add_argument("--out", type=Path, default=HERE / "results")
    args = parser.parse_args()
    texts = [task.text for task in tasks()]
    queries = [texts[i % len(texts)] for i in range(args.queries)]
    rows = in_process(queries)
    with tempfile.TemporaryDirectory() as tmp:
        rows.update(await through_triad(Path(tmp), queries))
    rows["list_bytes_saved_pct"] = 100 * (1 - rows["list_bytes_search"] / rows["list_bytes_all"])
    for key, value in rows.items():
        print(f"| {key} | {value:.3f} |" if isinstance(value, float) else f"| {key} | {value} |")
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "search.json").write_text(json.dumps(rows, indent=2) + "\n")


if __name__ == "__main__":
    anyio.run(main)
