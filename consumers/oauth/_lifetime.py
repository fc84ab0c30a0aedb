"""When a token is refreshed ahead of its expiry: by a fraction of its lifetime, at most a fixed margin."""

from __future__ import annotations

REFRESH_AHEAD = 0.2
"""A token is refreshed once less than this fraction of its lifetime is left (`refresh_lead`): a 30 s token serves
24 s of requests before its first refresh, not one."""
REFRESH_MARGIN = 60.0
"""The most a token is refreshed ahead of its expiry (an hour's token is used until its last minute)."""


def refresh_lead(lifetime: float | None) -> float:
    """How long before its expiry a token of `lifetime` seconds (None: unknown) is refreshed."""
    return REFRESH_MARGIN if lifetime is None else min(REFRESH_MARGIN, REFRESH_AHEAD * lifetime)
