"""What a relayed task carries besides its record: whose session holds it, the call kept for its after-hooks,
its ids as a client sees them (the upstream's id never reaches a client), Triad's `tasks/list` cursors, and the
downstream of the `tasks/result` stream Triad holds for a translated task's questions. Pure but for `KeptCall`'s
weak reference; used by `gateway.tasks._relay`.
"""

from __future__ import annotations

import base64
import dataclasses
import re
import weakref
from collections.abc import Callable, Mapping
from dataclasses import dataclass

import mcp_types as types
from pydantic import ValidationError

from consumers import JSON, Answer, Downstream, DownstreamWrapper, JSONObject, Upstream
from consumers.errors import UpstreamRefused
from gateway.errors import INVALID_PARAMS, InvalidRequest
from gateway.hooks import CallContext, Session, json_size
from gateway.tasks._eras import InputBridge
from gateway.tasks._records import RELATED_TASK, Era, TaskEntry

MAX_KEPT_ARGUMENTS = 64 * 1024
"""Bytes (JSON) of a task's call arguments Triad keeps for its after-hooks for as long as the task lasts (up to
`MAX_TTL`); larger arguments are dropped (the hooks then see `{}`), not held for a day."""

def key_of(session: object) -> str | None:
    """The key a downstream session's tasks are bound to (None: a request without a session)."""
    return session.key if isinstance(session, Session) else None


def cursor_at(seq: int) -> str:
    return base64.urlsafe_b64encode(f"tasks:{seq}".encode()).decode()


def cursor_position(cursor: JSON) -> int:
    """Where a `tasks/list` cursor of Triad's own points (0: the start); anything else is -32602."""
    if cursor is None:
        return 0
    try:
        kind, _, seq = base64.urlsafe_b64decode(str(cursor).encode()).decode().partition(":")
        if kind == "tasks" and seq.isdigit():
            return int(seq)
    except (ValueError, UnicodeDecodeError):
        pass
    raise InvalidRequest(f"Invalid cursor: {cursor}")


def holder_of(upstream: Upstream, session: object) -> str | None:
    """The key of the downstream session whose own upstream session `session`'s requests to `upstream` go on
    (`TaskEntry.holder`); None: the shared one."""
    return key_of(upstream.own_session(session if isinstance(session, Session) else None))


@dataclass(frozen=True, slots=True)
class KeptCall:
    """What a task keeps of the hooks' view of its call, for its after-hooks (`TaskEntry.call`), for as long as the
    task lasts (up to `MAX_TTL`, a day): the call's fields, but its session only by weak reference. A session that
    ended is not kept alive by its tasks (its connection, its per-client upstream sessions, its hooks' state); the
    after-hooks then see a session of the same id and key, with no state."""

    call: CallContext
    """The call, its session replaced by a stand-in (id, key and user only)."""
    session: weakref.ref[Session]

    def context(self) -> CallContext:
        live = self.session()
        return dataclasses.replace(self.call, session=live) if live is not None else self.call


def kept_call(call: CallContext | None) -> KeptCall | None:
    """What a task keeps of the hooks' view of its call (`KeptCall`): arguments past `MAX_KEPT_ARGUMENTS` are
    dropped."""
    if call is None:
        return None
    session = call.session
    arguments = call.arguments if json_size(call.arguments) <= MAX_KEPT_ARGUMENTS else {}
    stand_in = Session(id=session.id, key=session.key, user=session.user)
    return KeptCall(dataclasses.replace(call, session=stand_in, arguments=arguments), weakref.ref(session))


def _renamed(value: JSON, upstream_id: str, task_id: str) -> JSON:
    """`value` (an error's message or data) with the upstream's task id, as a word, replaced by Triad's."""
    if isinstance(value, str):
        return re.sub(rf"(?<![\w-]){re.escape(upstream_id)}(?![\w-])", lambda _: task_id, value)
    if isinstance(value, Mapping):
        return {key: _renamed(item, upstream_id, task_id) for key, item in value.items()}
    if isinstance(value, list):
        return [_renamed(item, upstream_id, task_id) for item in value]
    return value


def refused_as_triads(exc: UpstreamRefused, entry: TaskEntry, task_id: str) -> UpstreamRefused:
    """An upstream's refusal about `entry`'s task as its client gets it: naming the task by Triad's id (the
    upstream's id never reaches a client)."""
    return UpstreamRefused(exc.upstream, _renamed(exc.message, entry.upstream_id, task_id), code=exc.code,
                           data=_renamed(exc.data, entry.upstream_id, task_id))


def era_of(upstream: Upstream) -> Era:
    return "2026-07-28" if upstream.modern else "2025-11-25"


class BridgeDownstream:
    """The downstream of a `tasks/result` stream Triad holds open for a translated task: the upstream's questions
    wait in the `InputBridge` for the 2026 client's `tasks/update`, if that client declared it takes them when it
    created the task (`asks`; else the upstream is told so, `consumers.relay.undeclared`: never a question for a
    capability the client did not declare); its logs go nowhere (no request to carry them)."""

    modern = False
    log_level = None
    cancellation = None

    def __init__(self, bridge: InputBridge, asks: JSONObject | None) -> None:
        self._bridge = bridge
        self._asks = asks

    @property
    def capabilities(self) -> JSONObject | None:
        return self._asks or {}

    async def log(self, params: types.LoggingMessageNotificationParams) -> None:
        return None

    async def ask(self, request: types.ServerRequest, result_type: type[Answer]) -> Answer | types.ErrorData:
        answer = await self._bridge.ask(request.model_dump(by_alias=True, mode="json", exclude_none=True))
        try:
            return result_type.model_validate(answer, by_name=False)
        except ValidationError:
            return types.ErrorData(code=INVALID_PARAMS, message=f"the client's answer to {request.method} is malformed")


Rename = Callable[[JSON], str | None]
"""The id a client knows for an upstream's task id (Triad's, of the caller's own task), or None: none it may see."""


def renamed_meta(params: JSONObject, rename: Rename) -> JSONObject:
    """`params` whose `_meta.related-task` names the task by `rename` (without it when the client may know no such
    task: the upstream's id never reaches a client)."""
    meta = params.get("_meta")
    related = meta.get(RELATED_TASK) if isinstance(meta, Mapping) else None
    if not isinstance(meta, Mapping) or not isinstance(related, Mapping):
        return params
    task_id = rename(related.get("taskId"))
    rest = {key: value for key, value in meta.items() if key != RELATED_TASK}
    if task_id is not None:
        rest[RELATED_TASK] = {**related, "taskId": task_id}
    return {**params, "_meta": rest}


class TaskNamingDownstream(DownstreamWrapper):
    """The downstream of a request about a task (`tasks/result`, `tasks/get`...) while the upstream works on it: the
    upstream's questions and logs naming a task (`_meta.related-task`) reach the client under the id it was given,
    and its answers reach the upstream under the upstream's (`rename`, `unname`); the rest is the inner one's."""

    def __init__(self, inner: Downstream, rename: Rename, unname: Rename) -> None:
        super().__init__(inner)
        self._rename, self._unname = rename, unname

    async def log(self, params: types.LoggingMessageNotificationParams) -> None:
        dumped = params.model_dump(by_alias=True, mode="json", exclude_none=True)
        await self._inner.log(types.LoggingMessageNotificationParams.model_validate(
            renamed_meta(dumped, self._rename), by_name=False))

    async def ask(self, request: types.ServerRequest, result_type: type[Answer]) -> Answer | types.ErrorData:
        if request.params is not None:
            params = renamed_meta(request.params.model_dump(by_alias=True, mode="json", exclude_none=True),
                                  self._rename)
            request = type(request).model_validate({"method": request.method, "params": params}, by_name=False)
        answer = await self._inner.ask(request, result_type)
        if isinstance(answer, types.ErrorData):
            return answer
        dumped = answer.model_dump(by_alias=True, mode="json", exclude_none=True)
        return result_type.model_validate(renamed_meta(dumped, self._unname), by_name=False)
