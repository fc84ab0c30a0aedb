"""Who may use the console: owners, signed in with their bearer token, held in a session cookie; and the clients
listed in `approval.approvers`, who see the approval queue only (`ConsoleSession.owner` False).

Sign-in takes an owner client's token once and answers with a random session id in an HttpOnly, SameSite=Strict
cookie scoped to `/console`; the token itself is never stored (only its digest, so that a reload that changes or
removes the token, or takes `owner` away, ends the sign-in at the next page). Every action (a POST) must carry the
session's CSRF token and come from this very origin: `Origin` (or, without it, `Sec-Fetch-Site`) must name the
console's own scheme, host and port. The listener's Host/Origin rules (`HostGuard`) apply before all this.

Ownership: `build_console` creates one `ConsoleSessions`; it lives in memory, bounded (`MAX_SESSIONS`), and is gone
with the process (signing in again is cheap).
"""

from __future__ import annotations

import hashlib
import hmac
import secrets
import time
from collections import OrderedDict
from dataclasses import dataclass

from starlette.requests import Request

from gateway.config import TriadConfig
from gateway.identity import identity_for_token, requires_token

COOKIE = "triad_console"
COOKIE_PATH = "/console"
CSRF_FIELD = "csrf"
MAX_SESSIONS = 64
"""Console sign-ins kept at once; the oldest is forgotten first (operators are few)."""
MAX_TOKEN_LENGTH = 4096
"""A longer sign-in token is refused unread: no configured token is that long."""


def _digest(value: str) -> str:
    return hashlib.sha256(value.encode()).hexdigest()


@dataclass
class ConsoleSession:
    client_id: str
    token_digest: str
    csrf: str
    expires: float
    owner: bool = True
    """False for an approver who is not an owner: the approval queue is all they may see and answer."""


class ConsoleSessions:
    def __init__(self, lifetime: float) -> None:
        self.lifetime = lifetime
        self._sessions: OrderedDict[str, ConsoleSession] = OrderedDict()
        """By the digest of the session id: the cookie's value is not kept either."""

    def sign_in(self, config: TriadConfig, token: str) -> tuple[str, ConsoleSession] | None:
        """A new session for an owner's or an approver's token; None for any other token (or when no client has a
        token)."""
        if not requires_token(config) or not token or len(token) > MAX_TOKEN_LENGTH:
            return None
        identity = identity_for_token(config, token)
        if identity is None or not (identity.owner or identity.client_id in config.approval.approvers):
            return None
        session_id = secrets.token_urlsafe(32)
        session = ConsoleSession(identity.client_id, _digest(token), secrets.token_urlsafe(32),
                                 time.monotonic() + self.lifetime, identity.owner)
        self._sessions[_digest(session_id)] = session
        while len(self._sessions) > MAX_SESSIONS:
            self._sessions.popitem(last=False)
        return session_id, session

    def lookup(self, config: TriadConfig, request: Request) -> ConsoleSession | None:
        """The request's session, if it is live and its client is still an owner (or approver) with the same
        token."""
        session_id = request.cookies.get(COOKIE)
        if not session_id:
            return None
        key = _digest(session_id)
        session = self._sessions.get(key)
        if session is None:
            return None
        client = config.clients.get(session.client_id)
        token = client.token.get_secret_value() if client is not None and client.token is not None else None
        if (time.monotonic() > session.expires or client is None or token is None
                or not (client.owner or session.client_id in config.approval.approvers)
                or not hmac.compare_digest(_digest(token), session.token_digest)):
            del self._sessions[key]
            return None
        session.owner = client.owner  # a reload that takes `owner` away leaves an approver the queue only
        return session

    def sign_out(self, request: Request) -> None:
        session_id = request.cookies.get(COOKIE)
        if session_id:
            self._sessions.pop(_digest(session_id), None)


def same_origin(request: Request) -> bool:
    """The request comes from a page of this very origin (scheme, host and port), not from another site or port.

    `Origin` is what browsers send with a POST; where it is absent, `Sec-Fetch-Site` says whether the request is
    same-origin; a client that sends neither is not a browser, and the CSRF token is what it must hold."""
    origin = request.headers.get("origin")
    if origin is not None:
        own = f"{request.url.scheme}://{request.headers.get('host', '')}"
        return origin == own
    site = request.headers.get("sec-fetch-site")
    return site is None or site in ("same-origin", "none")


def csrf_ok(session: ConsoleSession, sent: object) -> bool:
    return isinstance(sent, str) and hmac.compare_digest(sent.encode(), session.csrf.encode())
