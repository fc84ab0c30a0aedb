"""The console's approval queue in Redis: a call waiting on one replica is listed in every replica's console, and
an approver on any of them answers it.

Each waiting call is one sealed record in the hash `triad:approvals` (field: the call's random id), written by the
replica the call waits on and removed by it when the call ends (answered, timed out, cancelled); a record whose
deadline passed long ago (its replica died) is dropped by whoever lists the queue. Answering claims the call by
removing its record (`HDEL` counts 1 for one answerer only), then pushes a sealed answer to the call's own list,
which the waiting replica polls (`POLL`, or at once when the answer was given on the same replica). Every record is
MAC'd with the cluster key over where it lives, so a record copied to another call, or written by anyone without
the key, is not an answer.

While Redis is unreachable a new call cannot be queued and is refused (fail closed); a call already waiting keeps
waiting and is refused at its timeout unless an answer can be read by then; the console says the queue is
unreachable.
"""

from __future__ import annotations

import dataclasses
import time

import anyio

from gateway.cluster._link import KEY_PREFIX, OP_TIMEOUT, Link, RedisDown
from gateway.cluster._records import RecordModel, RecordRejected, Records, Rejections
from gateway.state import MAX_WAITING, Answer, QueueFull, Tick, Waiting

PENDING = f"{KEY_PREFIX}approvals"
POLL = 0.5
"""How often a waiting call looks for an answer given on another replica (one `LPOP` per waiting call)."""
ANSWER_TTL = 60
"""An answer nobody read (its call ended meanwhile) is gone after this many seconds."""
STALE_AFTER = 30.0
"""A waiting record this long past its deadline belongs to a replica that is gone: it is dropped when listed."""


class WaitingRecord(RecordModel):
    """A `gateway.state.Waiting` as Redis keeps it (its fields, and when its call stops waiting)."""

    client: str
    tool: str
    upstream: str
    summary: str
    notes: str
    rule: int
    id: str
    since: float
    until: float


class AnswerRecord(RecordModel):
    approved: bool
    by: str
    reason: str


def _answer_key(id: str) -> str:
    return f"{KEY_PREFIX}approval-answer:{id}"


class RedisApprovals:
    def __init__(self, link: Link, records: Records, rejections: Rejections) -> None:
        self._link = link
        self._records = records
        self._rejections = rejections
        self._here: dict[str, anyio.Event] = {}
        """The calls waiting on this replica: an answer given here wakes its call at once."""

    async def wait(self, item: Waiting, seconds: float, tick: Tick | None = None, every: float = 5.0
                   ) -> Answer | None:
        client = self._link.client
        try:
            if await self._link.run(client.hlen(PENDING)) >= MAX_WAITING:
                raise QueueFull(f"{MAX_WAITING} calls are waiting for an approver already (the queue's limit)")
            record = WaitingRecord(**dataclasses.asdict(item), until=time.time() + seconds)
            await self._link.run(client.hset(PENDING, item.id, self._records.seal(f"{PENDING}:{item.id}", record)))
        except RedisDown:
            raise QueueFull("the cluster's approval queue is in Redis, which is unreachable now") from None
        woken = self._here[item.id] = anyio.Event()
        started, ticked = time.monotonic(), 0.0
        try:
            with anyio.move_on_after(seconds):
                while (answer := await self._read(item.id)) is None:
                    with anyio.move_on_after(POLL):
                        await woken.wait()
                    elapsed = time.monotonic() - started
                    if tick is not None and elapsed - ticked >= every:
                        ticked = elapsed
                        await tick(elapsed)
                return answer
            return await self._read(item.id)  # claimed just before the deadline: that answer counts
        finally:
            self._here.pop(item.id, None)
            with anyio.move_on_after(OP_TIMEOUT, shield=True):
                try:
                    await self._link.run(client.hdel(PENDING, item.id))
                    await self._link.run(client.delete(_answer_key(item.id)))
                except RedisDown:
                    pass  # the record is dropped as stale by the next listing

    async def _read(self, id: str) -> Answer | None:
        key = _answer_key(id)
        try:
            raw = await self._link.run(self._link.client.lpop(key))
        except RedisDown:
            return None
        if raw is None:
            return None
        try:
            found = self._records.open(key, raw, AnswerRecord)
        except RecordRejected as exc:
            self._rejections.note("approval", exc)
            return None
        return Answer(found.approved, found.by, found.reason)

    async def pending(self) -> list[Waiting]:
        raw = await self._link.run(self._link.client.hgetall(PENDING))
        now, found, stale = time.time(), [], []
        for field, value in raw.items():
            id = field.decode(errors="replace") if isinstance(field, bytes) else str(field)
            try:
                record = self._records.open(f"{PENDING}:{id}", value, WaitingRecord)
            except RecordRejected as exc:
                self._rejections.note("approval", exc)
                continue
            if record.id != id or record.until + STALE_AFTER < now:
                stale.append(id)
                continue
            found.append(Waiting(**record.model_dump(exclude={"until"})))
        if stale:
            await self._link.run(self._link.client.hdel(PENDING, *stale))
        return sorted(found, key=lambda item: item.since)

    async def answer(self, id: str, answer: Answer) -> bool:
        client = self._link.client
        if not await self._link.run(client.hdel(PENDING, id)):  # one answerer claims the call
            return False
        key = _answer_key(id)
        record = AnswerRecord(approved=answer.approved, by=answer.by, reason=answer.reason)
        await self._link.run(client.rpush(key, self._records.seal(key, record)))
        await self._link.run(client.expire(key, ANSWER_TTL))
        if (woken := self._here.get(id)) is not None:
            woken.set()
        return True
