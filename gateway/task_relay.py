"""The call path of tasks: a task an upstream created is recorded for its creator, and `tasks/*` requests go to the
upstream (and upstream session) that holds the task, under the upstream's own id (`gateway.tasks`).

Ownership: the dispatcher creates one `TaskRelay` with its `TaskBook` and its way to the upstreams; the exposer
calls `request()` for each `tasks/*` request it accepted (the era's gates, -32601, -32021 and -32020, are the
exposer's: `exposers.server`).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping
from typing import Any

from consumers import Upstream
from consumers.errors import UpstreamRefused
from gateway.errors import INVALID_PARAMS
from gateway.hooks import CallContext, HookChain, Outcome
from gateway.identity import Identity
from gateway.tasks import RELATED_TASK, Era, TaskBook, TaskEntry, created_task, task_request, with_task_id
from gateway.wire import expose_links, forwardable_meta

Forward = Callable[..., Awaitable[dict[str, Any]]]
"""`Dispatcher._forward`: (upstream, kind, request, **options) -> the raw result."""
MAX_LIST_PAGES = 100
"""Pages of an upstream's `tasks/list` Triad walks for one client's `tasks/list`."""


def era_of(upstream: Upstream) -> Era:
    return "2026-07-28" if upstream.modern else "2025-11-25"


class TaskRelay:
    def __init__(self, book: TaskBook, forward: Forward, upstream: Callable[[str], Upstream],
                 uri_part: Callable[[str], str | None], hooks: Callable[[], HookChain]) -> None:
        self.book = book
        self._hooks = hooks
        self._forward = forward
        self._upstream = upstream
        self._uri_part = uri_part

    def adopt(self, result: dict[str, Any], upstream: Upstream, identity: Identity, session: Any,
              call: CallContext | None) -> dict[str, Any]:
        """A `tools/call` result as its client gets it: a task the upstream created is recorded for the client
        (with the hooks' view of the call, `call`) and named by Triad's own id; any other result is returned as
        it is."""
        created = created_task(result)
        if created is None:
            return result
        task_id = self.book.adopt(upstream.name, created[0], identity, session, era_of(upstream), created[1], call)
        return with_task_id(result, task_id)

    async def request(self, identity: Identity, session: Any, method: str, params: Mapping[str, Any],
                      era: Era) -> dict[str, Any]:
        """A client's `tasks/*` request of `era`, sent to the upstream session that holds the task."""
        if method == "tasks/list":
            return await self._list(identity, session)
        task_id = params.get("taskId")
        entry = self.book.find(task_id, identity, session, era)
        assert isinstance(task_id, str)  # `find` found it
        upstream = self._upstream(entry.upstream)
        forwarded = {**params, "taskId": entry.upstream_id, "_meta": forwardable_meta(params.get("_meta"))}
        # `tasks/result` waits for the task to end: the upstream's longest call, not its usual timeout
        limits = (upstream.config.max_call_time,) * 2 if method == "tasks/result" else (None, None)
        try:
            result = await self._forward(upstream, "task", task_request(method, forwarded), client=session,
                                         call_limits=limits, caller=(identity.client_id, method))
        except UpstreamRefused as exc:
            if exc.code == INVALID_PARAMS and method == "tasks/get":
                self.book.forget(task_id)  # expired or deleted upstream: unknown from now on
            raise
        part = self._uri_part(upstream.name)
        if method == "tasks/result":  # the call's own result, marked as the task's (the spec requires it)
            final = await self._after_hooks(entry, expose_links(dict(result), part))
            found = final.get("_meta")
            meta: dict[str, Any] = found if isinstance(found, dict) else {}
            return {**final, "_meta": {**meta, RELATED_TASK: {"taskId": task_id}}}
        if isinstance(result.get("result"), dict):  # 2026-07-28: a terminal task's result, inlined
            result = {**result, "result": await self._after_hooks(entry, expose_links(dict(result["result"]), part))}
        return with_task_id(result, task_id) if "taskId" in result else result

    async def _after_hooks(self, entry: TaskEntry, result: dict[str, Any]) -> dict[str, Any]:
        """A task's result through the after-hooks, as the call's own result would have gone (a redaction hook
        must not be passed by running a tool as a task)."""
        hooks, call = self._hooks(), entry.call
        if not hooks or not isinstance(call, CallContext):
            return result
        async with call.session.lock:
            final = await hooks.after(call, Outcome(result, None, 0.0))
        return final if final is not None else result

    async def _list(self, identity: Identity, session: Any) -> dict[str, Any]:
        """The caller's own tasks (2025-11-25), as each upstream session holding some of them lists them: an
        upstream session shared by clients lists every client's, and only the caller's are kept."""
        mine = dict(self.book.owned(identity, session, "2025-11-25"))
        tasks: list[dict[str, Any]] = []
        for name in sorted({entry.upstream for entry in mine.values()}):
            upstream = self._upstream(name)
            cursor: Any = None
            for _ in range(MAX_LIST_PAGES):
                page = await self._forward(upstream, "task", task_request(
                    "tasks/list", {"cursor": cursor} if isinstance(cursor, str) else {}), client=session,
                    caller=(identity.client_id, "tasks/list"))
                for task in page.get("tasks") or ():
                    found = self.book.gateway_id(name, task.get("taskId")) if isinstance(task, dict) else None
                    if found is not None and found[0] in mine:
                        tasks.append(with_task_id(task, found[0]))
                cursor = page.get("nextCursor")
                if not isinstance(cursor, str):
                    break
        return {"tasks": tasks}
