"""`pin_definitions` approvals shared through Redis, kept durable in the hook's state file.

The state file (`gateway.state.PinStore`, in the operator's state directory) is the durable truth; Redis is the
cluster's shared cache of it, so that a tool approved (`triad approve`, the console) or first pinned on one replica
is the same on all at once. Each value is one record sealed with the cluster key (`Records`): the digest and the
approved definition's fields together. A replica that reads an approval from Redis writes it to its own state
file too; one that finds none in Redis (Redis restarted without persistence, or the record was deleted or does not
verify) takes its state file's, and puts it back in Redis. So lost Redis state never fails open (a changed
definition stays blocked, even with `trust_new: true`) and never blocks what was approved (`trust_new: false`).

A pin a replica made on first use carries when (`first_use`, in Redis and in each state file that keeps it); an
operator's approval (`triad approve`, the console) carries none and is taken over any file. After Redis lost its
data, a replica with no state of its own may pin whatever its upstream serves now: a replica whose file holds an
approval of that tool, or an older first use, puts its own back in Redis over it, and every replica then takes
that one. Restored records keep their mark, so a first use put back never passes for an approval after the next
loss (a re-attack: two losses in a row spread a poisoned first use).

While Redis is unreachable, the state file decides; a definition it does not hold is blocked (fail closed), with
a reason that says so. `approve` needs Redis (every replica must see it), and writes the file after Redis.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Mapping
from typing import Any

import anyio
from pydantic import Field

from consumers import JSON, JSONObject
from gateway.cluster._link import KEY_PREFIX, Link, RedisDown
from gateway.cluster._records import RecordModel, RecordRejected, Records, Rejections
from gateway.state import PinStateUnreadable, PinStatus, PinStore, definition_hash, pin_match, pinned_fields

PIN_FIRST = """
redis.call('HSETNX', KEYS[1], ARGV[1], ARGV[2])
return redis.call('HGET', KEYS[1], ARGV[1])
"""
"""First use: pin this record unless one is pinned already; the pinned record (two replicas agree on one)."""


class PinRecord(RecordModel):
    digest: str = Field(pattern=r"^[0-9a-f]{64}$")
    definition: dict[str, Any] | None = None
    first_use: float | None = None
    """When a replica pinned it on first use (`trust_new`); None: an operator approved it."""


def _outranks(durable: float | None, cached: PinRecord) -> bool:
    """A state file's pin (first used at `durable`, None: approved) outranks Redis's `cached` other one: Redis's is
    a first use, and the file's an approval or an older first use."""
    return cached.first_use is not None and (durable is None or durable < cached.first_use)


class RedisPins:
    def __init__(self, link: Link, records: Records, rejections: Rejections, state: str, store: PinStore) -> None:
        self._link = link
        self._records = records
        self._rejections = rejections
        self._store = store
        self._pin_first = link.client.register_script(PIN_FIRST)
        self._hash = f"{KEY_PREFIX}pins:{state}"

    def _where(self, key: str) -> str:
        return f"{self._hash}\0{key}"

    def _open(self, key: str, raw: object) -> PinRecord | None:
        if raw is None:
            return None
        try:
            return self._records.open(self._where(key), raw, PinRecord)
        except RecordRejected as rejected:
            self._rejections.note("pin", rejected)
            return None

    def _seal(self, key: str, digest: str, fields: JSONObject | None, first_use: float | None = None) -> bytes:
        return self._records.seal(self._where(key), PinRecord(digest=digest, definition=fields, first_use=first_use))

    async def _pinned(self, upstream: str, raw: str) -> PinRecord | None:
        """The approval of `upstream:raw`: Redis's (then kept in the file too), else the file's (then put back in
        Redis); `RedisDown` only when Redis is unreachable and the file holds none."""
        key = f"{upstream}:{raw}"
        durable = await anyio.to_thread.run_sync(self._store.pinned, upstream, raw)
        try:
            cached = self._open(key, await self._link.run(self._link.client.hget(self._hash, key)))
        except RedisDown:
            if durable is None:
                raise
            return PinRecord(digest=durable[0], definition=durable[1])
        if cached is not None and not (durable is not None and _outranks(durable[2], cached)):
            if durable is None or (durable[0], durable[2]) != (cached.digest, cached.first_use):
                await anyio.to_thread.run_sync(self._store.remember, upstream, raw, cached.digest, cached.definition,
                                               cached.first_use)
            return cached
        if durable is None:
            return None
        # Redis lost it, or holds a first use that this file's pin outranks: the durable one goes back, as it is
        with contextlib.suppress(RedisDown):
            await self._link.run(self._link.client.hset(self._hash, key, self._seal(key, *durable)))
        return PinRecord(digest=durable[0], definition=durable[1], first_use=durable[2])

    async def check(self, upstream: str, raw: str, definition: Mapping[str, JSON], trust_new: bool) -> str | None:
        key, digest = f"{upstream}:{raw}", definition_hash(definition)
        try:
            pinned = await self._pinned(upstream, raw)
            if pinned is None and trust_new:
                # first use on any replica pins it; atomic: two replicas pinning at once agree on one definition
                sealed = self._seal(key, digest, pinned_fields(definition), first_use=time.time())
                pinned = self._open(key, await self._link.run(self._pin_first(keys=[self._hash],
                                                                                args=[key, sealed])))
                if pinned is None:
                    return "the cluster's approval of it cannot be verified"
                await anyio.to_thread.run_sync(self._store.remember, upstream, raw, pinned.digest, pinned.definition,
                                               pinned.first_use)
        except RedisDown:
            return "the cluster's approvals cannot be read while Redis is unreachable"
        except PinStateUnreadable as exc:  # the durable truth is unknown: fail closed, whatever Redis holds
            return f"its approval cannot be read ({exc})"
        if pinned is None:
            return "its definition has not been approved yet"
        match = pin_match(pinned.digest, definition)
        if match == "changed":
            return (f"its definition changed since it was approved (approved {pinned.digest[:12]}, "
                    f"now {digest[:12]})")
        if match == "legacy":  # taken over by the full hash, with the pin's mark: for every replica at once
            fields = pinned_fields(definition)
            with contextlib.suppress(RedisDown):
                await self._link.run(self._link.client.hset(self._hash, key, self._seal(key, digest, fields,
                                                                                        pinned.first_use)))
            await anyio.to_thread.run_sync(self._store.remember, upstream, raw, digest, fields, pinned.first_use)
        return None

    async def approve(self, upstream: str, raw: str, definition: Mapping[str, JSON]) -> bool:
        key, digest, fields = f"{upstream}:{raw}", definition_hash(definition), pinned_fields(definition)
        before = self._open(key, await self._link.run(self._link.client.hget(self._hash, key)))
        if before is None or before.digest != digest or before.first_use is not None:
            await self._link.run(self._link.client.hset(self._hash, key, self._seal(key, digest, fields)))
        changed = await anyio.to_thread.run_sync(self._store.remember, upstream, raw, digest, fields)
        return changed or before is None or before.digest != digest or before.first_use is not None

    async def status(self, upstream: str, raw: str, definition: Mapping[str, JSON]) -> PinStatus:
        current = pinned_fields(definition)
        pinned = await self._pinned(upstream, raw)
        if pinned is None:
            return PinStatus("new", None, current)
        match = pin_match(pinned.digest, definition)
        return PinStatus("changed" if match == "changed" else "approved", pinned.definition, current,
                         match == "legacy")
