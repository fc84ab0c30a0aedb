"""A downstream session's whole state, and the one directory of live sessions.

A downstream session is what one client holds open with Triad: a streamable HTTP session (`Mcp-Session-Id`, with
its GET stream), a legacy SSE stream, a stdio process; a 2026-07-28 request is a session of its own that lasts
one request. Everything Triad keeps about it lives on one `DownstreamSession`: the identity it is bound to, its
era (protocol version), the capabilities its client declared, its log level, the reasons of its cancellations,
its resource subscriptions, its calls in flight on the direct path, what the notifier last told it, and its hook
state (`gateway.hooks.Session`, which `gateway.calls` below the exposers uses; the downstream session holds it).
The SDK owns the transport: its `Connection` stays reachable as `session.connection`, and nothing of Triad's is
kept on `Connection.state`.

Ownership: the daemon creates the one `Sessions` directory of the process and gives it to the `Notifier`
(`notifier.sessions`, which the other exposers read); the SDK
server's handlers (`exposers.server`, which also serve stdio and legacy SSE), the relays, the notifier and the
direct path find sessions in it. A session is created by the directory, in the task serving its connection's
first request (`Sessions.of`, called by the SDK server's middleware before any handler). It is ended by the SDK:
when the transport closes, the SDK's driver unwinds the connection's exit stack (shielded and bounded, in the
task that served the connection); the directory then forgets the session before awaiting anything, and closes
its hook session (its per-client upstream sessions end with it). The notifier releases the session's upstream
subscriptions and its outbox through the same exit stack.

A session answers only the identity that opened it (DESIGN "Sessions belong to identities"): its first request
binds it (`bind`, once); every later request acts as that identity, narrowed and never widened
(`exposers.request.acting_identity`), and a caller that finds a session by its id (`Sessions.get`) must check the
principal before using it. Bounded (STYLE 19): `MAX_CANCELLATIONS` cancellations, `MAX_SUBSCRIPTIONS` subscriptions;
calls in flight are one per HTTP request the client holds open.
"""

from __future__ import annotations

import hashlib
import warnings
from typing import Any

import anyio
import mcp_types as types
from mcp.server.connection import Connection
from mcp.shared.exceptions import MCPDeprecationWarning, MCPError
from mcp_types.version import MODERN_PROTOCOL_VERSIONS

from consumers import JSON, Answer, JSONObject, Share, cancellation_of
from gateway.config import TriadConfig
from gateway.errors import InvalidRequest
from gateway.hooks import Session
from gateway.identity import Identity, credential_owner
from gateway.quotas import Ticket, share_of

LEVELS = ("debug", "info", "notice", "warning", "error", "critical", "alert", "emergency")
MAX_CANCELLATIONS = 64
"""Reasons of a session's cancellations kept for its requests' upstream cancellations (the latest ones: a reason
is read within moments of its notification, or never)."""
MAX_SUBSCRIPTIONS = 256
"""Resource subscriptions one session (or one 2026-07-28 listen stream) may hold at once: each costs an entry here
and, for a new URI, one at the upstream, so a client cannot grow either without bound."""
ASK_TIMEOUT = 60.0
"""How long a request put to a client outside any call may wait for its answer."""

Fingerprint = tuple[int, int, int]
"""A view's lists (tools, resources, prompts) as `gateway.calls.Dispatcher.view` fingerprints them."""


class DownstreamSession:
    """One downstream session's state. Created by `Sessions.of`, never directly."""

    def __init__(self, connection: Connection) -> None:
        self.connection = connection
        """The SDK's connection: the transport, the declared capabilities, the protocol version."""
        self.id = connection.session_id
        """The transport's session id (a bearer secret: never logged); None for stdio, legacy SSE, 2026-07-28."""
        self.label = label_session_id(connection.session_id or f"conn-{id(connection):x}")
        """A short, stable, non-reversible name for the session, fit for logs and audit records."""
        self.identity: Identity | None = None
        """Who opened the session (`bind`); None before its first request was served, and for 2026-07-28."""
        self.told: tuple[Identity, Fingerprint] | None = None
        """The notifier's: the identity whose view it compares and the lists last told; None: not notified."""
        self.subscriptions: dict[str, tuple[str, str] | None] = {}
        """Exposed URIs subscribed to -> (upstream, raw URI); None while the upstream is asked (`reserve`)."""
        self.calls: dict[str, tuple[anyio.CancelScope, Any]] = {}
        """Calls in flight on the direct path: JSON of the request id -> (its cancel scope, its relay)."""
        self.share: Share | None = None
        """The fair share of per-client upstreams of its identity (`bind`)."""
        self.tickets: list[Ticket] = []
        """Places of its identity's quotas the session holds (`gateway.quotas`), given back when it ends."""
        self._log_level: str | None = None
        self._cancellations: dict[str | int, JSONObject] = {}
        self._hook: Session | None = None

    @property
    def modern(self) -> bool:
        """A 2026-07-28 session (one request, no way back to its client outside it)."""
        return self.connection.protocol_version in MODERN_PROTOCOL_VERSIONS

    @property
    def protocol_version(self) -> str:
        return self.connection.protocol_version

    @property
    def capabilities(self) -> JSONObject | None:
        """What a handshake-era client declared in `initialize`; None when unknown."""
        client = self.connection.client_params
        return client.capabilities.model_dump(by_alias=True, mode="json", exclude_none=True) if client else None

    @property
    def takes_tasks(self) -> bool:
        """A handshake-era client that declared the tasks capability (2025-11-25) can run a tool as a task. (A
        2026-07-28 request takes tasks in any case: it declares the extension per request, `gateway.tasks`.)"""
        return "tasks" in (self.capabilities or {})

    @property
    def client_name(self) -> str | None:
        """The client's self-declared name, from the handshake."""
        params = self.connection.client_params
        return params.client_info.name if params is not None else None

    @property
    def log_level(self) -> str:
        """The level the session set with `logging/setLevel`; all messages until it sets one."""
        return self._log_level or LEVELS[0]

    def set_log_level(self, level: str) -> None:
        self._log_level = level

    @property
    def hook(self) -> Session:
        """The session's hook state, made on first use. Its id, which audit records carry, is the label; its key is
        a short hash of the session id (as `gateway.cluster` keys its session records). A 2026-07-28 session has no
        way back to its client outside its request."""
        if self._hook is None:
            self._hook = Session(self.label, back=None if self.modern else SessionRelay(self))
            if self.id:
                self._hook.key = hashlib.sha256(self.id.encode()).hexdigest()[:40]
            if self.identity is not None:
                self._hook.user, self._hook.share = credential_owner(self.identity), self.share
        return self._hook

    def bind(self, identity: Identity, config: TriadConfig) -> Identity:
        """Fix the session's identity (its first request's caller) and its share; the identity it has already
        wins."""
        if self.identity is None:
            self.identity, self.share = identity, share_of(config, identity)
            if self._hook is not None and self._hook.user is None:
                self._hook.user, self._hook.share = credential_owner(identity), self.share
        return self.identity

    # -- cancellations ---------------------------------------------------------------------------------------------

    def keep_cancellation(self, params: JSON) -> None:
        """A client's `notifications/cancelled`: the SDK's server cancels the request itself and keeps nothing of
        what the client said, so it is kept here (bounded; `consumers.cancellation_of`: reason, `_meta`...) for the
        upstream's cancellation, which the SDK's client sends after this runs (the SDK hands the notification on
        before the cancelled call unwinds)."""
        found = params if isinstance(params, dict) else {}
        request_id, said = found.get("requestId"), cancellation_of(found)
        # unvalidated here: anything but a JSON-RPC id (a string or an integer) names no request
        if said is None or not isinstance(request_id, str | int) or isinstance(request_id, bool):
            return
        self._cancellations[request_id] = said
        while len(self._cancellations) > MAX_CANCELLATIONS:
            del self._cancellations[next(iter(self._cancellations))]

    def cancellation(self, request_id: JSON) -> JSONObject | None:
        """What the client said when it cancelled request `request_id`."""
        return self._cancellations.get(request_id) if isinstance(request_id, str | int) else None

    # -- resource subscriptions ------------------------------------------------------------------------------------

    def reserve(self, uri: str) -> bool:
        """Take a place for a new subscription to `uri` before its upstream is asked, so that subscriptions sent at
        once cannot pass `MAX_SUBSCRIPTIONS` together; False when the session holds (or is making) that one."""
        if uri in self.subscriptions:
            return False
        if len(self.subscriptions) >= MAX_SUBSCRIPTIONS:
            raise InvalidRequest(f"this session has {len(self.subscriptions)} resource subscriptions, the most one "
                                 "session may hold; unsubscribe from one before subscribing to another")
        self.subscriptions[uri] = None
        return True

    def subscribe(self, uri: str, upstream: str, raw: str) -> bool:
        """Fill the place `reserve` took with the upstream's subscription; False when the place is gone meanwhile
        (unsubscribed, the session ended): that upstream subscription is then the caller's to release."""
        if uri not in self.subscriptions or self.subscriptions[uri] is not None:
            return False
        self.subscriptions[uri] = (upstream, raw)
        return True

    def unreserve(self, uri: str) -> None:
        """The upstream refused the subscription `reserve` took a place for: the place is free again."""
        if uri in self.subscriptions and self.subscriptions[uri] is None:
            del self.subscriptions[uri]

    def unsubscribe(self, uri: str) -> tuple[str, str] | None:
        """(upstream, raw URI) of the subscription to release; None when there is none (or it is still being made:
        `subscribe` then finds its place gone)."""
        return self.subscriptions.pop(uri, None)

    def take_subscriptions(self) -> list[tuple[str, str]]:
        """The upstream subscriptions the session holds, to release: it holds none afterwards."""
        held, self.subscriptions = self.subscriptions, {}
        return [subscription for subscription in held.values() if subscription is not None]

    async def close(self) -> None:
        if self._hook is not None:
            await self._hook.close()


class Sessions:
    """The directory of live downstream sessions: by connection (what the SDK hands a handler) and by session id
    (what an HTTP request names). See the module docstring for who creates and ends them."""

    def __init__(self) -> None:
        self._by_connection: dict[Connection, DownstreamSession] = {}
        self._by_id: dict[str, DownstreamSession] = {}

    def of(self, connection: Connection) -> DownstreamSession:
        """The session of `connection`, created on its first request and forgotten when the SDK closes it."""
        found = self._by_connection.get(connection)
        if found is None:
            found = self._by_connection[connection] = DownstreamSession(connection)
            if connection.session_id is not None:
                self._by_id[connection.session_id] = found
            connection.exit_stack.push_async_callback(self._end, found)
        return found

    def adopt(self, session_id: str, ticket: Ticket) -> bool:
        """The live session `session_id` holds `ticket` until it ends; False (and the place given back now) when
        there is no such session (the request did not open one, or it ended already)."""
        found = self._by_id.get(session_id)
        if found is None:
            ticket()
            return False
        found.tickets.append(ticket)
        return True

    def get(self, session_id: str) -> DownstreamSession | None:
        """A live handshake-era session bound to its identity, by its id; None for a session Triad does not have
        (never opened, closed, reaped). The caller checks that the session's identity is its caller's."""
        found = self._by_id.get(session_id)
        return found if found is not None and found.identity is not None and not found.modern else None

    def __contains__(self, session: object) -> bool:
        return isinstance(session, DownstreamSession) and self._by_connection.get(session.connection) is session

    def live(self) -> list[DownstreamSession]:
        """The live sessions, oldest first (a copy: safe to iterate across awaits)."""
        return list(self._by_connection.values())

    async def _end(self, session: DownstreamSession) -> None:
        """The SDK closed the session's connection: forget it, then close its hook session."""
        if self._by_connection.get(session.connection) is session:
            del self._by_connection[session.connection]
        if session.id is not None and self._by_id.get(session.id) is session:
            del self._by_id[session.id]
        tickets, session.tickets = session.tickets, []
        for ticket in tickets:
            ticket()
        await session.close()


class SessionRelay:
    """A handshake-era session's own channel to its client, outside any request (its standalone stream; stdio's
    pipe): where a per-client upstream session's logs and requests go when no call of the client is in flight
    (server-filesystem asks for roots right after `initialize`). A request the client does not answer within
    `ASK_TIMEOUT` (an HTTP client without a GET stream never sees it) gets an error, never a hang."""

    modern = False
    cancellation = None  # a session is never cancelled; its requests are

    def __init__(self, session: DownstreamSession) -> None:
        self.session = session
        """The session (also for notifications not about a request: a task's status)."""

    @property
    def connection(self) -> Connection:
        return self.session.connection

    @property
    def capabilities(self) -> JSONObject | None:
        return self.session.capabilities

    @property
    def log_level(self) -> str | None:
        return self.session.log_level

    async def log(self, params: types.LoggingMessageNotificationParams) -> None:
        if not wants_log(params.level, self.log_level):
            return
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", MCPDeprecationWarning)
            await self.connection.log(params.level, params.data, params.logger, meta=params.meta)

    async def progress(self, params: JSONObject) -> None:
        """Progress belongs to a request; a session has none of its own."""

    async def lists_changed(self, family: str) -> None:
        """One of the session's own lists changed (`consumers.relay.ListsChanged`)."""
        await self.connection.notify(f"notifications/{family}/list_changed", None)

    async def ask(self, request: types.ServerRequest, result_type: type[Answer]) -> Answer | types.ErrorData:
        try:
            with anyio.fail_after(ASK_TIMEOUT):
                answer = await self.connection.send_raw_request(
                    request.method, request.params.model_dump(by_alias=True, mode="json", exclude_none=True)
                    if request.params is not None else None)
            return result_type.model_validate(answer, by_name=False)
        except MCPError as exc:
            return exc.error
        except TimeoutError:
            return types.ErrorData(code=types.INTERNAL_ERROR, message=(
                f"the client did not answer {request.method} within {ASK_TIMEOUT:g}s"))
        except ValueError:
            return types.ErrorData(code=types.INVALID_PARAMS, message=f"the client's answer to {request.method} "
                                   "is not valid")


def label_session_id(session_id: str) -> str:
    """A session id's label: what logs and audit records name the session by (the id itself is a bearer secret)."""
    return "s-" + hashlib.sha256(session_id.encode()).hexdigest()[:12]


def wants_log(level: str, wanted: str | None) -> bool:
    """A log message at `level` goes to a client that asked for `wanted` and above (None: no logs)."""
    return wanted is not None and LEVELS.index(level) >= LEVELS.index(wanted)
