"""Secrets kept in Redis for an identity (per-user upstream tokens, for instance): encrypted with the cluster key
(`SecretBox`), under a key made of the owner's identity hash and a hash of the secret's name, so that neither
the value, nor whose it is, nor what it is for can be read in Redis; a value moved under another key does not
decrypt. While Redis is unreachable `get` and `put` raise `RedisDown`: a caller treats that as "no stored
secret" (e.g. asks the user to sign in again), never as a reason to use another identity's.
"""

from __future__ import annotations

import hashlib

from gateway.cluster._link import KEY_PREFIX, Link
from gateway.cluster._records import Rejections
from gateway.cluster._secret_box import SecretBox, SecretUnreadable
from gateway.identity import Identity

Owner = Identity | str
"""An identity, or whose upstream credential it is (`gateway.identity.credential_owner`)."""


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
        key = self._key(identity, name)
        sealed = self._box.seal(value, key)
        await self._link.run(self._link.client.set(key, sealed, px=int(ttl * 1000) if ttl else None))

    async def get(self, identity: Owner, name: str) -> bytes | None:
        key = self._key(identity, name)
        sealed = await self._link.run(self._link.client.get(key))
        if sealed is None:
            return None
        try:
            return self._box.open(sealed.encode() if isinstance(sealed, str) else sealed, key)
        except SecretUnreadable as exc:  # reported (at a bounded rate, never the value), then the caller's to handle
            self._rejections.note("secret", str(exc))
            raise

    async def delete(self, identity: Owner, name: str) -> None:
        await self._link.run(self._link.client.delete(self._key(identity, name)))
