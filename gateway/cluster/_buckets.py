"""`rate_limit` buckets in Redis: one token bucket per key, taken atomically by a Lua script on Redis's own clock,
so N per minute holds for N calls in total whichever replica takes them. A bucket's key names what it counts (a
client, a tool, an upstream) by a keyed hash (`SecretBox.name_hash`): Redis never sees a client id.

While Redis is unreachable each replica counts in its own buckets (`LocalBuckets`, same rates): limits still
hold per replica, so the cluster as a whole may let through up to N per replica until Redis is back.
"""

from __future__ import annotations

from gateway.cluster._link import KEY_PREFIX, Link, RedisDown
from gateway.cluster._secret_box import SecretBox
from gateway.state import LocalBuckets

TAKE = """
local capacity = tonumber(ARGV[1])
local refill = tonumber(ARGV[2])
local clock = redis.call('TIME')
local now = tonumber(clock[1]) + tonumber(clock[2]) / 1000000
local bucket = redis.call('HMGET', KEYS[1], 'tokens', 'stamp')
local tokens = tonumber(bucket[1]) or capacity
local stamp = tonumber(bucket[2]) or now
tokens = math.min(capacity, tokens + math.max(0, now - stamp) * refill)
local wait = false
if tokens < 1 then
  wait = tostring((1 - tokens) / refill)
else
  tokens = tokens - 1
end
redis.call('HSET', KEYS[1], 'tokens', tostring(tokens), 'stamp', tostring(now))
redis.call('EXPIRE', KEYS[1], math.ceil(capacity / refill) + 1)
return wait
"""


class RedisBuckets:
    def __init__(self, link: Link, box: SecretBox) -> None:
        self._link = link
        self._box = box
        self._script = link.client.register_script(TAKE)
        self._fallback = LocalBuckets()

    async def take(self, key: str, capacity: float, refill: float) -> float | None:
        try:
            bucket = f"{KEY_PREFIX}bucket:{self._box.name_hash('bucket', key)}"
            wait = await self._link.run(self._script(keys=[bucket], args=[capacity, refill]))
        except RedisDown:
            return self._fallback.take_now(key, capacity, refill)
        return float(wait) if wait is not None else None
