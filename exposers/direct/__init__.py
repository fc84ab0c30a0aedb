"""TODO"""

from exposers.direct._path import FastPath

__all__ = [
    "FastPath",
]
