"""Finding tools for a task among those one client may see (policy before ranking: only its view is indexed)."""

from __future__ import annotations

from gateway.registry import ClientView
from gateway.search._ranker import SearchIndexes


async def find(indexes: SearchIndexes, view: ClientView, query: str, limit: int) -> list[tuple[str, float]]:
    """(exposed name, score) of the best `limit` tools for `query` among those `view` may see. A view narrowed by
    run-level lists is ranked in its caller's unlisted view's index and filtered (scores then weigh words over
    the tools policy lets the caller see, not over what one request's list keeps)."""
    indexed = view.unlisted or view
    found = await indexes.get(indexed.version, indexed.tool_names, lambda: indexed.searchable)
    if indexed is view:
        ranked = found.index.rank(query, limit)
    else:
        keep = view.tool_names
        ranked = [(position, score) for position, score in found.index.rank(query, len(found.documents))
                  if found.documents[position].name in keep][:limit]
    return [(found.documents[position].name, score) for position, score in ranked]
