"""Secrets kept in Redis for an identity (per-user upstream tokens, for instance): encrypted with the cluster key
(`SecretBox`), under a key made of the owner's identity hash and a hash of the secret's name, so that neither
the value, nor whose it is, nor what it is for can be read in Redis; a value moved under another key does not
decrypt. While Redis is unreachable `get` and `put` raise `RedisDown`: a caller treats that as "no stored
secret" (e.g. asks the user to sign in again), never as a reason to use another identity's.

Bounded both ways: a secret over `MAX_SECRET_BYTES` is refused before it is sealed (`SecretTooLarge`, naming the
limit), and at most the largest sealed value Triad writes is read back (`GETRANGE`), so a value someone else
stored under a vault key costs one bounded read; one larger than that, or of another Redis type, is skipped and
reported as a secret that is not ours (`SecretUnreadable`, or none).
"""

from __future__ import annotations

import hashlib

from gateway.cluster._link import KEY_PREFIX, Link, RedisRefused
from gateway.cluster._records import Rejections
from gateway.cluster._secret_box import SecretBox, SecretUnreadable
from gateway.identity import Identity

MAX_SECRET_BYTES = 64 * 1024
"""The largest secret kept: OAuth tokens, a client registration and discovery metadata are a few KiB each."""
MAX_SEALED_BYTES = 4 * (MAX_SECRET_BYTES + 1024) // 3 + 256
"""The largest value `put` writes: Fernet's base64 of the record's name, the secret, and its own overhead."""

Owner = Identity | str
"""An identity, or whose upstream credential it is (`gateway.identity.credential_owner`)."""


class SecretTooLarge(ValueError):
    """A secret over `MAX_SECRET_BYTES`: not kept (the message says the size and the limit, never the value)."""


class Vault:
    def __init__(self, link: Link, box: SecretBox, rejections: Rejections) -> None:
        self._link = link
        self._box = box
        self._rejections = rejections

    def _key(self, owner: Owner, name: str) -> str:
        purpose = hashlib.sha256(name.encode()).hexdigest()[:32]
        whose = self._box.identity_hash(owner) if isinstance(owner, Identity) \
            else self._box.name_hash("credential-owner", owner)
        return f"{KEY_PREFIX}secret:{whose}:{purpose}"

    async def put(self, identity: Owner, name: str, value: bytes, ttl: float | None = None) -> None:
        if len(value) > MAX_SECRET_BYTES:
            raise SecretTooLarge(f"a secret of {len(value)} bytes is over the vault's limit of {MAX_SECRET_BYTES} "
                                 "bytes (MAX_SECRET_BYTES); it is not kept")
        key = self._key(identity, name)
        sealed = self._box.seal(value, key)
        await self._link.run(self._link.client.set(key, sealed, px=int(ttl * 1000) if ttl else None))

    async def get(self, identity: Owner, name: str) -> bytes | None:
        key = self._key(identity, name)
        try:  # one byte more than the largest value Triad writes: enough to tell a larger one
            sealed = await self._link.run(self._link.client.getrange(key, 0, MAX_SEALED_BYTES))
        except RedisRefused:  # another Redis type under our key: not ours, as if none
            self._rejections.note("secret", "wrong type")
            return None
        if not sealed:  # GETRANGE of a missing key is empty, and Triad never writes an empty value
            return None
        if len(sealed) > MAX_SEALED_BYTES:
            self._rejections.note("secret", "too large")
            raise SecretUnreadable(f"a stored secret is larger than the vault writes ({MAX_SEALED_BYTES} bytes)")
        try:
            return self._box.open(sealed.encode() if isinstance(sealed, str) else sealed, key)
        except SecretUnreadable as exc:  # reported (at a bounded rate, never the value), then the caller's to handle
            self._rejections.note("secret", str(exc))
            raise

    async def delete(self, identity: Owner, name: str) -> None:
        await self._link.run(self._link.client.delete(self._key(identity, name)))

    async def acquire(self, identity: Owner, name: str, holder: str, ttl: float) -> bool:
        """Take the lock `name` of `identity` for `holder` (a random value), for at most `ttl` seconds (a replica
        that dies holding it does not hold it longer); False when another holds it."""
        return bool(await self._link.run(self._link.client.set(self._lock_key(identity, name), holder.encode(),
                                                               nx=True, px=int(ttl * 1000))))

    async def release(self, identity: Owner, name: str, holder: str) -> None:
        """Give the lock back, if `holder` still holds it (one that expired may be another's by now)."""
        await self._link.run(self._link.client.eval(_RELEASE, 1, self._lock_key(identity, name), holder.encode()))

    def _lock_key(self, owner: Owner, name: str) -> str:
        return f"{KEY_PREFIX}lock:{self._key(owner, name).removeprefix(KEY_PREFIX + 'secret:')}"


_RELEASE = "if redis.call('get', KEYS[1]) == ARGV[1] then return redis.call('del', KEYS[1]) else return 0 end"
"""Compare and delete, in one step: a lock is only ever released by its holder."""
