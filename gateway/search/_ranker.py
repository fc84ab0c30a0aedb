"""Tool search: the documents a tool is found by, the ranker seam, Triad's BM25 ranker, and the index cache.

A `SearchDocument` is what a ranker sees of one tool: its exposed name, the upstream's own name for it, title,
description, parameter names and descriptions, and the upstream's name. A `Ranker` turns the documents a caller
may see into a `RankedIndex`; `rank(query, limit)` gives positions into those documents with scores. Policy
applies before ranking: an index is built over one caller's visible tools only, so a hidden tool can never be
found, named or counted, nor move the scores of the tools that are found (term statistics come from the visible
documents alone: a caller's scores are the ones it would get from a registry without the hidden tools).

Triad's ranker is BM25F over a tool's fields with pseudo-relevance feedback (`_bm25f`), on identifier-aware
tokens (`_tokens`): `get_file_info`, `listAllowedDirectories` and `API-post-search` are split into words and kept
whole, stemmed (Snowball) and stripped of function words. A deployment plugs in its own ranker
(embeddings, say) with `search.ranker: module:attr`, which names a class or factory taking no arguments.

Ownership: the `Dispatcher` owns one `SearchIndexes`; indexes are built on a worker thread, once per
(registry version, visible set), the first time a search needs one, and kept in a small LRU cache. Nothing on
the call path of an upstream tool touches it.
"""

from __future__ import annotations

import importlib
from collections import OrderedDict
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

import anyio
import Stemmer

from consumers import JSON
from gateway.registry import ToolDescriptor
from gateway.search._bm25f import MAX_CACHED_TOKENS, Bm25fIndex, FieldTokens, document_tokens, field_texts
from gateway.search._tokens import tokens

MAX_CACHED_INDEXES = 16
"""Indexes kept at once, each for one (registry version, visible set): callers with the same policy share one.
A judgment call: a few policies times a few run-level lists in use; an index of 5,000 tools is about 1 MB."""
MAX_DOCUMENT_CHARS = 4096
"""Text of one tool that is indexed; past this, an upstream's very long descriptions only add noise (and memory)."""
MAX_PARAMETERS = 64
"""Parameters of one tool whose names and descriptions are indexed (nested objects count too)."""



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
    return SearchDocument(descriptor.name, raw, upstream, title_of(descriptor),
                          descriptor.description[:MAX_DOCUMENT_CHARS],
                          tuple(_parameters(descriptor.input_schema, [])))


def title_of(descriptor: ToolDescriptor) -> str:
    """A tool's title from either place the spec allows: the top-level `title`, else `annotations.title`."""
    if descriptor.title:
        return descriptor.title
    title = (descriptor.annotations or {}).get("title")
    return title if isinstance(title, str) else ""


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
    """Triad's default ranker: BM25F over a tool's fields with feedback from the best tools (`_bm25f`)."""

    def __init__(self) -> None:
        self._stemmer = Stemmer.Stemmer("english")
        self._tokens: dict[SearchDocument, FieldTokens] = {}
        """Each document's tokens, so that the indexes of several visible sets of one registry version tokenize
        each tool once (the most of an index's build time)."""

    def tokens(self, texts: Sequence[str]) -> list[list[str]]:
        """Plain text's tokens, as a tool field's (for comparisons with other BM25 libraries: `bench/search.py`)."""
        return [tokens(text, self._stemmer.stemWords) for text in texts]

    def index(self, documents: Sequence[SearchDocument]) -> RankedIndex:
        return self.lexical_index(documents)

    def lexical_index(self, documents: Sequence[SearchDocument]) -> Bm25fIndex:
        missing = [d for d in dict.fromkeys(documents) if d not in self._tokens]
        if len(self._tokens) + len(missing) > MAX_CACHED_TOKENS:
            self._tokens = {}
            missing = list(dict.fromkeys(documents))
        texts = [field_texts(d.name, d.raw_name, d.upstream, d.title, d.description, d.parameters) for d in missing]
        for document, found in zip(missing, document_tokens(texts, self._stemmer), strict=True):
            self._tokens[document] = found
        return Bm25fIndex([self._tokens[d] for d in documents], self._stemmer)


def load_ranker(spec: str) -> Ranker:
    """`hybrid` (Triad's default: BM25F and embeddings), `bm25` (BM25F alone) or `module:attr`, a class or factory
    that takes no arguments and returns a `Ranker`."""
    if spec == "bm25":
        return Bm25Ranker()
    if spec == "hybrid":
        from gateway.search._hybrid import Embedder, HybridRanker

        return HybridRanker(Bm25Ranker(), Embedder())
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
