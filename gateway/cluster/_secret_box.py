"""Encryption of what Triad keeps in Redis that is secret, and the keyed hashes that bind records to identities.

Both keys are derived (HKDF-SHA256) from `cluster.secret_key`, one per purpose; Fernet (AES-128-CBC with
HMAC-SHA256, from `cryptography`) encrypts. Redis sees ciphertext and hashes only: no token, no client id.
"""

from __future__ import annotations

import base64
import hashlib
import hmac

from cryptography.fernet import Fernet, InvalidToken
from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.kdf.hkdf import HKDF

from gateway.identity import Identity

__all__ = ["SecretBox", "SecretUnreadable", "derive_key"]


class SecretUnreadable(Exception):
    """A stored secret that this key cannot decrypt (another key, or tampered with)."""


def derive_key(secret: str, purpose: bytes) -> bytes:
    """A key for one purpose, derived from the cluster key (one derivation for every key Triad uses)."""
    return HKDF(algorithm=hashes.SHA256(), length=32, salt=b"triad-cluster", info=purpose).derive(secret.encode())


class SecretBox:
    def __init__(self, secret: str) -> None:
        self._fernet = Fernet(base64.urlsafe_b64encode(derive_key(secret, b"encrypt")))
        self._mac_key = derive_key(secret, b"identity")

    def seal(self, plaintext: bytes, context: str) -> bytes:
        """Encrypt `plaintext` for the record named `context` (a record copied under another name is refused)."""
        return self._fernet.encrypt(context.encode() + b"\0" + plaintext)

    def open(self, token: bytes, context: str) -> bytes:
        try:
            opened = self._fernet.decrypt(token)
        except InvalidToken:
            raise SecretUnreadable("a stored secret cannot be decrypted with this cluster key") from None
        name, _, plaintext = opened.partition(b"\0")
        if name != context.encode():
            raise SecretUnreadable("a stored secret belongs to another record")
        return plaintext

    def identity_hash(self, identity: Identity) -> str:
        """Who a record belongs to, as a keyed hash: the client and, for an OAuth caller, the token's issuer and
        subject (the same principal the SDK binds a session to on one replica)."""
        issuer, subject = identity.principal or ("", "")
        return self._mac("\0".join((identity.client_id, issuer, subject)))

    def name_hash(self, purpose: str, name: str) -> str:
        """A keyed hash naming a record by what it is about (a rate limit's client or tool), which Redis must not
        read."""
        return self._mac(f"{purpose}\0{name}")

    def _mac(self, text: str) -> str:
        return hmac.new(self._mac_key, text.encode(), hashlib.sha256).hexdigest()[:32]
