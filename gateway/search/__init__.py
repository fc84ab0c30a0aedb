"""Tool search: the documents a tool is found by, the ranker seam and Triad's BM25 ranker, the index cache per
registry version, and `find` (one client's view only: policy before ranking).
"""

from gateway.search._find import find
from gateway.search._ranker import SearchIndexes, load_ranker

__all__ = [
    "SearchIndexes",
    "find",
    "load_ranker",
]
