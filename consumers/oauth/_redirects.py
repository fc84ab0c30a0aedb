"""Authorizations waiting for their redirect on Triad's own HTTP app (`/oauth/callback/<upstream>`), for
`auth: per_user` when Triad serves HTTP: the person may be on any machine, not only on Triad's.

Each waiting authorization is known by its `state` (the SDK's, 32 random bytes: unguessable; with `cluster:`
prefixed by the replica that waits for it, `<replica>.<state>`, so that whichever replica the load balancer sends
the browser to forwards the answer there: `exposers.cluster_routes`), recorded with the user who started it and
the upstream. An answer completes only that authorization, once: an unknown, expired or
already answered state, a state of another upstream, or a caller who proves another identity is refused and
changes nothing. Ownership: the daemon makes one `Redirects` per HTTP listener; `exposers.oauth_callback` answers
the route with it; the flows (`consumers.oauth`) register and wait in their own tasks.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from enum import Enum
from urllib.parse import parse_qsl, quote, urlencode, urlsplit, urlunsplit

import anyio
from mcp.client.auth import AuthorizationCodeResult

from consumers.config import AUTHORIZATION_WAIT

CALLBACK_PREFIX = "/oauth/callback/"
MAX_WAITING = 10_000
"""Authorizations waiting at once (the oldest is dropped first: its person gets "unknown or expired")."""


class Answer(Enum):
    """What became of a redirect; the exposer turns each into a page (the message says it to the person)."""

    ACCEPTED = "Triad received the authorization answer. You may close this page."
    UNKNOWN = "This authorization link is unknown, expired or was already used. Ask your client to try again."
    OTHER_UPSTREAM = "This authorization answer belongs to another upstream server."
    OTHER_IDENTITY = "This authorization was started by another identity: only its own client's person may finish it."


@dataclass
class _Waiting:
    upstream: str
    user: str
    deadline: float
    state: str
    """The SDK's own state (the one it checks the answer against)."""
    result: AuthorizationCodeResult | None = None
    received: anyio.Event = field(default_factory=anyio.Event)


class Redirects:
    def __init__(self, base_url: str, replica: str | None = None, clock: Callable[[], float] = time.monotonic) -> None:
        """`base_url`: where Triad's HTTP app is reached by people (scheme and host, no trailing slash);
        `replica`: this replica's id, with `cluster:`."""
        self.base_url = base_url.rstrip("/")
        self._replica = replica
        self._clock = clock
        self._waiting: dict[str, _Waiting] = {}

    def redirect_uri(self, upstream: str) -> str:
        return f"{self.base_url}{CALLBACK_PREFIX}{quote(upstream, safe='')}"

    def expect(self, upstream: str, user: str, authorization_url: str) -> tuple[str, str]:
        """Record the authorization `user` is about to be sent to: the URL to send them to, and the state its
        answer will carry (the key of `result`)."""
        parts = urlsplit(authorization_url)
        query = parse_qsl(parts.query, keep_blank_values=True)
        state = dict(query).get("state", "")
        if not state:
            raise ValueError("an authorization URL without state")
        public = f"{self._replica}.{state}" if self._replica is not None else state
        self._expire()
        while len(self._waiting) >= MAX_WAITING:
            del self._waiting[next(iter(self._waiting))]
        self._waiting[public] = _Waiting(upstream, user, self._clock() + AUTHORIZATION_WAIT, state)
        url = urlunsplit(parts._replace(query=urlencode([(k, public if k == "state" else v) for k, v in query])))
        return url, public

    async def result(self, state: str) -> AuthorizationCodeResult:
        """The answer to the authorization of `state` (the caller bounds the wait)."""
        waiting = self._waiting.get(state)
        if waiting is None:
            raise LookupError("no such authorization")
        try:
            await waiting.received.wait()
            assert waiting.result is not None
            return waiting.result
        finally:
            self.forget(state)

    def forget(self, state: str) -> None:
        self._waiting.pop(state, None)

    def answer(self, upstream: str, state: str, caller: str | None, code: str, iss: str | None) -> Answer:
        """A redirect arrived for `upstream`. `caller`: the user the request proves it is (a bearer token), if any."""
        self._expire()
        waiting = self._waiting.get(state) if state else None
        if waiting is None or waiting.received.is_set():
            return Answer.UNKNOWN
        if waiting.upstream != upstream:
            return Answer.OTHER_UPSTREAM
        if caller is not None and caller != waiting.user:
            return Answer.OTHER_IDENTITY
        # An `error` answer has no code: the flow then fails with the SDK's "No authorization code received".
        waiting.result = AuthorizationCodeResult(code=code, state=waiting.state, iss=iss)
        waiting.received.set()
        return Answer.ACCEPTED

    def _expire(self) -> None:
        now = self._clock()
        for state in [state for state, waiting in self._waiting.items() if waiting.deadline < now]:
            del self._waiting[state]


def state_owner(state: str) -> str | None:
    """The replica an answer's state names (with `cluster:`); None for a state without one."""
    replica, dot, _rest = state.partition(".")
    return replica if dot else None
