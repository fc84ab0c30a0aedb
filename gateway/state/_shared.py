"""State that replicas of one gateway may share, behind small interfaces.

The embedded default keeps it in this process (`LocalBuckets`, `FilePins`); with `cluster:` in the config the same
interfaces are kept in Redis (`gateway.cluster`), and the built-in hooks that hold such state (`rate_limit`,
`pin_definitions`) receive the shared one through `share(state)` when the chain is built.
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from typing import Protocol

import anyio

from consumers import JSON
from gateway.state._approvals import Approvals
from gateway.state._pins import PinStatus, PinStore

__all__ = ["Buckets", "FilePins", "LocalBuckets", "Pins", "SharedState", "SharedStateUnavailable"]


class SharedStateUnavailable(Exception):
    """The shared state cannot be reached now (with `cluster:`: Redis is down); what asked says so and goes on.
    Defined here so that callers (the console, `triad approve`) need not import the Redis side."""


class Buckets(Protocol):
    """Token buckets by key."""

    async def take(self, key: str, capacity: float, refill: float) -> float | None:
        """Take one token from `key`'s bucket (full at `capacity`, `refill` tokens per second): None if one was
        there, else the seconds until one is."""
        ...


class Pins(Protocol):
    """Approved hashes of tool definitions (`gateway.state`)."""

    async def check(self, upstream: str, raw: str, definition: Mapping[str, JSON], trust_new: bool) -> str | None:
        """None when `definition` is approved (or new and trusted on first use); else why it is blocked."""
        ...

    async def approve(self, upstream: str, raw: str, definition: Mapping[str, JSON]) -> bool:
        """Pin the current definition; True if that changed what was approved."""
        ...

    async def status(self, upstream: str, raw: str, definition: Mapping[str, JSON]) -> PinStatus:
        """Where `definition` stands against the approved one; changes nothing."""
        ...


class SharedState(Protocol):
    """What hooks may share across replicas; `state` is the name of a pin_definitions hook's state."""


    def buckets(self) -> Buckets: ...

    def pins(self, state: str, store: PinStore) -> Pins:
        """The shared approvals named `state`, kept durable in `store` (the hook's state file)."""
        ...

    def approvals(self) -> Approvals:
        """The console's approval queue, shared by every replica (`gateway.state._approvals`)."""
        ...


class LocalBuckets:
    """The buckets of one process."""

    def __init__(self) -> None:
        self._buckets: dict[str, tuple[float, float]] = {}

    async def take(self, key: str, capacity: float, refill: float) -> float | None:
        return self.take_now(key, capacity, refill)

    def take_now(self, key: str, capacity: float, refill: float) -> float | None:
        now = time.monotonic()
        tokens, stamp = self._buckets.get(key, (capacity, now))
        tokens = min(capacity, tokens + (now - stamp) * refill)
        if tokens < 1:
            self._buckets[key] = (tokens, now)
            return (1 - tokens) / refill
        self._buckets[key] = (tokens - 1, now)
        return None


class FilePins:
    """Pins in a JSON state file (`PinStore`), read and written off the event loop."""

    def __init__(self, store: PinStore) -> None:
        self.store = store

    async def check(self, upstream: str, raw: str, definition: Mapping[str, JSON], trust_new: bool) -> str | None:
        return await anyio.to_thread.run_sync(self.store.check, upstream, raw, definition, trust_new)

    async def approve(self, upstream: str, raw: str, definition: Mapping[str, JSON]) -> bool:
        return await anyio.to_thread.run_sync(self.store.approve, upstream, raw, definition)

    async def status(self, upstream: str, raw: str, definition: Mapping[str, JSON]) -> PinStatus:
        return await anyio.to_thread.run_sync(self.store.status, upstream, raw, definition)
