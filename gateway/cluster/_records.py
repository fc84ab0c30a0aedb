"""Every value Triad writes to Redis and reads back, sealed and opened in one place: Redis is a store, not a
trusted peer.

A record is a small JSON envelope `{"v": 1, "kid": ..., "body": "<JSON text>", "mac": ...}`: the body is a typed
model (pydantic, strict), the MAC is HMAC-SHA256 with a key derived from `cluster.secret_key` over the version,
the key id, *where* the record lives (its Redis key and field, or the event channel) and the body's exact text, so
a record copied under another key does not verify. `kid` names the cluster key (a keyed hash of it, not the key),
so that a record written by a replica with another key is told apart from a forged or damaged one.

`Records.open` is the one reader: wrong type, too large, not an envelope, another key, a MAC that does not match,
a body that is not the model — each raises `RecordRejected`, which the caller treats as "no record" and reports
through `Rejections` (a WARNING per kind and reason at most once a minute, with how many were skipped meanwhile;
never the value, which anyone with Redis access may have written).
"""

from __future__ import annotations

import hashlib
import hmac
import json
import logging
import time
from typing import Literal, TypeVar

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from gateway.cluster._secret_box import derive_key

logger = logging.getLogger("triad.cluster")

M = TypeVar("M", bound=BaseModel)

VERSION = 1
MAX_RECORD_BYTES = 256 * 1024
"""The largest record Triad writes is a pinned definition's fields (schemas included); anything larger is not one
of ours."""
REJECTION_LOG_INTERVAL = 60.0
"""At most one WARNING per record kind and reason in this many seconds: junk written in a loop cannot flood the log."""
REPLICA_ID = r"^[A-Za-z0-9_-]{1,40}$"
"""As `ClusterConfig.replica_id`."""

Reason = Literal["wrong type", "too large", "not a record", "another cluster key", "bad MAC", "invalid body", "stale"]


class RecordModel(BaseModel):
    """A record's body: strict types, no unknown field, frozen."""

    model_config = ConfigDict(extra="forbid", strict=True, frozen=True)


class _Envelope(RecordModel):
    v: Literal[1]
    kid: str = Field(max_length=16)
    body: str = Field(max_length=MAX_RECORD_BYTES)
    mac: str = Field(pattern=r"^[0-9a-f]{64}$")


class RecordRejected(Exception):
    """A value read from Redis that is not a record this cluster wrote (`reason`)."""

    def __init__(self, reason: Reason, detail: str = "") -> None:
        super().__init__(f"{reason}{': ' + detail if detail else ''}")
        self.reason: Reason = reason


class Records:
    def __init__(self, secret: str) -> None:
        self._key = derive_key(secret, b"records")
        self.key_id = hmac.new(self._key, b"key id", hashlib.sha256).hexdigest()[:12]

    def seal(self, where: str, body: RecordModel) -> bytes:
        text = body.model_dump_json()
        return json.dumps({"v": VERSION, "kid": self.key_id, "body": text, "mac": self._mac(where, text)},
                          separators=(",", ":")).encode()

    def open(self, where: str, raw: object, model: type[M]) -> M:
        """The body of the record `raw` read at `where`; `RecordRejected` when it is not one this cluster wrote."""
        if not isinstance(raw, bytes | str):
            raise RecordRejected("wrong type", type(raw).__name__)
        data = raw.encode() if isinstance(raw, str) else raw
        if len(data) > MAX_RECORD_BYTES + 256:
            raise RecordRejected("too large", f"{len(data)} bytes")
        try:
            envelope = _Envelope.model_validate_json(data)
        except ValidationError:
            raise RecordRejected("not a record") from None
        if envelope.kid != self.key_id:
            raise RecordRejected("another cluster key", f"key id {envelope.kid!r}, this replica's {self.key_id!r}")
        if not hmac.compare_digest(envelope.mac, self._mac(where, envelope.body)):
            raise RecordRejected("bad MAC")
        try:
            return model.model_validate_json(envelope.body)
        except ValidationError as exc:
            where_bad = exc.errors()[0]
            raise RecordRejected("invalid body", f"{'.'.join(map(str, where_bad['loc'])) or 'top'}: "
                                                 f"{where_bad['msg']}") from None

    def _mac(self, where: str, text: str) -> str:
        message = f"{VERSION}\0{self.key_id}\0{where}\0{text}".encode()
        return hmac.new(self._key, message, hashlib.sha256).hexdigest()


class Rejections:
    """Rate-limited reports of skipped records, by kind ("heartbeat", "session", "event", "pin", "secret",
    "approval") and reason; bounded: kinds and reasons are fixed sets."""

    def __init__(self) -> None:
        self._last: dict[tuple[str, str], tuple[float, int]] = {}
        self.total = 0

    def note(self, kind: str, rejected: RecordRejected | str) -> None:
        self.total += 1
        reason = rejected.reason if isinstance(rejected, RecordRejected) else rejected
        now = time.monotonic()
        last, skipped = self._last.get((kind, reason), (None, 0))
        if last is not None and now - last < REJECTION_LOG_INTERVAL:
            self._last[kind, reason] = (last, skipped + 1)
            return
        self._last[kind, reason] = (now, 0)
        more = f" ({skipped} more since the last report)" if skipped else ""
        logger.warning("cluster: skipped a %s record read from Redis: %s%s", kind, rejected, more)
