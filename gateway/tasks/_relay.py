"""The call path of tasks: a task an upstream created is recorded for its creator, and `tasks/*` requests go to the
upstream (and upstream session) that holds the task, under the upstream's own id (`gateway.tasks`). A 2026-07-28
client's task on a handshake-era upstream is translated (`gateway.tasks`).

Ownership: the dispatcher creates one `TaskRelay` with its `TaskBook`, its way to the upstreams and a read-only
view of the state of the moment (`Forwarding`, `Current`); the exposer calls `request()` for each `tasks/*` request
it accepted (the era's gates, -32601, -32021 and -32020, are the exposer's: `exposers.server`). The daemon runs
`run()`, the task group of the `tasks/result` streams Triad holds open for the questions of translated tasks
(`InputBridge`).
"""

from __future__ import annotations

import logging
import weakref
from collections.abc import Callable, Iterable, Mapping

import anyio
from anyio.abc import TaskGroup, TaskStatus

from consumers import CURRENT_DOWNSTREAM, JSON, ClientOrigin, JSONObject, Upstream
from consumers.errors import UpstreamError, UpstreamRefused
from gateway.errors import INVALID_PARAMS, TriadError, UnknownName
from gateway.hooks import CallContext, Outcome, Session
from gateway.identity import Identity
from gateway.registry import expose_links, forwardable_meta
from gateway.tasks._eras import (
    InputBridge,
    NotATask,
    failed_error,
    legacy_task_param,
    modern_created,
    modern_task,
    without_related_task,
)
from gateway.tasks._records import (
    RELATED_TASK,
    TERMINAL,
    Era,
    TaskBook,
    TaskEntry,
    created_task,
    declares_extension,
    task_request,
    with_task_id,
)
from gateway.tasks._relayed import (
    BridgeDownstream,
    KeptCall,
    TaskNamingDownstream,
    cursor_at,
    cursor_position,
    era_of,
    holder_of,
    kept_call,
    key_of,
    refused_as_triads,
)
from gateway.tasks._seams import Current, Forwarding

Watcher = Callable[[JSONObject], None]
"""Told a translated task as its `tasks/get` shows it (a DetailedTask, with Triad's id), each time it changes."""
Unwatch = Callable[[], None]
MAX_LIST_PAGES = 100
"""Pages of an upstream's `tasks/list` Triad walks for one client's `tasks/list`."""
OUTCOME_WAIT = 5.0
"""How long a `tasks/get` of a translated task the upstream calls terminal waits for the `tasks/result` stream
Triad holds for its questions to end with its outcome (it ends as the task does; past this, Triad asks again)."""
logger = logging.getLogger(__name__)


class TaskRelay:
    def __init__(self, book: TaskBook, upstreams: Forwarding, current: Current) -> None:
        """`upstreams`: the way to the upstreams; `current`: the hook chain, page size and URI parts of the moment."""
        self.book = book
        self._current = current
        self._sessions: weakref.WeakValueDictionary[str, Session] = weakref.WeakValueDictionary()
        """The live downstream sessions that hold tasks, by key: where a task's status pushes go (in-process)."""
        self._forward = upstreams.forward
        self._upstream = upstreams.upstream
        self._uri_part = current.uri_part
        self._bridges: dict[str, InputBridge] = {}
        self._watchers: dict[str, list[Watcher]] = {}
        """Translated tasks' ids -> who is told of each change of theirs (`watch`: 2026-07-28 listen streams)."""
        self._telling: dict[str, bool] = {}
        """Translated tasks whose watchers are being told (one at a time, in order) -> it changed again since."""
        self._tg: TaskGroup | None = None
        self.adopted: Callable[[str, str | None, str], None] = lambda _upstream, _holder, _upstream_id: None
        """Told (upstream, holder, upstream id) of each task adopted (the notifier then relays the status pushes
        that came before the result naming it: set once, by the daemon)."""

    async def run(self, *, task_status: TaskStatus[None] = anyio.TASK_STATUS_IGNORED) -> None:
        """Own the `tasks/result` streams held open for translated tasks' questions (for the daemon's life)."""
        async with anyio.create_task_group() as tg:
            self._tg = tg
            task_status.started()
            await anyio.sleep_forever()

    def task_param(self, upstream: Upstream, tool: Mapping[str, JSON], params: Mapping[str, JSON], name: str,
                   era: Era) -> JSON:
        """The `params.task` of a call to `upstream` (None: none). A 2026-07-28 upstream decides itself; a
        handshake-era one gets a 2025-11-25 client's own, and for a 2026-07-28 client one that follows from the
        tool's `taskSupport` and whether the request declares the extension (`gateway.tasks`)."""
        if upstream.modern:
            if era == "2025-11-25" and params.get("task") is not None:
                raise NotATask(f"{name} does not run as a task (its upstream speaks 2026-07-28 tasks)")
            return None
        if era == "2026-07-28":  # what this request declared (`capabilities`: of the request at 2026-07-28)
            downstream = CURRENT_DOWNSTREAM.get()
            return legacy_task_param(tool, downstream is not None and declares_extension(downstream.capabilities),
                                     name)
        return params.get("task")

    def adopt(self, result: JSONObject, upstream: Upstream, identity: Identity, session: object,
              call: CallContext | None, era: Era) -> JSONObject:
        """A `tools/call` result as its client (of `era`) gets it: a task the upstream created is recorded for
        the client (with the hooks' view of the call, `call`) and named by Triad's own id; any other result is
        returned as it is."""
        created = created_task(result)
        if created is None:
            return result
        if era != era_of(upstream):
            if upstream.modern:  # no 2025-11-25 client asks a 2026 upstream for a task (it declares no extension)
                return result
            result = modern_created(result)
        if isinstance(session, Session) and era == "2025-11-25":
            self._sessions[session.key] = session
        holder = holder_of(upstream, session)
        downstream = CURRENT_DOWNSTREAM.get() if era == "2026-07-28" else None
        task_id = self.book.adopt(upstream.name, created[0], identity, key_of(session), era, created[1],
                                  kept_call(call), holder, downstream.capabilities if downstream else None)
        self.adopted(upstream.name, holder, created[0])
        return with_task_id(result, task_id)

    # -- status pushes of translated tasks (2026-07-28 `notifications/tasks`, on `subscriptions/listen`) --------

    def watch(self, identity: Identity, task_ids: Iterable[JSON], watcher: Watcher) -> tuple[list[str], Unwatch]:
        """Have `watcher` told each change of the caller's own translated tasks among `task_ids` (a 2026-07-28
        listen stream's `taskIds`), as the task's `tasks/get` would show it then. Returns the ids it will be told
        of (another's, an unknown id, or a task of a 2026 upstream: not) and the callable that stops it."""
        honored: list[str] = []
        for task_id in dict.fromkeys(task_id for task_id in task_ids if isinstance(task_id, str)):
            try:
                entry = self.book.find(task_id, identity, None, "2026-07-28")
                upstream = self._upstream(entry.upstream)
            except (UnknownName, UpstreamError):  # not the caller's, or its upstream was removed by a reload
                continue
            if not upstream.modern:
                honored.append(task_id)
                self._watchers.setdefault(task_id, []).append(watcher)

        def unwatch() -> None:
            for task_id in honored:
                watching = self._watchers.get(task_id, [])
                if watcher in watching:
                    watching.remove(watcher)
                if not watching:
                    self._watchers.pop(task_id, None)

        return honored, unwatch

    def status_changed(self, task_id: str, entry: TaskEntry) -> None:
        """A translated task changed (its upstream pushed its status, asked a question, or ended): its watchers are
        told, after a `tasks/get` of Triad's own (a push of the upstream says only its status, and may come out of
        order)."""
        if task_id not in self._watchers or self._tg is None:
            return
        if task_id in self._telling:  # told again once the current round ends
            self._telling[task_id] = True
            return
        self._telling[task_id] = False
        self._tg.start_soon(self._tell_watchers, task_id, entry, name=f"task-status-{entry.upstream}")

    async def _tell_watchers(self, task_id: str, entry: TaskEntry) -> None:
        owner = Identity(client_id=entry.owner[0], principal=entry.owner[1])
        try:
            while task_id in self._watchers:
                self._telling[task_id] = False
                try:
                    task = await self._translated(task_id, entry, self._upstream(entry.upstream), owner,
                                                  "tasks/get", {})
                except Exception as exc:  # pushes are optional: the client's own tasks/get tells it the same
                    logger.debug("could not get the status of a task of %s to push it: %s", entry.upstream, exc)
                    return
                for watcher in list(self._watchers.get(task_id, ())):
                    watcher(task)
                if task.get("status") in TERMINAL:
                    self._watchers.pop(task_id, None)
                if not self._telling[task_id]:
                    return
        finally:
            self._telling.pop(task_id, None)

    def session_of(self, entry: TaskEntry) -> Session | None:
        """The downstream session that created a handshake-era task, while it lasts (in this process)."""
        return self._sessions.get(entry.session) if entry.session is not None else None

    async def request(self, identity: Identity, session: ClientOrigin | None, method: str, params: Mapping[str, JSON],
                      era: Era) -> JSONObject:
        """A client's `tasks/*` request of `era`, sent to the upstream session that holds the task."""
        if method == "tasks/list":
            return await self._list(identity, session, params.get("cursor"))
        task_id = params.get("taskId")
        entry = self.book.find(task_id, identity, key_of(session), era)
        assert isinstance(task_id, str)  # `find` found it
        upstream = self._upstream(entry.upstream)
        if entry.era != era_of(upstream):
            return {"resultType": "complete", **await self._translated(task_id, entry, upstream, identity, method,
                                                                       params)}
        forwarded = {**params, "taskId": entry.upstream_id, "_meta": forwardable_meta(params.get("_meta"))}
        # `tasks/result` waits for the task to end: the upstream's longest call, not its usual timeout
        limits = (upstream.config.max_call_time,) * 2 if method == "tasks/result" else (None, None)
        downstream = CURRENT_DOWNSTREAM.get()
        token = CURRENT_DOWNSTREAM.set(TaskNamingDownstream(downstream, self._renamer(entry), lambda value: (
            entry.upstream_id if value == task_id else None))) if downstream is not None else None
        try:
            result = await self._forward(upstream, "task", task_request(method, forwarded), client=session,
                                         call_limits=limits, caller=(identity.client_id, method))
        except UpstreamRefused as exc:
            if exc.code == INVALID_PARAMS and method == "tasks/get":
                self.book.forget(task_id)  # expired or deleted upstream: unknown from now on
            raise refused_as_triads(exc, entry, task_id) from exc
        finally:
            if token is not None:
                CURRENT_DOWNSTREAM.reset(token)
        part = self._uri_part(upstream.name)
        if method == "tasks/result":  # the call's own result, marked as the task's (the spec requires it)
            final = await self._after_hooks(entry, expose_links(dict(result), part))
            found = final.get("_meta")
            meta: JSONObject = found if isinstance(found, dict) else {}
            return {**final, "_meta": {**meta, RELATED_TASK: {"taskId": task_id}}}
        if isinstance(result.get("result"), dict):  # 2026-07-28: a terminal task's result, inlined
            result = {**result, "result": await self._after_hooks(entry, expose_links(dict(result["result"]), part))}
        return with_task_id(result, task_id) if "taskId" in result else result

    def _renamer(self, entry: TaskEntry) -> Callable[[JSON], str | None]:
        """Triad's id for a task id of the upstream session holding `entry`'s task, when the task is the same
        owner's (a question about another's task on a shared session names none)."""

        def rename(upstream_id: JSON) -> str | None:
            found = self.book.gateway_id(entry.upstream, upstream_id, entry.holder)
            return found[0] if found is not None and found[1].owner == entry.owner else None

        return rename

    # -- a 2026-07-28 client's task on a handshake-era upstream (`gateway.tasks`) ----------------------------

    async def _translated(self, task_id: str, entry: TaskEntry, upstream: Upstream, identity: Identity,
                          method: str, params: Mapping[str, JSON]) -> JSONObject:
        bridge = self._bridges.get(task_id)
        if method == "tasks/update":
            if bridge is not None:
                bridge.answer(params.get("inputResponses"))
            return {}
        if method == "tasks/cancel":
            try:
                await self._send(task_id, upstream, entry, identity, "tasks/cancel")
            except UpstreamRefused as exc:  # a terminal task: 2026's cancel is an idempotent ack
                if exc.code != INVALID_PARAMS:
                    raise
            return {}
        try:
            task = await self._send(task_id, upstream, entry, identity, "tasks/get")
        except UpstreamRefused as exc:
            if exc.code == INVALID_PARAMS:
                self.book.forget(task_id)
            raise
        out = {**modern_task(task), "taskId": task_id}
        status = task.get("status")
        if status == "input_required":
            # looked up again: another get of the task may have opened it meanwhile (one stream per task: two
            # would each be asked its questions, and an upstream on stdio could not tell them apart)
            bridge = self._bridges.get(task_id) or self._open_bridge(task_id, entry, upstream, identity)
            if bridge.pending:
                return {**out, "inputRequests": dict(bridge.pending)}
            # Nothing to answer yet (asked nothing so far, or all answered): 2026's input_required needs a
            # non-empty inputRequests, so `working` until a question comes; never waiting for one (an upstream
            # may stay input_required without asking anything), the client polls again.
            out["status"] = "working"
        elif status in ("completed", "failed"):
            outcome = await self._outcome(task_id, bridge, upstream, entry, identity)
            self._bridges.pop(task_id, None)
            if "error" in outcome:
                return {**out, "status": "failed", "error": outcome["error"]}
            payload = expose_links(without_related_task(outcome["result"]), self._uri_part(upstream.name))
            return {**out, "status": "completed", "result": await self._after_hooks(entry, payload)}
        elif status in TERMINAL:
            self._bridges.pop(task_id, None)
        return out

    async def _send(self, task_id: str, upstream: Upstream, entry: TaskEntry, identity: Identity, method: str,
                    final: bool = False) -> JSONObject:
        """`method` about the entry's task, to the upstream that holds it (`final`: `tasks/result`, which waits)."""
        limits = (upstream.config.max_call_time,) * 2 if final else (None, None)
        try:
            return await self._forward(upstream, "task", task_request(method, {"taskId": entry.upstream_id}),
                                       call_limits=limits, caller=(identity.client_id, method))
        except UpstreamRefused as exc:
            raise refused_as_triads(exc, entry, task_id) from exc

    async def _outcome(self, task_id: str, bridge: InputBridge | None, upstream: Upstream, entry: TaskEntry,
                       identity: Identity) -> JSONObject:
        """A terminal task's payload: `{"result": ...}` or `{"error": ...}` (its `tasks/result`)."""
        if bridge is not None:
            with anyio.move_on_after(OUTCOME_WAIT):  # the stream Triad holds ends as the task does
                await bridge.done.wait()
            if bridge.outcome is not None:
                return bridge.outcome
        try:
            return {"result": await self._send(task_id, upstream, entry, identity, "tasks/result", final=True)}
        except UpstreamRefused as exc:
            return {"error": failed_error(exc)}

    def _open_bridge(self, task_id: str, entry: TaskEntry, upstream: Upstream, identity: Identity) -> InputBridge:
        if self._tg is None:
            raise UpstreamError(upstream.name, "Triad cannot take this task's questions yet (starting)")
        for gone in [known for known in self._bridges if known not in self.book]:  # expired, never read again
            del self._bridges[gone]
        bridge = self._bridges[task_id] = InputBridge(lambda: self.status_changed(task_id, entry))

        async def hold() -> None:
            token = CURRENT_DOWNSTREAM.set(BridgeDownstream(bridge, entry.asks))
            try:
                result = await self._send(task_id, upstream, entry, identity, "tasks/result", final=True)
                bridge.finish({"result": result})
            except TriadError as exc:
                bridge.finish({"error": failed_error(exc)})
            except Exception:
                logger.exception("tasks/result of %s's task failed", upstream.name)
                bridge.finish({"error": failed_error(None)})
            finally:
                CURRENT_DOWNSTREAM.reset(token)

        self._tg.start_soon(hold, name=f"task-questions-{upstream.name}")
        return bridge

    async def _after_hooks(self, entry: TaskEntry, result: JSONObject) -> JSONObject:
        """A task's result through the after-hooks, as the call's own result would have gone (a redaction hook
        must not be passed by running a tool as a task)."""
        hooks, kept = self._current.hooks, entry.call
        if not hooks or not isinstance(kept, KeptCall):
            return result
        call = kept.context()
        async with call.session.lock:
            final = await hooks.after(call, Outcome(result, None, 0.0))
        return final if final is not None else result

    async def _list(self, identity: Identity, session: ClientOrigin | None, cursor: JSON) -> JSONObject:
        """A page of the caller's own tasks (2025-11-25), oldest first, as each upstream session holding some of
        them lists them (an upstream session shared by clients lists every client's; only the caller's are kept).
        The cursor is Triad's own: where the page ended in the order Triad adopted the tasks."""
        after = cursor_position(cursor)
        mine = sorted(self.book.owned(identity, key_of(session), "2025-11-25"), key=lambda item: item[1].seq)
        rest = [(task_id, entry) for task_id, entry in mine if entry.seq > after]
        size = max(1, self._current.page_size)
        page = dict(rest[:size])
        found: dict[str, JSONObject] = {}
        for name in sorted({entry.upstream for entry in page.values()}):
            upstream, upstream_cursor = self._upstream(name), None
            holder = holder_of(upstream, session)
            for _ in range(MAX_LIST_PAGES):
                listed = await self._forward(upstream, "task", task_request(
                    "tasks/list", {"cursor": upstream_cursor} if isinstance(upstream_cursor, str) else {}),
                    client=session, caller=(identity.client_id, "tasks/list"))
                for task in listed.get("tasks") or ():
                    known = self.book.gateway_id(name, task.get("taskId"), holder) if isinstance(task, dict) else None
                    if known is not None and known[0] in page:
                        found[known[0]] = with_task_id(task, known[0])
                upstream_cursor = listed.get("nextCursor")
                if not isinstance(upstream_cursor, str) or len(found) == len(page):
                    break
        out: JSONObject = {"tasks": [found[task_id] for task_id in page if task_id in found]}
        if len(rest) > size:
            out["nextCursor"] = cursor_at(page[list(page)[-1]].seq)
        return out
