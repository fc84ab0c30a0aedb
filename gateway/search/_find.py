"""Finding tools for a task among those one client may see (policy before ranking: only its view is indexed)."""

from __future__ import annotations

from gateway.registry import ClientView
from gateway.search._ranker import SearchIndexes


async def find(indexes: SearchIndexes, view: ClientView, query: str, limit: int) -> list[tuple[str, float]]:
    """(exposed name, score) of the best `limit` tools for `query` among those `view` may see."""
    found = await indexes.get(view.version, view.tool_names,
                              lambda: view.searchable)
    return [(found.documents[position].name, score) for position, score in found.index.rank(query, limit)]
