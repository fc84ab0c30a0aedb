"""Tasks across eras: a 2026-07-28 client's task held by a handshake-era upstream (2025-11-25 tasks), shaped for
the client. The mapping, where the two eras have a faithful one:

- the call: a request that declares the extension asks a task of a tool whose `execution.taskSupport` is
  `optional` or `required` (`params.task`); one that does not gets the tool synchronously, or -32021 for a
  `required` tool (as a 2026 server answers);
- `{task: {ttl, pollInterval, ...}}` -> flat `{resultType: "task", ttlMs, pollIntervalMs, ...}`;
- `tasks/get` -> `tasks/get`, plus, once the task is terminal, `tasks/result` for its payload, inlined as `result`
  (a tool error, legacy `failed`, is `completed` at 2026) or `error` (a JSON-RPC error: `failed`);
- `input_required`: the upstream asks its questions on a `tasks/result` stream. Triad holds that stream open
  (`InputBridge`), shows each question as an `inputRequests` entry, and answers it from `tasks/update`'s
  `inputResponses`. A `tasks/get` shows what is pending when it comes, without waiting for questions (an upstream
  may stay `input_required` without asking anything): `working` while nothing is (at 2026 `input_required`
  carries a non-empty `inputRequests`);
- `tasks/cancel` -> `tasks/cancel`, answered with the 2026 empty ack (also for a task already terminal, which the
  legacy era refuses with -32602).

Not mapped:
- a 2025-11-25 client's task on a 2026-07-28 upstream: its tools say nothing of tasks, and a synchronous answer
  would need a task Triad hosts; the call gets -32601 (`NotATask`);
- `notifications/tasks/status` as such: a 2026 client hears of its task on a `subscriptions/listen` stream that
  names it in `taskIds`, where each status the upstream pushes (and each question, and the end) is told as
  `notifications/tasks`, the task as its `tasks/get` shows it then (`TaskRelay.watch`, `exposers.notify`);
- the legacy `tasks/list` and `tasks/result`, which do not exist at 2026.

Ownership: the `TaskRelay` creates an `InputBridge` for a task the first time a client sees it `input_required`;
the bridge's `tasks/result` runs in the relay's task group (`TaskRelay.run()`) until the task ends.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping

import anyio
import mcp_types as types

from consumers import JSON, JSONObject
from gateway.errors import TriadError
from gateway.tasks._records import EXTENSION, RELATED_TASK, missing_extension_data

MISSING_CAPABILITY = -32021


class MissingExtension(TriadError):
    code = MISSING_CAPABILITY


class NotATask(TriadError):
    """A 2025-11-25 client asked a task of a 2026-07-28 upstream's tool: such tools say nothing of tasks (listed
    without `execution`, so `forbidden`), and the spec's answer to a task of a forbidden tool is -32601."""

    code = -32601


def legacy_support(tool: Mapping[str, JSON]) -> str:
    """A handshake-era tool's `execution.taskSupport` (`forbidden` when absent)."""
    execution = tool.get("execution")
    support = execution.get("taskSupport") if isinstance(execution, Mapping) else None
    return support if isinstance(support, str) else "forbidden"


def legacy_task_param(tool: Mapping[str, JSON], declared: bool, name: str) -> JSONObject | None:
    """The `params.task` a 2026-07-28 call (`declared`: it declares the extension) sends a handshake-era tool;
    None: run it synchronously. A `required` tool cannot run for a caller that did not declare the extension."""
    support = legacy_support(tool)
    if support == "required" and not declared:
        raise MissingExtension(f"{name} runs only as a task: declare the {EXTENSION} extension in the request's "
                               "client capabilities", data=missing_extension_data())
    return {} if declared and support in ("optional", "required") else None


def modern_task(task: Mapping[str, JSON]) -> JSONObject:
    """A 2025-11-25 Task's fields as 2026-07-28 spells them (`ttl` -> `ttlMs`, `pollInterval` -> `pollIntervalMs`)."""
    out = {k: v for k, v in task.items() if k not in ("ttl", "pollInterval", "_meta")}
    ttl, poll = task.get("ttl"), task.get("pollInterval")
    out["ttlMs"] = int(ttl) if isinstance(ttl, int | float) and not isinstance(ttl, bool) and ttl > 0 else None
    if isinstance(poll, int | float) and not isinstance(poll, bool) and poll > 0:
        out["pollIntervalMs"] = int(poll)
    return out


def modern_created(result: Mapping[str, JSON]) -> JSONObject:
    """A 2025-11-25 `CreateTaskResult` (`{task: {...}}`) as a 2026-07-28 one (flat, `resultType: "task"`)."""
    return {"resultType": "task", **modern_task(result["task"])}


def without_related_task(result: Mapping[str, JSON]) -> JSONObject:
    """A legacy `tasks/result` payload as 2026 inlines it: the task is named at the root, not in `_meta`."""
    meta = result.get("_meta")
    if not isinstance(meta, Mapping) or RELATED_TASK not in meta:
        return dict(result)
    rest = {k: v for k, v in meta.items() if k != RELATED_TASK}
    return {**{k: v for k, v in result.items() if k != "_meta"}, **({"_meta": rest} if rest else {})}


Ask = Callable[[JSONObject], Awaitable[JSONObject]]


class InputBridge:
    """One legacy task's questions, asked on its `tasks/result` stream, as 2026 `inputRequests`: each question
    waits under a key of its own until `answer` gets its response. The stream's final outcome (the payload, or a
    JSON-RPC error) is kept for `tasks/get`."""

    def __init__(self, changed: Callable[[], None] = lambda: None) -> None:
        self._changed = changed
        """Called when a question arrives and when the outcome is known (the task's status pushes)."""
        self.pending: dict[str, JSONObject] = {}
        self._waiting: dict[str, tuple[anyio.Event, list[JSONObject]]] = {}
        self._count = 0
        self.outcome: JSONObject | None = None
        """`{"result": ...}` or `{"error": {...}}` once the upstream's `tasks/result` returned."""
        self.done = anyio.Event()

    async def ask(self, request: JSONObject) -> JSONObject:
        """The upstream's question (a wire request: method and params); the client's answer, in wire form."""
        self._count += 1
        key = f"input-{self._count}"
        params = request.get("params")
        if isinstance(params, Mapping) and isinstance(params.get("_meta"), Mapping):
            params = {**params, "_meta": {k: v for k, v in params["_meta"].items() if k != RELATED_TASK}}
        self.pending[key] = {"method": request.get("method"), "params": params or {}}
        got: list[JSONObject] = []
        event = anyio.Event()
        self._waiting[key] = (event, got)
        self._changed()
        try:
            await event.wait()
        finally:
            self.pending.pop(key, None)
            self._waiting.pop(key, None)
        return got[0]

    def answer(self, responses: JSON) -> None:
        """`tasks/update`'s `inputResponses`: unknown keys are ignored (SEP-2663), and so is a partial answer's rest."""
        if not isinstance(responses, Mapping):
            return
        for key, response in responses.items():
            waiting = self._waiting.get(key) if isinstance(response, Mapping) else None
            if waiting is not None:
                self.pending.pop(key, None)
                waiting[1].append(dict(response))
                waiting[0].set()

    def finish(self, outcome: JSONObject) -> None:
        self.outcome = outcome
        self.done.set()
        self._changed()


def failed_error(error: object) -> JSONObject:
    """A JSON-RPC error (`types.ErrorData` or a Triad error) as 2026 inlines a failed task's `error`."""
    if isinstance(error, TriadError):
        out: JSONObject = {"code": error.code, "message": error.message}
        if error.data is not None:
            out["data"] = error.data
        return out
    if isinstance(error, types.ErrorData):
        return error.model_dump(by_alias=True, mode="json", exclude_none=True)
    return {"code": types.INTERNAL_ERROR, "message": "the task failed"}
