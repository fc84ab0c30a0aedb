"""Tasks (the MCP tasks extension) through Triad: which upstream holds each task, and who may see it.

Both eras where the spec defines tasks are relayed, each to upstreams of its own era, and a 2026-07-28 client's
also to handshake-era upstreams, translated (`gateway.tasks`: the two are not wire-compatible):
- 2025-11-25: a `tools/call` with `params.task` gets a `CreateTaskResult` (`{task: {taskId, ...}}`); then
  `tasks/get`, `tasks/result`, `tasks/list`, `tasks/cancel`; `notifications/tasks/status` pushed on the session.
- 2026-07-28 (`io.modelcontextprotocol/tasks`): the upstream decides per call (`{resultType: "task", taskId, ...}`)
  for a request that declares the extension in its `_meta`; then `tasks/get`, `tasks/update`, `tasks/cancel`;
  `notifications/tasks` on a `subscriptions/listen` stream that names the task in `taskIds` (Triad pushes those
  of the tasks it translates; a 2026 upstream's own pushes are not relayed).

An upstream's task id never reaches a client. For each task an upstream creates, Triad mints an id of its own
(random, 192 bits: ids of two upstreams cannot collide, and an id says nothing of its upstream; with `cluster:` it
names the replica that holds it, `TASK_PREFIX`) and keeps it in a `TaskBook` until the task's TTL runs out: the
upstream, the upstream session that holds it (with `sessions: per_client` the client's own: such sessions may
number their tasks alike), the upstream's id, who created it (the principal, and in the handshake era the
downstream session's key, `gateway.hooks.Session.key`). Each principal holds at most `MAX_TASKS_PER_OWNER`.
A request naming a task that someone else created gets exactly the error of an unknown task, and `tasks/list` shows a
caller only its own, a page at a time. The table is plain data keyed by the id, so it could live in Redis, but for
`call` (the hooks' view of the creating call, in-process; its session held only weakly).

Ownership: the dispatcher creates one `TaskBook`; it is touched only by the call path (no task of its own).
"""

from __future__ import annotations

import secrets
import time
from collections import Counter
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any, ClassVar, Literal

import mcp_types as types
from pydantic import ConfigDict

from consumers import JSON, JSONObject
from gateway.errors import UnknownName
from gateway.identity import Identity

EXTENSION = "io.modelcontextprotocol/tasks"
"""The 2026-07-28 tasks extension's identifier (`capabilities.extensions`, and a request's `_meta`)."""
RELATED_TASK = "io.modelcontextprotocol/related-task"
MAX_TASKS = 10_000
"""Tasks Triad keeps track of at once; past this, the oldest is forgotten first (its id then looks unknown)."""
MAX_TASKS_PER_OWNER = 1_000
"""Tasks one principal holds at once; past this, its own oldest is forgotten first (one client must not push out
everyone else's tasks)."""
MAX_TTL = 24 * 3600.0
"""How long Triad keeps a task it relayed at most, in seconds (an upstream's `ttl: null` means unlimited)."""
LEGACY_METHODS = frozenset({"tasks/get", "tasks/result", "tasks/list", "tasks/cancel"})
MODERN_METHODS = frozenset({"tasks/get", "tasks/update", "tasks/cancel"})
METHODS = LEGACY_METHODS | MODERN_METHODS
TERMINAL = frozenset({"completed", "failed", "cancelled"})
TASK_PREFIX = "triad-task:"
"""With `cluster:`, Triad's task ids are `triad-task:<replica>.<random>`: the replica whose book holds the task
(`task_owner`; `exposers.cluster_routes` forwards a `tasks/*` request landing elsewhere there)."""

Era = Literal["2025-11-25", "2026-07-28"]


@dataclass(frozen=True, slots=True)
class TaskEntry:
    upstream: str
    upstream_id: str
    owner: tuple[str, tuple[str, str] | None]
    """The creator's principal (`gateway.identity.same_principal`: client and OAuth subject)."""
    session: str | None
    """The key of the creating downstream session (`gateway.hooks.Session.key`) in the handshake era, whose
    upstream session holds the task; None in 2026-07-28, where requests stand alone."""
    era: Era
    expires: float
    seq: int
    """Its place in the order tasks were adopted (`tasks/list` pages by it: a cursor survives expiries)."""
    holder: str | None = None
    """The key of the downstream session whose own upstream session holds the task (`sessions: per_client`: an
    upstream numbering its tasks per process gives two clients the same id); None: the shared session."""
    call: Any = None
    """What the task keeps of the hooks' view of the call that created it (`gateway.tasks.KeptCall`; None
    without hooks): the after-hooks see the task's result too, as they would the call's."""
    asks: JSONObject | None = None
    """What the 2026-07-28 request that created a translated task declared its client can be asked (sampling,
    elicitation and its modes): the upstream's questions reach the client only within it (`BridgeDownstream`)."""


def owner_of(identity: Identity) -> tuple[str, tuple[str, str] | None]:
    return identity.client_id, identity.principal


class TaskBook:
    def __init__(self, clock: Callable[[], float] = time.monotonic, replica: str | None = None) -> None:
        self._clock = clock
        self._prefix = f"{TASK_PREFIX}{replica}." if replica else ""
        self._tasks: dict[str, TaskEntry] = {}
        self._by_upstream: dict[tuple[str, str | None, str], str] = {}
        self._held: Counter[tuple[str, tuple[str, str] | None]] = Counter()
        """Live tasks per owner (`MAX_TASKS_PER_OWNER`)."""
        self._seq = 0

    def __len__(self) -> int:
        return len(self._tasks)

    def __contains__(self, task_id: object) -> bool:
        return task_id in self._tasks

    def adopt(self, upstream: str, upstream_id: str, identity: Identity, session: str | None, era: Era,
              ttl_ms: JSON, call: object = None, holder: str | None = None, asks: JSONObject | None = None) -> str:
        """Record a task an upstream just created for `identity` on the upstream session of `holder`
        (`TaskEntry.holder`); the id the client gets."""
        self._purge()
        ttl = ttl_ms / 1000 if isinstance(ttl_ms, int | float) and not isinstance(ttl_ms, bool) and ttl_ms > 0 \
            else MAX_TTL
        task_id = self._prefix + secrets.token_urlsafe(24)
        old = self._by_upstream.get((upstream, holder, upstream_id))
        if old is not None:  # the upstream session reused an id: the old task is gone
            self.forget(old)
        owner = owner_of(identity)
        if self._held[owner] >= MAX_TASKS_PER_OWNER:
            self.forget(next(t for t, e in self._tasks.items() if e.owner == owner))
        while len(self._tasks) >= MAX_TASKS:
            self.forget(next(iter(self._tasks)))
        self._seq += 1
        self._held[owner] += 1
        self._tasks[task_id] = TaskEntry(upstream, upstream_id, owner,
                                         session if era == "2025-11-25" else None, era,
                                         self._clock() + min(ttl, MAX_TTL), self._seq, holder, call, asks)
        self._by_upstream[(upstream, holder, upstream_id)] = task_id
        return task_id

    def find(self, task_id: JSON, identity: Identity, session: str | None, era: Era) -> TaskEntry:
        """The caller's own task; anything else (unknown, expired, another's, another era's) is unknown."""
        entry = self._tasks.get(task_id) if isinstance(task_id, str) else None
        if entry is not None and entry.expires <= self._clock():
            self.forget(task_id)
            entry = None
        if entry is None or not self._mine(entry, identity, session, era):
            raise UnknownName(f"Unknown task: {task_id}")
        return entry

    def owned(self, identity: Identity, session: str | None, era: Era) -> Iterator[tuple[str, TaskEntry]]:
        """The caller's own live tasks, oldest first."""
        self._purge()
        return ((task_id, entry) for task_id, entry in list(self._tasks.items())
                if self._mine(entry, identity, session, era))

    def gateway_id(self, upstream: str, upstream_id: JSON, holder: str | None) -> tuple[str, TaskEntry] | None:
        """The id Triad gave the task `upstream_id` of the upstream session of `holder`, and its entry (for routing
        the upstream's notifications)."""
        task_id = self._by_upstream.get((upstream, holder, upstream_id)) if isinstance(upstream_id, str) else None
        entry = self._tasks.get(task_id) if task_id is not None else None
        return (task_id, entry) if task_id is not None and entry is not None else None

    def forget(self, task_id: str) -> None:
        entry = self._tasks.pop(task_id, None)
        if entry is not None:
            self._by_upstream.pop((entry.upstream, entry.holder, entry.upstream_id), None)
            self._held[entry.owner] -= 1
            if self._held[entry.owner] <= 0:
                del self._held[entry.owner]

    def _mine(self, entry: TaskEntry, identity: Identity, session: str | None, era: Era) -> bool:
        return entry.owner == owner_of(identity) and entry.era == era and \
            (era != "2025-11-25" or (session is not None and entry.session == session))

    def _purge(self) -> None:
        now = self._clock()
        for task_id in [t for t, e in self._tasks.items() if e.expires <= now]:
            self.forget(task_id)


def task_owner(task_id: JSON) -> str | None:
    """The replica a task id names (`TASK_PREFIX`); None: no replica's (no `cluster:`, or not Triad's id)."""
    if not isinstance(task_id, str) or not task_id.startswith(TASK_PREFIX):
        return None
    replica, dot, _token = task_id[len(TASK_PREFIX):].partition(".")
    return replica if dot else None


# -- the wire ----------------------------------------------------------------------------------------------------

def created_task(result: Mapping[str, JSON]) -> tuple[str, JSON] | None:
    """(upstream task id, TTL in ms) of a `CreateTaskResult` of either era; None for any other result."""
    if result.get("resultType") == "task" and isinstance(result.get("taskId"), str):
        return result["taskId"], result.get("ttlMs")
    task = result.get("task")
    if isinstance(task, Mapping) and isinstance(task.get("taskId"), str) and "content" not in result:
        return task["taskId"], task.get("ttl")
    return None


def with_task_id(result: JSONObject, task_id: str) -> JSONObject:
    """A task-bearing result (create, get, cancel, a list item, a status notification) naming `task_id`."""
    if isinstance(result.get("task"), Mapping) and "taskId" not in result:
        return {**result, "task": {**result["task"], "taskId": task_id}}
    out = {**result, "taskId": task_id} if "taskId" in result else dict(result)
    meta = out.get("_meta")
    if isinstance(meta, Mapping) and isinstance(meta.get(RELATED_TASK), Mapping):
        out["_meta"] = {**meta, RELATED_TASK: {**meta[RELATED_TASK], "taskId": task_id}}
    return out


def declares_extension(capabilities: Mapping[str, JSON] | None) -> bool:
    """A 2026-07-28 request's client capabilities declare the tasks extension."""
    extensions = (capabilities or {}).get("extensions")
    return isinstance(extensions, Mapping) and EXTENSION in extensions


def offers_legacy_tasks(capabilities: Mapping[str, JSON]) -> bool:
    """A handshake-era server's capabilities let clients run `tools/call` as a task (2025-11-25)."""
    tasks = capabilities.get("tasks")
    requests = tasks.get("requests") if isinstance(tasks, Mapping) else None
    tools = requests.get("tools") if isinstance(requests, Mapping) else None
    return isinstance(tools, Mapping) and "call" in tools


def offers_extension(capabilities: Mapping[str, JSON]) -> bool:
    extensions = capabilities.get("extensions")
    return isinstance(extensions, Mapping) and EXTENSION in extensions


def missing_extension_data() -> JSONObject:
    """`data` of the -32021 error a request that did not declare the extension gets."""
    return {"requiredCapabilities": {"extensions": {EXTENSION: {}}}}


TASK_PUSH = "notifications/tasks"
"""A 2026-07-28 task's status push (on a `subscriptions/listen` stream that named the task in `taskIds`)."""


class TaskPushParams(types.NotificationParams):
    model_config = ConfigDict(extra="allow")


class TaskPush(types.Notification[TaskPushParams, str]):
    """`notifications/tasks`: the DetailedTask, as the task's `tasks/get` would show it."""

    method: str = TASK_PUSH
    params: TaskPushParams


class TaskRequestParams(types.RequestParams):
    model_config = ConfigDict(extra="allow")


class TaskRequest(types.Request[TaskRequestParams, str]):
    """A `tasks/*` request to an upstream, as the client sent it but for the task id (either era). `Mcp-Name`
    carries the task id on 2026-07-28 (SEP-2663), which the SDK sends from `name_param`."""

    method: str
    params: TaskRequestParams


class NamedTaskRequest(TaskRequest):
    name_param: ClassVar[str | None] = "taskId"


def task_request(method: str, params: Mapping[str, JSON]) -> TaskRequest:
    kind = NamedTaskRequest if isinstance(params.get("taskId"), str) else TaskRequest
    return kind.model_validate({"method": method, "params": dict(params)}, by_name=False)
