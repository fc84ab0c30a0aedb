"""`limits:`, at the top level and under `clients.<id>.limits`: each identity's quotas (its fair share).

An identity is one configured client (and, for an OAuth caller, one issuer and subject); every caller without a
token is the `anonymous:` client, one identity for all of them (they cannot be told apart). A client's own
`limits` override the top-level ones key by key; a key set nowhere has its default (`DEFAULT_LIMITS`). Counting
and refusing is `gateway.quotas`.
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

Quota = Literal["sessions", "streams", "calls_in_flight", "upstream_slots", "stand_ins"]
DEFAULT_LIMITS: dict[Quota, int] = {
    "sessions": 100,
    "streams": 20,
    "calls_in_flight": 64,
    "upstream_slots": 8,
    "stand_ins": 8,
}
"""Judgment calls: far more than one person's IDE or agent opens at once, far less than it takes to fill the
gateway's own bounds (`gateway.quotas.TOTALS`, whose reserve keeps owners able to connect in any case)."""


class LimitsConfig(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    sessions: int | None = Field(default=None, ge=1)
    """Open handshake-era sessions (streamable HTTP `Mcp-Session-Id`s, legacy SSE streams)."""
    streams: int | None = Field(default=None, ge=1)
    """Open streams: legacy SSE streams and streamable HTTP GET streams."""
    calls_in_flight: int | None = Field(default=None, ge=1)
    """Calls, reads, gets and task requests running at once, over every transport and era."""
    upstream_slots: int | None = Field(default=None, ge=1)
    """Sessions on one `sessions: per_client` upstream (its stand-ins' included)."""
    stand_ins: int | None = Field(default=None, ge=1)
    """Capability declarations of 2026-07-28 requests with a stand-in session on one per-client upstream."""

    def over(self, base: LimitsConfig) -> LimitsConfig:
        """These limits where set, else `base`'s."""
        return base.model_copy(update=self.model_dump(exclude_none=True))

    def limit(self, quota: Quota) -> int:
        value: int | None = getattr(self, quota)
        return DEFAULT_LIMITS[quota] if value is None else value
