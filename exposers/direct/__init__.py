"""The direct path: `tools/call` and list pages of HTTP clients served without the SDK's per-request machinery, in front
of the SDK's `/mcp` app (`listen.direct_path`, on by default; semantics are the same either way).
"""

from exposers.direct._path import DirectPath

__all__ = [
    "DirectPath",
]
