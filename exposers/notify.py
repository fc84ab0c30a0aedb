"""Telling connected clients that their lists changed.

Ownership: the daemon creates one `Notifier` and runs `run()` as one task in its task group. The dispatcher calls
the notifier's listener (synchronously) after every registry swap; `run()` then compares, for each tracked
handshake-era connection, that client's view before and after, and pushes `notifications/*/list_changed` only for
the lists that changed for it. The sessions are those of the notifier's directory (`exposers.sessions`, which
it creates and the other exposers share), and what it keeps of each lives on its `DownstreamSession` (what it
last told it, its resource subscriptions). 2026-07-28 clients get the same events through `subscriptions/listen`
(the SDK's subscription bus), and there the status of their own tasks Triad translates (`taskIds`, the tasks
extension). A session's outbox and upstream subscriptions are released through its connection's exit stack when it
closes.

`run()` never waits on a client: each connection has its own outbox (`_Outbox`), a bounded queue of pending
notifications, coalesced (a notification already waiting is not queued twice), drained by a task of `run()`'s task
group that lives while there is something to send. A send that takes longer than `SEND_TIMEOUT` (a client that
does not read its GET stream: its socket, the server's buffers and the SDK's streams fill up, and the next send
waits for ever) or a full queue marks the connection stuck: it is logged once and gets no more notifications.
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import itertools
import logging
from collections import deque
from collections.abc import Awaitable, Callable, Coroutine, Hashable, Iterable
from typing import Any, Protocol

import anyio
from anyio.abc import TaskGroup
from mcp.server import ServerRequestContext
from mcp.server.connection import Connection
from mcp.server.session import ServerSession
from mcp.server.subscriptions import (
    InMemorySubscriptionBus,
    ListenHandler,
    PromptsListChanged,
    ResourcesListChanged,
    ResourceUpdated,
    ToolsListChanged,
)
from mcp.shared.exceptions import MCPError
from mcp.shared.subscriptions import SUBSCRIPTION_ID_META_KEY
from mcp_types import (
    MISSING_REQUIRED_CLIENT_CAPABILITY,
    SubscriptionFilter,
    SubscriptionsAcknowledgedNotification,
    SubscriptionsListenRequestParams,
    SubscriptionsListenResult,
)

from consumers import JSON, TASK_STATUS, ClientOrigin, JSONObject
from exposers.relay import envelope_capabilities
from exposers.sessions import MAX_SUBSCRIPTIONS, DownstreamSession, SessionRelay, Sessions
from gateway.calls import Dispatcher
from gateway.errors import InvalidRequest
from gateway.hooks import Session
from gateway.identity import LOCAL, Identity
from gateway.tasks import (
    EXTENSION,
    TaskPush,
    TaskPushParams,
    declares_extension,
    key_of,
    missing_extension_data,
    with_task_id,
)

logger = logging.getLogger("triad.exposer")

RELEASE_TIMEOUT = 5.0
"""How long releasing a closed listen stream's upstream subscriptions may take."""
SEND_TIMEOUT = 10.0
"""How long handing one notification to a connection may take. A client that reads its stream takes
microseconds; one that takes this long has stopped reading, and gets no more notifications."""
OUTBOX_SIZE = 1024
"""Distinct notifications waiting for one connection (list changes, and one per subscribed resource that
changed); more, and the connection is stuck."""

EARLY_TASKS = 256
"""Tasks Triad does not know yet whose status pushes it keeps (an upstream may push a task's first status before
the result that creates it); past this, the oldest task's are dropped."""
EARLY_PUSHES = 16
"""Status pushes kept for one task not known yet; later ones replace none (the task's first statuses matter)."""

Send = Callable[[], Awaitable[None]]
ListenFn = Callable[[ServerRequestContext, SubscriptionsListenRequestParams], Awaitable[SubscriptionsListenResult]]


class SessionRecords(Protocol):
    def opened(self, session_id: str, identity: Identity) -> None: ...

    def closed(self, session_id: str) -> None: ...


class _Outbox:
    """One connection's pending notifications and the task that sends them, one at a time, each within
    `SEND_TIMEOUT`. Created by the notifier on the first notification for the connection; the drain task is started
    in `run()`'s task group when something is queued and ends when the queue is empty, or when the connection
    closes or is found stuck (`close`)."""

    def __init__(self, on_stuck: Callable[[str], None]) -> None:
        self._queue: deque[tuple[Hashable, Send]] = deque()
        self._queued: set[Hashable] = set()
        self._on_stuck = on_stuck
        self._draining: anyio.CancelScope | None = None
        self.closed = False

    def put(self, key: Hashable, send: Send, tg: TaskGroup) -> None:
        """Queue `send` unless a notification with the same `key` is waiting already (it says the same)."""
        if self.closed or key in self._queued:
            return
        if len(self._queue) >= OUTBOX_SIZE:
            self._on_stuck(f"{OUTBOX_SIZE} notifications are waiting for it")
            return
        self._queue.append((key, send))
        self._queued.add(key)
        if self._draining is None:
            self._draining = anyio.CancelScope()
            tg.start_soon(self._drain, self._draining)

    async def _drain(self, scope: anyio.CancelScope) -> None:
        with scope:
            while self._queue:
                key, send = self._queue.popleft()
                self._queued.discard(key)
                with anyio.move_on_after(SEND_TIMEOUT) as waited:
                    try:
                        await send()
                    except Exception as exc:  # a client that went away must not stop the others
                        logger.debug("could not notify a session: %s", exc)
                if waited.cancelled_caught:
                    self._on_stuck(f"a notification waited {SEND_TIMEOUT:g}s to be sent")
                    return
        if self._draining is scope:
            self._draining = None

    def close(self) -> None:
        self.closed = True
        self._queue.clear()
        self._queued.clear()
        if self._draining is not None:
            self._draining.cancel()


async def _keep(_connection: Connection) -> None:
    """Without a transport that can close a session (stdio), a stuck one is only dropped from notifications."""


class Notifier:
    def __init__(self, dispatcher: Dispatcher, sessions: Sessions, sessions_seen: SessionRecords | None = None) -> None:
        self.bus = InMemorySubscriptionBus()
        self._dispatcher = dispatcher
        self.sessions = sessions
        """The directory of live downstream sessions (`exposers.sessions`), shared with the other exposers."""
        self._dirty = anyio.Event()
        self._modern_seen = dispatcher.view(LOCAL).fingerprint
        self._subscribed: set[DownstreamSession] = set()
        """The sessions that subscribed to a resource (their release is on their connection's exit stack)."""
        self._updated: set[tuple[str, str]] = set()
        """(upstream, raw URI) of subscribed resources that changed, waiting for `run()` to tell their clients (a
        set: a flood of updates of one resource is one entry)."""
        self._listened: dict[tuple[str, str], list[str]] = {}
        """(upstream, raw URI) -> the exposed URIs 2026-07-28 listen streams subscribed to (one entry per stream)."""
        self._outboxes: dict[DownstreamSession, _Outbox] = {}
        self._tg: TaskGroup | None = None
        """`run()`'s task group: the outboxes' drain tasks."""
        self.close_session: Callable[[Any], Coroutine[Any, Any, None]] = _keep
        self.end_streams: Callable[[], None] = lambda: None
        """At the start of a drain (SIGTERM): end every session's idle GET stream and refuse new ones (set by
        `exposers.http`)."""
        """Closes a session that stopped reading (the HTTP app sets it: the client then gets 404 and opens anew)."""
        self.sessions_seen = sessions_seen
        """With `cluster:`, told of each handshake-era HTTP session opened and closed here (its owner record)."""
        self._early: dict[tuple[str, str | None, str], list[tuple[JSONObject, ClientOrigin | None]]] = {}
        """(upstream, holder, upstream task id) -> status pushes of a task not adopted yet (`EARLY_TASKS`), relayed
        once its result names it (`TaskRelay.adopted`)."""
        dispatcher.add_listener(self._on_registry)
        dispatcher.tasks.adopted = self._task_adopted
        self._pushes = itertools.count()
        """Numbers each task status push (its outbox key: `_send` coalesces equal keys)."""

    @property
    def open_sessions(self) -> int:
        """Handshake-era sessions being told of their lists' changes."""
        return sum(1 for session in self.sessions.live() if session.told is not None)

    def track(self, session: DownstreamSession, identity: Identity) -> None:
        """Tell a handshake-era session from now on of changes of `identity`'s lists."""
        if session.told is not None or session.modern:
            return
        session.told = (identity, self._dispatcher.view(identity).fingerprint)
        if session.id is not None and self.sessions_seen is not None:
            self.sessions_seen.opened(session.id, identity)
            session.connection.exit_stack.callback(self.sessions_seen.closed, session.id)

    def _on_registry(self) -> None:
        self._dirty.set()

    # -- resource subscriptions ----------------------------------------------------------------------------------

    def reserve(self, session: DownstreamSession, uri: str) -> bool:
        """`DownstreamSession.reserve`, with the session's upstream subscriptions released when it closes."""
        if session not in self._subscribed:
            self._subscribed.add(session)
            session.connection.exit_stack.push_async_callback(self._release, session)
        return session.reserve(uri)

    async def _release(self, session: DownstreamSession) -> None:
        self._subscribed.discard(session)
        await self._unsubscribe_all(session.take_subscriptions(), session.hook)

    async def _unsubscribe_all(self, subscriptions: Iterable[tuple[str, str]], session: Session | None = None) -> None:
        """Release (upstream, raw URI) subscriptions of a client that is gone (`session`'s: those made on its own
        upstream sessions end with them)."""
        for upstream, raw in subscriptions:
            try:
                await self._dispatcher.unsubscribe(upstream, raw, session, leaving=True)
            except Exception as exc:  # the client is gone either way; the upstream may be too
                logger.debug("could not unsubscribe upstream %s: %s", upstream, exc)

    def resource_updated(self, upstream: str, raw: str) -> None:
        """An upstream said a resource changed (called in its owner task); `run()` tells the subscribers."""
        self._updated.add((upstream, raw))
        self._dirty.set()

    def own_resource_updated(self, upstream: str, raw: str, origin: ClientOrigin) -> None:
        """A client's own upstream session (`sessions: per_client`) said a resource changed: that client is told,
        if it subscribed to it (its subscription was made on that session), and nobody else."""
        back = origin.back
        if not isinstance(back, SessionRelay) or self._tg is None or back.session not in self.sessions:
            return
        session = back.session
        for uri, held in list(session.subscriptions.items()):
            if held == (upstream, raw):
                self._send(session, ("updated", uri), functools.partial(session.connection.send_resource_updated, uri))

    def task_status(self, upstream: str, params: JSONObject, origin: ClientOrigin | None) -> None:
        """An upstream pushed a task's status (2025-11-25, called in the task of its read stream; `origin`: the
        downstream session whose own upstream session it came on, None for the shared one): the session that
        created the task is told, under Triad's id for it, and nobody else. A status of a task Triad does not know
        yet (the first one comes before the result that creates it, as the server's own work starts) is kept until
        the result names the task (bounded: `EARLY_TASKS`), then relayed as a direct client would have had it."""
        found = self._dispatcher.tasks.book.gateway_id(upstream, params.get("taskId"), key_of(origin))
        if found is None and isinstance(params.get("taskId"), str):
            self._keep_early((upstream, key_of(origin), params["taskId"]), params, origin)
            return
        session = self._dispatcher.tasks.session_of(found[1]) if found is not None else None
        back = session.back if session is not None else None
        # a task outlives its session: once the session ended there is nobody to tell (and an outbox made for its
        # connection now would never be forgotten: its exit stack has run)
        if found is not None and found[1].era == "2026-07-28":  # a translated task: its listen streams are told
            self._dispatcher.tasks.status_changed(*found)
            return
        if found is None or not isinstance(back, SessionRelay) or self._tg is None \
                or back.session not in self.sessions or back.session.told is None:
            return
        status = with_task_id(params, found[0])
        # never coalesced: each push is an event a direct client gets (two alike ones too), not a "changed" signal
        self._send(back.session, ("task", found[0], next(self._pushes)),
                   functools.partial(back.connection.notify, TASK_STATUS, status))

    def _keep_early(self, key: tuple[str, str | None, str], params: JSONObject, origin: ClientOrigin | None) -> None:
        kept = self._early.setdefault(key, [])
        if len(kept) < EARLY_PUSHES:
            kept.append((params, origin))
        while len(self._early) > EARLY_TASKS:
            del self._early[next(iter(self._early))]

    def _task_adopted(self, upstream: str, holder: str | None, upstream_id: str) -> None:
        """A task was adopted: the pushes of its that came before its result now reach its client."""
        for params, origin in self._early.pop((upstream, holder, upstream_id), ()):
            self.task_status(upstream, params, origin)

    def listen_handler(self, identity_of: Callable[[ServerRequestContext], Identity]) -> ListenFn:
        """`subscriptions/listen` for 2026-07-28 clients: the SDK's handler on this notifier's bus, with the
        stream's resource subscriptions made at their upstreams while it lasts (`identity_of(ctx)` routes them)."""
        inner = ListenHandler(self.bus)

        async def listen(ctx: ServerRequestContext, params: SubscriptionsListenRequestParams
                         ) -> SubscriptionsListenResult:
            uris = params.notifications.resource_subscriptions or ()
            if len(uris) > MAX_SUBSCRIPTIONS:  # each is made at its upstream: bounded as a session's are
                raise InvalidRequest(f"a listen stream may hold at most {MAX_SUBSCRIPTIONS} resource subscriptions; "
                                     f"this one asks for {len(uris)}")
            held: list[tuple[str, str, str]] = []
            try:
                for uri in uris:
                    try:
                        owner, raw = await self._dispatcher.subscribe(identity_of(ctx), {"uri": uri})
                    except Exception as exc:  # that URI gets no updates; the stream still serves
                        logger.info("a listen stream's subscription to a resource was refused: %s", exc)
                        continue
                    held.append((owner, raw, uri))
                    self._listened.setdefault((owner, raw), []).append(uri)
                task_ids = (params.notifications.model_extra or {}).get("taskIds")
                if task_ids is None:
                    return await inner(ctx, params)
                return await self._listen_with_tasks(inner, ctx, params, identity_of(ctx), task_ids)
            finally:
                for owner, raw, uri in held:
                    self._listened[(owner, raw)].remove(uri)
                    if not self._listened[(owner, raw)]:
                        del self._listened[(owner, raw)]
                with anyio.CancelScope(shield=True), anyio.move_on_after(RELEASE_TIMEOUT):
                    await self._unsubscribe_all((owner, raw) for owner, raw, _uri in held)

        return listen

    async def _listen_with_tasks(self, inner: ListenHandler, ctx: ServerRequestContext,
                                 params: SubscriptionsListenRequestParams, identity: Identity,
                                 task_ids: JSON) -> SubscriptionsListenResult:
        """A listen stream that also asks for task status pushes (`taskIds`, the tasks extension). Triad pushes
        those of the caller's own tasks that it translates (a handshake-era upstream's: `TaskRelay.watch`); the
        acknowledgement names them. A 2026-07-28 upstream's own pushes are not relayed (its tasks are not acked)."""
        if not declares_extension(envelope_capabilities(ctx.params)):
            raise MCPError(MISSING_REQUIRED_CLIENT_CAPABILITY, f"task status pushes need the {EXTENSION} extension "
                           "declared in the request's client capabilities", data=missing_extension_data())
        if not isinstance(task_ids, list) or len(task_ids) > MAX_SUBSCRIPTIONS:
            raise InvalidRequest(f"taskIds must be a list of at most {MAX_SUBSCRIPTIONS} task ids")
        pushes, pushed = anyio.create_memory_object_stream[dict[str, Any]](OUTBOX_SIZE)

        def watcher(task: JSONObject) -> None:
            with contextlib.suppress(anyio.WouldBlock, anyio.ClosedResourceError):  # optional: the client polls
                pushes.send_nowait(task)

        honored, unwatch = self._dispatcher.tasks.watch(identity, task_ids, watcher)
        acked = anyio.Event()
        meta = {SUBSCRIPTION_ID_META_KEY: ctx.request_id}

        async def push() -> None:
            await acked.wait()  # the acknowledgement is the stream's first frame
            async for task in pushed:
                await ctx.session.send_notification(  # an extension's notification: not among the SDK's types
                    TaskPush(params=TaskPushParams.model_validate({**task, "_meta": meta}, by_name=False)),  # type: ignore[arg-type]
                    related_request_id=ctx.request_id)

        try:
            async with anyio.create_task_group() as tg:
                tg.start_soon(push)
                # the SDK's handler sees the session through the wrapper that names the tasks in its acknowledgement
                stand_in = _AckNamingTasks(ctx.session, honored, acked)
                result = await inner(dataclasses.replace(ctx, session=stand_in), params)  # type: ignore[arg-type]
                tg.cancel_scope.cancel()
            return result
        finally:
            unwatch()
            pushes.close()
            pushed.close()

    # -- sending -------------------------------------------------------------------------------------------------

    def _send(self, session: DownstreamSession, key: Hashable, send: Send) -> None:
        """Queue a notification for one session (never waits: see `_Outbox`)."""
        assert self._tg is not None, "notifications are sent from run()"
        outbox = self._outboxes.get(session)
        if outbox is None:
            outbox = self._outboxes[session] = _Outbox(functools.partial(self._stuck, session))
            session.connection.exit_stack.callback(self._forget_outbox, session)
        outbox.put(key, send, self._tg)

    def _forget_outbox(self, session: DownstreamSession) -> None:
        outbox = self._outboxes.pop(session, None)
        if outbox is not None:
            outbox.close()

    def _stuck(self, session: DownstreamSession, why: str) -> None:
        outbox = self._outboxes.get(session)
        if outbox is None or outbox.closed:
            return
        outbox.close()
        logger.warning("a session of client %s stopped reading its notifications (%s); it is closed",
                       session.told[0].client_id if session.told else "?", why)
        if self._tg is not None:
            self._tg.start_soon(self.close_session, session.connection)

    async def _push_updates(self) -> None:
        updated, self._updated = self._updated, set()
        for session in list(self._subscribed):
            connection = session.connection
            for uri, owner in list(session.subscriptions.items()):
                if owner in updated:
                    self._send(session, ("updated", uri), functools.partial(connection.send_resource_updated, uri))
        for key in updated:
            for uri in set(self._listened.get(key, ())):
                await self.bus.publish(ResourceUpdated(uri=uri))

    async def run(self) -> None:
        async with anyio.create_task_group() as tg:
            self._tg = tg
            while True:
                await self._dirty.wait()
                self._dirty = anyio.Event()
                if self._updated:
                    await self._push_updates()
                await self._push()

    async def _push(self) -> None:
        for session in self.sessions.live():
            if session.told is None:
                continue
            identity, before = session.told
            after = self._dispatcher.view(identity).fingerprint
            if after == before:
                continue
            session.told = (identity, after)
            connection = session.connection
            if after[0] != before[0]:
                self._send(session, "tools", connection.send_tool_list_changed)
            if after[1] != before[1]:
                self._send(session, "resources", connection.send_resource_list_changed)
            if after[2] != before[2]:
                self._send(session, "prompts", connection.send_prompt_list_changed)
        after = self._dispatcher.view(LOCAL).fingerprint
        before, self._modern_seen = self._modern_seen, after
        kinds: tuple[ToolsListChanged | ResourcesListChanged | PromptsListChanged, ...] = (
            ToolsListChanged(), ResourcesListChanged(), PromptsListChanged())
        events = [event for i, event in enumerate(kinds) if after[i] != before[i]]
        for event in events:
            await self.bus.publish(event)


class _AckNamingTasks:
    """A listen stream's session as the SDK's `ListenHandler` sees it: the acknowledgement it sends (the first
    frame) also names the task ids Triad agreed to push (the SDK knows only its own kinds), then `acked` is set."""

    def __init__(self, session: ServerSession, task_ids: list[str], acked: anyio.Event) -> None:
        self._session, self._task_ids, self._acked = session, task_ids, acked

    async def send_notification(self, notification: Any, related_request_id: Any = None) -> None:
        if isinstance(notification, SubscriptionsAcknowledgedNotification) and self._task_ids:
            honored = SubscriptionFilter.model_validate({**notification.params.notifications.model_dump(
                by_alias=True, exclude_none=True), "taskIds": self._task_ids})
            notification = notification.model_copy(
                update={"params": notification.params.model_copy(update={"notifications": honored})})
        await self._session.send_notification(notification, related_request_id)
        self._acked.set()

    def __getattr__(self, name: str) -> Any:  # everything else is the SDK session's own, as it types it
        return getattr(self._session, name)
