"""`pin_definitions` approvals in Redis: a hash of approved definition digests per hook state name, so that a tool
approved (`triad approve`) or first pinned on one replica is the same on all.

While Redis is unreachable, a definition whose digest this replica saw approved still passes; any other is
blocked (fail closed), with a reason that says so.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Literal

from consumers import JSON
from gateway.cluster._link import KEY_PREFIX, Link, RedisDown, text
from gateway.state import PinStatus, definition_hash, pinned_fields

PIN_FIRST = """
if redis.call('HSETNX', KEYS[1], ARGV[1], ARGV[2]) == 1 then
  redis.call('HSET', KEYS[2], ARGV[1], ARGV[3])
end
return redis.call('HGET', KEYS[1], ARGV[1])
"""
"""First use: pin digest and definition together unless a digest is pinned already; the pinned digest."""


class RedisPins:
    def __init__(self, link: Link, state: str) -> None:
        self._link = link
        self._pin_first = link.client.register_script(PIN_FIRST)
        self._digests = f"{KEY_PREFIX}pins:{state}"
        self._definitions = f"{KEY_PREFIX}pin-definitions:{state}"
        self._seen: dict[str, str] = {}
        """Digests this replica found approved, for when Redis is unreachable."""

    async def check(self, upstream: str, raw: str, definition: Mapping[str, JSON], trust_new: bool) -> str | None:
        key, digest = f"{upstream}:{raw}", definition_hash(definition)
        client = self._link.client
        try:
            pinned = await self._link.run(client.hget(self._digests, key))
            if pinned is None and trust_new:
                # first use on any replica pins it; atomic: two replicas pinning at once agree on one definition
                pinned = await self._link.run(self._pin_first(
                    keys=[self._digests, self._definitions],
                    args=[key, digest, json.dumps(pinned_fields(definition), default=str)]))
        except RedisDown:
            if self._seen.get(key) == digest:
                return None
            return "the cluster's approvals cannot be read while Redis is unreachable"
        if pinned is None:
            return "its definition has not been approved yet"
        pinned_text = text(pinned)
        if pinned_text != digest:
            return (f"its definition changed since it was approved (approved {pinned_text[:12]}, "
                    f"now {digest[:12]})")
        self._seen[key] = digest
        return None

    async def approve(self, upstream: str, raw: str, definition: Mapping[str, JSON]) -> bool:
        key, digest = f"{upstream}:{raw}", definition_hash(definition)
        client = self._link.client
        before = await self._link.run(client.hget(self._digests, key))
        if before is not None and text(before) == digest:
            return False
        async with client.pipeline(transaction=True) as both:  # MULTI: the definition never pairs another's digest
            both.hset(self._definitions, key, json.dumps(pinned_fields(definition), default=str))
            both.hset(self._digests, key, digest)
            await self._link.run(both.execute())
        return True

    async def status(self, upstream: str, raw: str, definition: Mapping[str, JSON]) -> PinStatus:
        key, current = f"{upstream}:{raw}", pinned_fields(definition)
        pinned = await self._link.run(self._link.client.hget(self._digests, key))
        if pinned is None:
            return PinStatus("new", None, current)
        approved = await self._link.run(self._link.client.hget(self._definitions, key))
        state: Literal["approved", "changed"] = "approved" if text(pinned) == definition_hash(definition) else "changed"
        return PinStatus(state, json.loads(approved) if approved is not None else None, current)
