"""A ranker plugin for the tests (`search.ranker: tests.plugins.sample_ranker:ReverseNameRanker`): every tool
matches, in reverse name order, so a test can tell it from BM25."""

from __future__ import annotations

from collections.abc import Sequence

from gateway.search._ranker import SearchDocument


class _Index:
    def __init__(self, documents: Sequence[SearchDocument]) -> None:
        self._order = sorted(range(len(documents)), key=lambda i: documents[i].name, reverse=True)

    def rank(self, query: str, limit: int) -> list[tuple[int, float]]:
        return [(i, 1.0) for i in self._order[:limit]]


class ReverseNameRanker:
    def index(self, documents: Sequence[SearchDocument]) -> _Index:
        return _Index(documents)
