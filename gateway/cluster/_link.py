"""The one Redis connection pool of a replica, and what it does while Redis is unreachable.

Every operation is bounded (`OP_TIMEOUT`): a Redis that is down or hung costs a call at most that long, and after
a failure the link is marked down for `RETRY_AFTER` seconds, during which callers take their documented fallback at
once instead of each waiting on a dead socket. redis-py reconnects by itself on the next operation.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Awaitable
from typing import TypeVar

import redis.asyncio as aioredis
from redis.exceptions import RedisError, ResponseError

from gateway.state import SharedStateUnavailable

logger = logging.getLogger("triad.cluster")

T = TypeVar("T")

OP_TIMEOUT = 1.0
"""Seconds one Redis operation may take (connecting included)."""
RETRY_AFTER = 1.0
"""After a failed operation, how long Redis counts as down before the next attempt."""
KEY_PREFIX = "triad:"


def text(value: bytes | str) -> str:
    """A Redis reply as text (the client returns bytes)."""
    return value.decode() if isinstance(value, bytes) else value


class RedisDown(SharedStateUnavailable):
    """Redis could not be reached (or did not answer in time); the caller takes its fallback."""


class RedisRefused(RedisDown):
    """Redis answered, with an error for this operation (a key holding a value of the wrong type, written by
    someone else): the caller takes its fallback for this operation only; Redis is not marked down."""


class Link:
    def __init__(self, url: str) -> None:
        self.client: aioredis.Redis = aioredis.Redis.from_url(
            url, socket_timeout=OP_TIMEOUT, socket_connect_timeout=OP_TIMEOUT, decode_responses=False,
            health_check_interval=30)
        self._down_until = 0.0
        self.up = True
        self.failures = 0

    @property
    def usable(self) -> bool:
        return time.monotonic() >= self._down_until

    async def run(self, operation: Awaitable[T]) -> T:
        """Await a Redis operation; RedisDown (at once, while the link is marked down) when it cannot be done."""
        if not self.usable:
            close = getattr(operation, "close", None)
            if close is not None:  # a coroutine never awaited: close it quietly
                close()
            raise RedisDown("Redis is unreachable")
        try:
            result = await operation
        except ResponseError as exc:  # Redis is up: only this key is unusable
            raise RedisRefused(f"Redis refused the operation ({str(exc).split(' ', 1)[0]})") from None
        except (RedisError, OSError, TimeoutError) as exc:
            self.mark_down(exc)
            raise RedisDown("Redis is unreachable") from None
        if not self.up:
            logger.info("cluster: Redis is reachable again")
            self.up = True
        return result

    def mark_down(self, exc: BaseException) -> None:
        self.failures += 1
        self._down_until = time.monotonic() + RETRY_AFTER
        if self.up:
            # the URL may hold a password: name the error's type and text of redis-py, never the URL
            logger.warning("cluster: Redis is unreachable (%s); degraded until it is back", type(exc).__name__)
            self.up = False

    async def close(self) -> None:
        await self.client.aclose()
