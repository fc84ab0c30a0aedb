"""Tool search: the documents a tool is found by, the ranker seam, Triad's BM25 ranker, and the index cache.

A `SearchDocument` is what a ranker sees of one tool: its exposed name, the upstream's own name for it, title,
description, parameter names and descriptions, and the upstream's name. A `Ranker` turns the documents a caller
may see into a `RankedIndex`; `rank(query, limit)` gives positions into those documents with scores. Policy
applies before ranking: an index is built over one caller's visible tools only, so a hidden tool can never be
found, named or counted, nor move the scores of the tools that are found (term statistics come from the visible
documents alone: a caller's scores are the ones it would get from a registry without the hidden tools).

Triad's ranker is BM25 (`bm25s`, numpy sparse matrices) over identifier-aware tokens: `get_file_info`,
`listAllowedDirectories` and `API-post-search` are split into words, stemmed (Snowball) and stripped of English
stop words; the name and title count more than the description. A deployment plugs in its own ranker
(embeddings, say) with `search.ranker: module:attr`, which names a class or factory taking no arguments.

Ownership: the `Dispatcher` owns one `SearchIndexes`; indexes are built on a worker thread, once per
(registry version, visible set), the first time a search needs one, and kept in a small LRU cache. Nothing on
the call path of an upstream tool touches it.
"""

from __future__ import annotations

import importlib
import logging
import re
from collections import OrderedDict
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

import anyio
import bm25s
import numpy as np
import Stemmer

from consumers import JSON
from gateway.registry import ToolDescriptor

logging.getLogger("bm25s").setLevel(logging.WARNING)  # bm25s 0.3 sets DEBUG on import: a line per index built

MAX_CACHED_INDEXES = 16
"""Indexes kept at once, each for one (registry version, visible set): callers with the same policy share one.
A judgment call: a few policies times a few run-level lists in use; an index of 5,000 tools is about 1 MB."""
MAX_DOCUMENT_CHARS = 4096
"""Text of one tool that is indexed; past this, an upstream's very long descriptions only add noise (and memory)."""
MAX_PARAMETERS = 64
"""Parameters of one tool whose names and descriptions are indexed (nested objects count too)."""
MAX_CACHED_TOKENS = 50_000
"""Documents whose tokens the BM25 ranker keeps (ten fleets of 5,000 tools); past this it starts over."""
NAME_WEIGHT = 3
TITLE_WEIGHT = 2
"""How many times the name words and the title count against the description's words once (a simple BM25F)."""

_CAMEL = re.compile(r"(?<=[a-z0-9])(?=[A-Z])|(?<=[A-Z])(?=[A-Z][a-z])")
_SEPARATORS = re.compile(r"[_\-./:]+")


@dataclass(frozen=True, slots=True)
class SearchDocument:
    """One tool as a ranker sees it."""

    name: str
    """The exposed name: what the caller calls it by."""
    raw_name: str
    upstream: str
    title: str
    description: str
    parameters: tuple[tuple[str, str], ...]
    """(name, description) of each parameter, nested ones included."""

    def text(self) -> str:
        """Everything in one string, for rankers that want plain text (embeddings)."""
        params = "; ".join(f"{name}: {text}" if text else name for name, text in self.parameters)
        return "\n".join(part for part in (self.raw_name, self.title, self.description, params, self.upstream)
                         if part)


def document_for(descriptor: ToolDescriptor) -> SearchDocument:
    executor = descriptor.executor
    upstream = executor.id if executor is not None and executor.kind == "mcp" else ""
    raw = executor.tool if executor is not None and executor.kind == "mcp" else descriptor.name
    return SearchDocument(descriptor.name, raw, upstream, descriptor.title or "",
                          descriptor.description[:MAX_DOCUMENT_CHARS],
                          tuple(_parameters(descriptor.input_schema, [])))


def _parameters(schema: JSON, found: list[tuple[str, str]], depth: int = 0) -> list[tuple[str, str]]:
    if not isinstance(schema, Mapping) or depth > 3:
        return found
    properties = schema.get("properties")
    if isinstance(properties, Mapping):
        for name, spec in properties.items():
            if len(found) >= MAX_PARAMETERS:
                return found
            text = spec.get("description") if isinstance(spec, Mapping) else None
            found.append((str(name), text[:512] if isinstance(text, str) else ""))
            _parameters(spec, found, depth + 1)
    items = schema.get("items")
    if isinstance(items, Mapping):
        _parameters(items, found, depth + 1)
    return found


def words(text: str) -> str:
    """Identifiers split into words: `get_file_info` -> `get file info`, `listAllowedDirectories` -> `list Allowed
    Directories`, `API-post-search` -> `API post search`."""
    return _CAMEL.sub(" ", _SEPARATORS.sub(" ", text))


class RankedIndex(Protocol):
    def rank(self, query: str, limit: int) -> Sequence[tuple[int, float]]:
        """Up to `limit` (position in the indexed documents, score), best first; nothing for no match."""
        ...


class Ranker(Protocol):
    def index(self, documents: Sequence[SearchDocument]) -> RankedIndex:
        """Build an index over `documents`. Called on a worker thread; may take a while, must not do I/O that
        could hang."""
        ...


class Bm25Ranker:
    """Triad's default ranker: BM25 (Lucene's variant, k1=1.2, b=0.75) over stemmed, identifier-split words."""

    def __init__(self) -> None:
        self._stemmer = Stemmer.Stemmer("english")
        self._tokens: dict[SearchDocument, list[str]] = {}
        """Each document's tokens, so that the indexes of several visible sets of one registry version tokenize
        each tool once (the most of an index's build time)."""

    def tokens(self, texts: Sequence[str]) -> list[list[str]]:
        found = bm25s.tokenize([words(text) for text in texts], stopwords="en", stemmer=self._stemmer.stemWords,
                               return_ids=False, show_progress=False)
        return [list(tokens) for tokens in found]

    def index(self, documents: Sequence[SearchDocument]) -> RankedIndex:
        missing = [d for d in dict.fromkeys(documents) if d not in self._tokens]
        if len(self._tokens) + len(missing) > MAX_CACHED_TOKENS:
            self._tokens = {}
            missing = list(dict.fromkeys(documents))
        for document, tokens in zip(missing, self.tokens([_weighted(d) for d in missing]), strict=True):
            self._tokens[document] = tokens
        return _Bm25Index(self, [self._tokens[d] for d in documents], len(documents))


def _weighted(d: SearchDocument) -> str:
    return " ".join([words(d.name), words(d.raw_name)] * NAME_WEIGHT + [d.title] * TITLE_WEIGHT
                    + [d.description, " ".join(f"{n} {t}" for n, t in d.parameters), d.upstream])


class _Bm25Index:
    def __init__(self, ranker: Bm25Ranker, corpus: list[list[str]], size: int) -> None:
        self._ranker, self._size = ranker, size
        self._bm25 = bm25s.BM25(k1=1.2, b=0.75, method="lucene")
        if size:
            self._bm25.index(corpus, show_progress=False)

    def rank(self, query: str, limit: int) -> Sequence[tuple[int, float]]:
        if not self._size:
            return []
        tokens = [t for t in self._ranker.tokens([query])[0] if t in self._bm25.vocab_dict]
        if not tokens:
            return []
        scores = self._bm25.get_scores(tokens)
        count = min(limit, self._size)
        best = np.argpartition(-scores, count - 1)[:count]
        ordered = sorted(best.tolist(), key=lambda i: (-float(scores[i]), i))
        return [(i, float(scores[i])) for i in ordered if scores[i] > 0]


def load_ranker(spec: str) -> Ranker:
    """`bm25` (Triad's) or `module:attr`, a class or factory that takes no arguments and returns a `Ranker`."""
    if spec == "bm25":
        return Bm25Ranker()
    module_name, _, attr = spec.partition(":")
    factory: Callable[[], Any] = getattr(importlib.import_module(module_name), attr)
    ranker = factory()
    if not callable(getattr(ranker, "index", None)):
        raise TypeError(f"{spec} did not give a ranker (an object with an index(documents) method)")
    return ranker  # type: ignore[no-any-return]


@dataclass(frozen=True, slots=True)
class Searchable:
    """One visible set's documents and the index over them (positions in `rank` are into `documents`)."""

    documents: tuple[SearchDocument, ...]
    index: RankedIndex


class SearchIndexes:
    """Indexes by (registry version, visible names), built once each on a worker thread; concurrent searches for
    one that is being built wait for that build instead of starting another. Documents are made once per tool
    and registry version, whatever the number of visible sets."""

    def __init__(self, ranker: Ranker) -> None:
        self.ranker = ranker
        self._ready: OrderedDict[tuple[int, frozenset[str]], Searchable] = OrderedDict()
        self._building: dict[tuple[int, frozenset[str]], anyio.Event] = {}
        self._documents: tuple[int, dict[str, SearchDocument]] = (-1, {})

    async def get(self, version: int, names: frozenset[str], descriptors: Callable[[], Mapping[str, ToolDescriptor]]
                  ) -> Searchable:
        """The index over a caller's visible tools (`names`; `descriptors()` gives them, by exposed name, in the
        order results break ties by) for registry `version`."""
        key = (version, names)
        while True:
            found = self._ready.get(key)
            if found is not None:
                self._ready.move_to_end(key)
                return found
            pending = self._building.get(key)
            if pending is None:
                break
            await pending.wait()  # a failed build leaves nothing behind: the next round builds again
        self._forget_before(version)
        done = self._building[key] = anyio.Event()
        try:
            documents = self._documents_of(version, descriptors())
            found = Searchable(documents, await anyio.to_thread.run_sync(self.ranker.index, documents))
            self._ready[key] = found
            while len(self._ready) > MAX_CACHED_INDEXES:
                self._ready.popitem(last=False)
            return found
        finally:
            del self._building[key]
            done.set()

    def _documents_of(self, version: int, descriptors: Mapping[str, ToolDescriptor]) -> tuple[SearchDocument, ...]:
        if self._documents[0] != version:
            self._documents = (version, {})
        made = self._documents[1]
        for name, descriptor in descriptors.items():
            if name not in made:
                made[name] = document_for(descriptor)
        return tuple(made[name] for name in descriptors)

    def _forget_before(self, version: int) -> None:
        """Drop the indexes of older registry versions: their tools may be gone or changed."""
        for key in [key for key in self._ready if key[0] < version]:
            del self._ready[key]
