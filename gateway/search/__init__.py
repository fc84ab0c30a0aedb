"""TODO"""

from gateway.search._find import find
from gateway.search._ranker import SearchIndexes, load_ranker

__all__ = [
    "SearchIndexes",
    "find",
    "load_ranker",
]
