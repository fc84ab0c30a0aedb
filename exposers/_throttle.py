"""The brake on guessing: failed authentications counted per source address and per identity, with backoff.

Every authenticated surface of the listener (`/mcp`, legacy SSE, `/admin/*`, `/metrics`, console sign-in) asks
`AuthThrottle.retry_after` before it compares any token, and reports each failure (a wrong or malformed bearer
token, a wrong console token, a session id of another identity) with `failed`. After `FREE_FAILURES` failures a key
is blocked for `BASE_BACKOFF` seconds, doubling with each further failure up to `MAX_BACKOFF`; while blocked its
requests get 429 with `Retry-After`, whatever they carry. Failures are forgotten after `FORGET_AFTER` seconds
without one. A success clears nothing: a caller with one valid token could otherwise interleave successes to guess
another client's token without end.

Keys are a source address (an IPv6 address by its /64, which one host holds whole) and, where the request proves
one, an identity (a client that keeps presenting sessions that are not its own). A wrong token proves no identity,
so nobody can lock another client out by failing in its name: a source's failures block that source only.

Bounded (STYLE 19): at most `MAX_KEYS` keys, the least recently failed forgotten first, so a flood of source
addresses costs a fixed amount of memory. Log lines about failures are summarised (`gateway.observe.LogSummary`).

Ownership: `exposers.http.build_app` creates one throttle per listener; it lives in memory and goes with the process.
"""

from __future__ import annotations

import ipaddress
import math
import time
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass

from starlette.responses import JSONResponse, Response
from starlette.types import Scope

from gateway.identity import Identity, credential_owner
from gateway.observe import LogSummary, Metrics

MAX_KEYS = 4096
"""Sources and identities with failures remembered at once (a judgment call: about 400 KB)."""
FREE_FAILURES = 5
"""Failures a key may have before it is blocked: a typo or two, an expired session after a restart."""
BASE_BACKOFF = 1.0
MAX_BACKOFF = 300.0
"""Seconds of the first block, doubling with each failure after it, and the longest one."""
FORGET_AFTER = 900.0
"""Seconds without a failure after which a key's count starts again from zero."""
REASONS = ("invalid_token", "invalid_request", "console_sign_in", "session_mismatch", "throttled")
"""The `reason` label of `triad_auth_failures_total`: a fixed set, never anything a client sends."""


@dataclass
class _Record:
    failures: int = 0
    blocked_until: float = 0.0
    last: float = 0.0


def source_key(scope: Scope) -> str:
    """The caller's address as uvicorn reports it (`X-Forwarded-For` only from the addresses uvicorn trusts,
    loopback by default); an IPv6 address by its /64."""
    client = scope.get("client")
    host = client[0] if client else "unknown"
    try:
        address = ipaddress.ip_address(host)
    except ValueError:
        return f"source {host[:64]}"
    if isinstance(address, ipaddress.IPv6Address):
        if address.ipv4_mapped is not None:
            return f"source {address.ipv4_mapped}"
        return f"source {ipaddress.ip_network(f'{address}/64', strict=False)}"
    return f"source {address}"


def identity_key(identity: Identity) -> str:
    return f"identity {credential_owner(identity)}"


class AuthThrottle:
    def __init__(self, metrics: Metrics, log: LogSummary, clock: Callable[[], float] = time.monotonic,
                 max_keys: int = MAX_KEYS) -> None:
        self._metrics = metrics
        self._log = log
        self._clock = clock
        self._max_keys = max_keys
        self._records: OrderedDict[str, _Record] = OrderedDict()

    def __len__(self) -> int:
        return len(self._records)

    def retry_after(self, *keys: str) -> int | None:
        """Whole seconds until the longest block among `keys` ends; None when none is blocked."""
        now = self._clock()
        waits = [record.blocked_until - now for key in keys if (record := self._records.get(key)) is not None]
        longest = max(waits, default=0.0)
        return math.ceil(longest) if longest > 0 else None

    def failed(self, reason: str, *keys: str) -> None:
        """One failure of `reason` (one of `REASONS`) against each of `keys`."""
        now = self._clock()
        for key in keys:
            record = self._records.pop(key, None) or _Record()
            if now - record.last > FORGET_AFTER:
                record = _Record()
            record.failures += 1
            record.last = now
            if record.failures > FREE_FAILURES:
                record.blocked_until = now + min(MAX_BACKOFF, BASE_BACKOFF * 2 ** (record.failures - FREE_FAILURES - 1))
            self._records[key] = record
        while len(self._records) > self._max_keys:
            self._records.popitem(last=False)
        self.count(reason)

    def count(self, reason: str) -> None:
        """Count (metrics, the summarised log line) a failure that is not held against anyone, such as a 429."""
        self._metrics.auth_failures.labels(reason).inc()
        self._log.note(reason)

    def refusal(self, keys: tuple[str, ...]) -> Response | None:
        """The 429 for a request from a blocked key (counted as `throttled`); None when none of `keys` is."""
        wait = self.retry_after(*keys)
        if wait is None:
            return None
        self.count("throttled")
        return JSONResponse({"error": "too_many_attempts", "error_description": "too many failed authentications; "
                             f"retry after {wait} s"}, status_code=429, headers={"Retry-After": str(wait)})
