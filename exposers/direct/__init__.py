"""TODO"""

from exposers.direct._path import DirectPath

__all__ = [
    "DirectPath",
]
