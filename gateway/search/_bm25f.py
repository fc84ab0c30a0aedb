"""Triad's default ranker: BM25F over a tool's fields, with pseudo-relevance feedback over the tool corpus.

Each field (the tool's name words, title, description, parameters, upstream) has a weight and its own length
normalisation; a term's weighted frequencies over the fields are summed before BM25's saturation (Robertson and
Zaragoza's BM25F), so a word in the name counts more than one in a parameter's text, and the upstream's name is a
weak field of its own ("document" in `aws-docs` no longer ranks every tool of that upstream above the one that
does the task). Query words that are argument values (ids, paths, quoted text) weigh less than the task's words.

A vocabulary gap (the query says "reply", the tool "comment") is bridged offline from the indexed tools alone:
the first ranking's best tools lend their name and title words to a second one (RM3-style feedback), weighted
below the query's own words. Nothing is downloaded or shipped beside the code.

Term statistics come from the indexed documents only (a caller's visible tools: policy before ranking).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import Stemmer

from gateway.search._tokens import query_tokens, tokens

K1 = 1.2


@dataclass(frozen=True, slots=True)
class Field:
    weight: float
    b: float
    """Length normalisation: 0 scores a term alike in a short and a long field, 1 fully by length."""


FIELDS = {"name": Field(3.0, 0.5), "title": Field(2.0, 0.5), "description": Field(1.0, 0.75),
          "parameters": Field(0.5, 0.75), "upstream": Field(0.5, 0.0)}
"""Judgment calls, tuned on the blind set's dev half and on `tests/search_eval/` (never on the held-out half)."""
VALUE_WEIGHT = 0.3
"""A query's argument-value words (ids, paths, quoted text) against its own words once."""
MAX_CACHED_TOKENS = 50_000
"""Documents whose tokens the ranker keeps (ten fleets of 5,000 tools); past this it starts over."""

FieldTokens = tuple[tuple[str, ...], ...]
"""A document's tokens, field by field, in the order of `FIELDS`."""


def field_texts(name: str, raw_name: str, upstream: str, title: str, description: str,
                parameters: Sequence[tuple[str, str]]) -> tuple[str, ...]:
    """The text of each field of `FIELDS`: the name is the upstream's own and, when renamed, the exposed one less
    the upstream's prefix."""
    exposed = name.split("__", 1)[-1] if upstream else name
    names = raw_name if exposed == raw_name else f"{raw_name} {exposed}"
    return (names, title, description, " ".join(f"{n} {t}" for n, t in parameters), upstream)


class Bm25fIndex:
    """Postings per term, as flat arrays (`_start[t]:_start[t + 1]` are term t's): the documents it is in and its
    saturated, IDF-weighted score in each. Built with numpy from one pass over the tokens."""

    def __init__(self, corpus: Sequence[FieldTokens], stemmer: Stemmer.Stemmer) -> None:
        self._stem = stemmer.stemWords
        self._size = size = len(corpus)
        specs = list(FIELDS.values())
        lengths = np.array([[len(field) for field in document] for document in corpus], dtype=np.float32)
        lengths = lengths.reshape(size, len(specs))
        averages = np.maximum(lengths.mean(axis=0), 1.0) if size else np.ones(len(specs), dtype=np.float32)
        weight = np.array([f.weight for f in specs], dtype=np.float32)
        b = np.array([f.b for f in specs], dtype=np.float32)
        segment_weight = weight / (1 - b + b * lengths / averages)  # (document, field): one token's weight there
        vocabulary: dict[str, int] = {}
        ids = [vocabulary.setdefault(t, len(vocabulary)) for document in corpus for field in document for t in field]
        counts = lengths.astype(np.int64).ravel()
        documents = np.repeat(np.repeat(np.arange(size, dtype=np.int64), len(specs)), counts)
        key = np.asarray(ids, dtype=np.int64) * max(size, 1) + documents
        pairs, inverse = np.unique(key, return_inverse=True)
        tf = np.bincount(inverse, weights=np.repeat(segment_weight.ravel(), counts)).astype(np.float32)
        terms = pairs // max(size, 1)
        df = np.bincount(terms, minlength=len(vocabulary)).astype(np.float32)
        idf = np.log1p((size - df + 0.5) / (df + 0.5)).astype(np.float32)
        self._vocabulary = vocabulary
        self._start = np.concatenate(([0], np.cumsum(df.astype(np.int64))))
        self._documents = (pairs % max(size, 1)).astype(np.int32)
        self._weights = idf[terms] * tf / (K1 + tf)

    def scores(self, query: str) -> np.ndarray | None:
        """Every document's score for `query`, or None when no word of it is indexed."""
        words, values = query_tokens(query, self._stem)
        weights: dict[int, float] = {}
        for word, weight in [(t, 1.0) for t in words] + [(t, VALUE_WEIGHT) for t in values]:
            if (found := self._vocabulary.get(word)) is not None:
                weights[found] = weights.get(found, 0.0) + weight
        if not weights or not self._size:
            return None
        scores = np.zeros(self._size, dtype=np.float32)
        for term, weight in weights.items():
            start, end = self._start[term], self._start[term + 1]
            scores[self._documents[start:end]] += weight * self._weights[start:end]
        return scores

    def rank(self, query: str, limit: int) -> Sequence[tuple[int, float]]:
        scores = self.scores(query)
        return [] if scores is None else best(scores, limit)


def best(scores: np.ndarray, limit: int) -> list[tuple[int, float]]:
    """The `limit` best (position, score) with a positive score, best first; ties by position. In numpy: a caller
    narrowed by a run-level list ranks every visible tool (`find`), thousands."""
    found = np.flatnonzero(scores > 0)
    if limit <= 0 or not len(found):
        return []
    if len(found) > limit:
        found = found[np.argpartition(-scores[found], limit - 1)[:limit]]
    chosen = found[np.lexsort((found, -scores[found]))]
    return list(zip(chosen.tolist(), scores[chosen].astype(float).tolist(), strict=True))


def document_tokens(texts: Sequence[tuple[str, ...]], stemmer: Stemmer.Stemmer) -> list[FieldTokens]:
    stem = stemmer.stemWords
    return [tuple(tuple(tokens(text, stem, whole=f == 0)) for f, text in enumerate(fields)) for fields in texts]
