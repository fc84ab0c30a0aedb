"""The result-level `_meta` of Triad's list pages: what the upstreams put on their own pages of that list.

An upstream's `tools/list` (or resources, templates, prompts) pages may carry `_meta` of their own; a client
connected to it directly sees those keys, so a client of Triad sees them too, on each page of the merged list:
the keys of every upstream visible to the client, merged in upstream-name order (the first upstream that has a
key gives its value). The 2026-07-28 era stamp was left out when the upstream was listed (`Catalog.page_meta`).
"""

from __future__ import annotations

from collections.abc import Iterable

from consumers import JSONObject, Upstream


def with_page_meta(page: JSONObject, key: str, upstreams: Iterable[Upstream | None]) -> JSONObject:
    """`page` (a list result under `key`) with the upstreams' page `_meta` of that list."""
    merged: JSONObject = {}
    for upstream in upstreams:
        found = upstream.catalog.page_meta.get(key) if upstream is not None and upstream.catalog else None
        for meta_key, value in (found or {}).items():
            merged.setdefault(meta_key, value)
    if merged:
        page["_meta"] = merged
    return page
