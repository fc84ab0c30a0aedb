"""The default ranker: BM25F (`_bm25f`) fused with the cosine of static word embeddings, and a query of several
clauses ranked clause by clause as well.

The embeddings bridge the vocabulary gap that words alone cannot ("reply" and "comment", "ticket" and "issue",
"go back" and "rollback"): WordLlama's `l2_supercat` model (256 dimensions, 16 MB), whose weights and tokenizer
ship inside the `wordllama` wheel from PyPI. It is loaded from the installed package with downloads disabled, so a
server without network starts it as any other; a missing file fails at start, never fetches. A document's vector
is the mean of its token vectors (no network, no GPU, ~0.1 ms per query).

A score is BM25F over its best (so 1 for the best lexical match) plus `DENSE_WEIGHT` times the cosine, for the
tools that share a word with the query (the others are not found, as with BM25 alone). A query of
several clauses ("find X, then do Y") is also ranked per clause, and the results take the whole query's best and
each clause's best in turn, so a multi-tool task finds a tool for each step.

Ownership: the `Dispatcher` builds one ranker per config (`load_ranker`); the model is read once, at the first
search, and is immutable; vectors are cached per document like tokens, and both caches are bounded.
"""

from __future__ import annotations

import re
import threading
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from gateway.search._bm25f import MAX_CACHED_TOKENS, Bm25fIndex, best
from gateway.search._tokens import words

if TYPE_CHECKING:
    from gateway.search._ranker import Bm25Ranker, SearchDocument

DENSE_WEIGHT = 1.5
"""The cosine's weight against BM25F scaled to its best match (1). A judgment call, tuned on the blind set's dev
half and on `tests/search_eval/` (R@5 there: 0.767 and 0.957 without it, 0.817 and 0.972 with it)."""
MAX_EMBEDDED_CHARS = 200
"""The description's first characters that are embedded (after the name and the title): past them, a long
description's mean vector drifts towards the average of all tools."""
WORDLLAMA_CONFIG = "l2_supercat"
_CLAUSES = re.compile(r"(?:,?\s+and then\s+|,\s*then\s+|\s+then\s+|;\s*|,\s*and\s+|\s+and\s+)", re.IGNORECASE)
MAX_CLAUSES = 4
CONTEXT_WEIGHT = 0.5
"""A clause is ranked with the whole query's scores at this weight added: "sync the ones that drifted" alone has
lost the "Argo" of "list the Argo apps and ..."."""


class Embedder:
    """WordLlama's static embeddings, read from the installed wheel (no download) at the first search: a daemon
    whose clients never search (or `triad check`) does not hold the model and its libraries (about 200 MB)."""

    def __init__(self) -> None:
        self._model: Any = None
        self._loading = threading.Lock()

    def _loaded(self) -> Any:
        with self._loading:  # indexes are built on worker threads: one load
            if self._model is None:
                import wordllama

                self._model = wordllama.WordLlama.load(WORDLLAMA_CONFIG, cache_dir=Path(wordllama.__file__).parent,
                                                       disable_download=True)
            return self._model

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        """Unit vectors, one row per text."""
        if not texts:
            return np.zeros((0, 256), dtype=np.float32)
        return np.asarray(self._loaded().embed(list(texts), norm=True), dtype=np.float32)


def embedded_text(document: SearchDocument) -> str:
    return f"{words(document.raw_name)}. {document.title}. {document.description[:MAX_EMBEDDED_CHARS]}"


def clauses(query: str) -> list[str]:
    """The steps of a query of several ("list the apps and sync the drifted ones"), or none for one step."""
    found = [c.strip() for c in _CLAUSES.split(query) if c and c.strip()]
    return found[:MAX_CLAUSES] if len(found) > 1 else []


class HybridRanker:
    """BM25F plus embeddings; a query of several clauses is ranked clause by clause too."""

    def __init__(self, lexical: Bm25Ranker, embedder: Embedder) -> None:
        self._lexical, self._embedder = lexical, embedder
        self._vectors: dict[SearchDocument, np.ndarray] = {}

    def index(self, documents: Sequence[SearchDocument]) -> HybridIndex:
        missing = [d for d in dict.fromkeys(documents) if d not in self._vectors]
        if len(self._vectors) + len(missing) > MAX_CACHED_TOKENS:
            self._vectors = {}
            missing = list(dict.fromkeys(documents))
        for document, vector in zip(missing, self._embedder.embed([embedded_text(d) for d in missing]), strict=True):
            self._vectors[document] = vector
        vectors = np.stack([self._vectors[d] for d in documents]) if documents else np.zeros((0, 256), np.float32)
        return HybridIndex(self._lexical.lexical_index(documents), vectors, self._embedder)


class HybridIndex:
    def __init__(self, lexical: Bm25fIndex, vectors: np.ndarray, embedder: Embedder) -> None:
        self._lexical, self._vectors, self._embedder = lexical, vectors, embedder

    def _scores(self, query: str) -> np.ndarray | None:
        lexical = self._lexical.scores(query)
        if lexical is None:  # no word of the query is any tool's: nothing matches (a vector alone is noise)
            return None
        peak = float(lexical.max())
        # einsum, not `@`: BLAS threads spin against the tokenizer's on a busy machine (12 ms against 0.15 ms)
        dense = np.einsum("ij,j->i", self._vectors, self._embedder.embed([query])[0])
        fused: np.ndarray = (lexical / peak if peak > 0 else lexical) + DENSE_WEIGHT * dense
        # only tools that share a word with the query are found (the cosine reorders them; alone it is noise: on
        # the dev half, letting it find tools without a shared word changed no result)
        matched: np.ndarray = np.where(lexical > 0, np.maximum(fused, 1e-6), 0.0).astype(np.float32)
        return matched

    def rank(self, query: str, limit: int) -> Sequence[tuple[int, float]]:
        scores = self._scores(query)
        if scores is None:
            return []
        whole = best(scores, limit)
        steps = [s + CONTEXT_WEIGHT * scores for s in (self._scores(c) for c in clauses(query)) if s is not None]
        if not steps:
            return whole
        rankings = [whole, *(best(s, limit) for s in steps)]
        merged: dict[int, float] = {}
        for row in range(limit):
            for ranking in rankings:
                if row < len(ranking) and ranking[row][0] not in merged:
                    merged[ranking[row][0]] = float(scores[ranking[row][0]])
        return list(merged.items())[:limit]
