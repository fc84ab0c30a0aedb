"""The tasks extension (`io.modelcontextprotocol/tasks`, SEP-2663, 2026-07-28) as the conformance suite's
`tasks-*` scenarios call it, for `conformance_upstream.py`.

The server decides per call whether a tool runs as a task (only for a request that declares the extension in its
`_meta` client capabilities); `tasks/get` inlines the result or error once terminal, `tasks/update` answers a
task's pending input requests, `tasks/cancel` is an empty ack. `tasks/result` and `tasks/list` do not exist in this
era (no handler: -32601). Tasks run in the task group `run()` owns, for the server's whole life; they are held in
memory, not bound to a caller (the suite's clients are stateless; Triad binds them to its own callers).
"""

from __future__ import annotations

import datetime
import itertools
from dataclasses import dataclass, field
from typing import Any

import anyio
import mcp_types as types
from anyio.abc import TaskGroup
from conformance_fixtures import elicit, input_required, text, tool
from mcp.server import Server
from mcp.shared.exceptions import MCPError
from mcp.shared.message import ServerMessageMetadata
from mcp_types.version import MODERN_PROTOCOL_VERSIONS
from pydantic import ConfigDict

EXTENSION = "io.modelcontextprotocol/tasks"
TTL_MS = 300_000
POLL_MS = 200
TASK_TOOLS = [
    tool("greet", "Greets synchronously", {"name": {"type": "string"}}),
    tool("slow_compute", "Sleeps `seconds`, as a task when the client can take one",
         {"seconds": {"type": "number"}, "label": {"type": "string"}}),
    tool("failing_job", "A task that ends with a tool error (requires the tasks extension)"),
    tool("protocol_error_job", "A task that fails with a protocol error (requires the tasks extension)"),
    tool("confirm_delete", "A task that asks for confirmation", {"filename": {"type": "string"}}),
    tool("multi_input", "A task that asks two questions at once"),
    tool("quiet_input", "A task that is input_required from its start, asking nothing until release_quiet"),
    tool("release_quiet", "Lets quiet_input tasks ask their question (synchronous)"),
    tool("test_tool_with_task", "Asks a name in-band, then runs as a task (requires the tasks extension)"),
]
REQUIRED = {"failing_job", "protocol_error_job", "test_tool_with_task"}
for _tool in TASK_TOOLS:  # 2025-11-25 only (the SDK strips `execution` at 2026-07-28)
    if _tool["name"] not in ("greet", "release_quiet"):
        _tool["execution"] = {"taskSupport": "required" if _tool["name"] in REQUIRED else "optional"}
LEGACY_CAPABILITY = {"list": {}, "cancel": {}, "requests": {"tools": {"call": {}}}}
RELATED_TASK = "io.modelcontextprotocol/related-task"
TERMINAL = ("completed", "failed", "cancelled")


class TaskParams(types.RequestParams):
    model_config = ConfigDict(extra="allow")


def _now() -> str:
    return datetime.datetime.now(datetime.UTC).isoformat().replace("+00:00", "Z")


@dataclass
class _Task:
    task_id: str
    status: str = "working"
    created: str = field(default_factory=_now)
    updated: str = field(default_factory=_now)
    result: dict[str, Any] | None = None
    error: dict[str, Any] | None = None
    pending: dict[str, dict[str, Any]] = field(default_factory=dict)
    answers: dict[str, Any] = field(default_factory=dict)
    answered: anyio.Event = field(default_factory=anyio.Event)
    scope: anyio.CancelScope = field(default_factory=anyio.CancelScope)

    def set(self, status: str) -> None:
        self.status, self.updated = status, _now()

    def wire(self) -> dict[str, Any]:
        out: dict[str, Any] = {"taskId": self.task_id, "status": self.status, "createdAt": self.created,
                               "lastUpdatedAt": self.updated, "ttlMs": TTL_MS, "pollIntervalMs": POLL_MS}
        if self.status == "completed":
            out["result"] = self.result
        elif self.status == "failed":
            out["error"] = self.error
        elif self.status == "input_required":
            out["inputRequests"] = dict(self.pending)
        return out

    def legacy_wire(self) -> dict[str, Any]:
        """The 2025-11-25 Task: a tool error is `failed` there (its result comes from `tasks/result`)."""
        failed = self.status == "completed" and (self.result or {}).get("isError") is True
        return {"taskId": self.task_id, "status": "failed" if failed else self.status, "createdAt": self.created,
                "lastUpdatedAt": self.updated, "ttl": TTL_MS, "pollInterval": POLL_MS}


class _Modern:
    """A legacy call's context as `Tasks.call` reads it: as if it declared the extension."""

    def __init__(self, ctx: Any) -> None:
        self.params = {"_meta": {"io.modelcontextprotocol/clientCapabilities": {"extensions": {EXTENSION: {}}}}}


def declared(params: Any) -> bool:
    meta = (params or {}).get("_meta") or {}
    caps = meta.get("io.modelcontextprotocol/clientCapabilities") or {}
    return EXTENSION in (caps.get("extensions") or {})


def missing_extension() -> MCPError:
    return MCPError(types.MISSING_REQUIRED_CLIENT_CAPABILITY, f"this request needs the {EXTENSION} extension",
                    data={"requiredCapabilities": {"extensions": {EXTENSION: {}}}})


class Tasks:
    def __init__(self) -> None:
        self._released = anyio.Event()
        """Set by `release_quiet`: `quiet_input` tasks then ask their question."""
        self._tasks: dict[str, _Task] = {}
        self._ids = itertools.count(1)
        self._tg: TaskGroup | None = None

    async def run(self, *, task_status: Any = anyio.TASK_STATUS_IGNORED) -> None:
        async with anyio.create_task_group() as tg:
            self._tg = tg
            task_status.started()
            await anyio.sleep_forever()

    def install(self, server: Server[Any]) -> None:
        server.extensions[EXTENSION] = {}
        server.add_request_handler("tasks/get", TaskParams, self._get)
        server.add_request_handler("tasks/update", TaskParams, self._update)
        server.add_request_handler("tasks/cancel", TaskParams, self._cancel)
        server.middleware.append(self._legacy)

    # -- 2025-11-25: `params.task`, tasks/get|result|list|cancel (the SDK serves none of it: a middleware does) --

    async def _legacy(self, ctx: Any, call_next: Any) -> Any:
        params = ctx.params or {}
        if ctx.method == "initialize":
            result = await call_next(ctx)
            if params.get("protocolVersion") in MODERN_PROTOCOL_VERSIONS or result is None:
                return result
            if isinstance(result, dict):
                return {**result, "capabilities": {**result.get("capabilities", {}), "tasks": LEGACY_CAPABILITY}}
            caps = result.capabilities.model_copy(
                update={"tasks": types.ServerTasksCapability.model_validate(LEGACY_CAPABILITY)})
            return result.model_copy(update={"capabilities": caps})
        if ctx.protocol_version in MODERN_PROTOCOL_VERSIONS:
            return await call_next(ctx)
        if ctx.method == "tools/call" and params.get("name") in {t["name"] for t in TASK_TOOLS}:
            return await self._legacy_call(ctx, params)
        if ctx.method == "tasks/list":
            return {"tasks": [task.legacy_wire() for task in self._tasks.values()]}
        if ctx.method in ("tasks/get", "tasks/result", "tasks/cancel"):
            task = self._tasks.get(params.get("taskId"))
            if task is None:
                raise MCPError(types.INVALID_PARAMS, f"Unknown task: {params.get('taskId')}")
            if ctx.method == "tasks/get":
                return task.legacy_wire()
            if ctx.method == "tasks/cancel":
                if task.status in TERMINAL:
                    raise MCPError(types.INVALID_PARAMS, f"task {task.task_id} is already {task.status}")
                task.scope.cancel()
                task.set("cancelled")
                return task.legacy_wire()
            return await self._legacy_result(ctx, task)
        return await call_next(ctx)

    async def _legacy_call(self, ctx: Any, params: dict[str, Any]) -> dict[str, Any]:
        name, arguments, as_task = params["name"], params.get("arguments") or {}, "task" in params
        if name in REQUIRED and not as_task:
            raise MCPError(types.METHOD_NOT_FOUND, f"{name} requires task augmentation")
        if name == "release_quiet":
            self._released.set()
            return text("released")
        if name == "greet" or not as_task:
            if name == "slow_compute":
                await anyio.sleep(float(arguments.get("seconds") or 0))
                return text(f"computed {arguments.get('label')}")
            if name == "greet":
                return text(f"Hello, {arguments.get('name')}!")
            # confirm_delete, multi_input without a task: their questions asked on the call's own stream
            questions = {"confirm": [elicit(f"Delete {arguments.get('filename')}?", {"confirm": {"type": "boolean"}},
                                            ("confirm",))],
                         "multi_input": [elicit("First?", {"name": {"type": "string"}}, ("name",)),
                                         elicit("Second?", {"name": {"type": "string"}}, ("name",))]}
            asked = [await self._ask_client(ctx, question, None)
                     for question in questions["confirm" if name == "confirm_delete" else name]]
            return text(f"answered: {len(asked)}")
        if name == "slow_compute":
            created = self._start(self._compute, float(arguments.get("seconds") or 0), str(arguments.get("label")))
        elif name == "test_tool_with_task":  # the name is asked before the task exists, on the call's stream
            answer = await self._ask_client(ctx, elicit("What is your name?", {"name": {"type": "string"}},
                                                        ("name",)), None)
            created = self._start(self._compute, 0.5, f"Hello, {(answer.get('content') or {}).get('name')}")
        else:
            created = await self.call(_Modern(ctx), name, arguments, {})
            assert created is not None
        task = self._tasks[created["taskId"]]
        return {"task": task.legacy_wire()}

    async def _legacy_result(self, ctx: Any, task: _Task) -> dict[str, Any]:
        """Blocks until the task ends; questions it has meanwhile are asked on this request's stream, at once."""
        while task.status not in TERMINAL:
            if task.status == "input_required" and task.pending:
                async with anyio.create_task_group() as tg:
                    for key, question in list(task.pending.items()):
                        tg.start_soon(self._answer, ctx, task, key, question)
            await anyio.sleep(0.05)
        related = {RELATED_TASK: {"taskId": task.task_id}}
        if task.status == "failed":
            raise MCPError(task.error["code"], task.error["message"]) if task.error else \
                MCPError(types.INTERNAL_ERROR, "failed")
        if task.status == "cancelled":
            raise MCPError(types.INVALID_PARAMS, f"task {task.task_id} was cancelled")
        return {**(task.result or {}), "_meta": related}

    async def _answer(self, ctx: Any, task: _Task, key: str, question: dict[str, Any]) -> None:
        try:
            answer = await self._ask_client(ctx, question, task.task_id)
        except MCPError as refused:  # the client cannot be asked (it lacks the capability): the task fails so
            task.error = {"code": refused.error.code, "message": refused.error.message}
            task.set("failed")
            return
        task.pending.pop(key, None)
        task.answers[key] = answer
        task.answered.set()

    async def _ask_client(self, ctx: Any, question: dict[str, Any], task_id: str | None) -> dict[str, Any]:
        params = dict(question["params"])
        if task_id is not None:
            params["_meta"] = {RELATED_TASK: {"taskId": task_id}}
        answer = await ctx.session.send_request(
            types.ElicitRequest.model_validate({"method": "elicitation/create", "params": params}),
            types.ElicitResult, metadata=ServerMessageMetadata(related_request_id=ctx.request_id))
        return answer.model_dump(by_alias=True, mode="json", exclude_none=True)

    async def call(self, ctx: Any, name: str, arguments: dict[str, Any], responses: dict[str, Any]
                   ) -> dict[str, Any] | None:
        """A task tool's answer at 2026-07-28 (a task, an input round or a plain result); None: not a task tool."""
        if name not in {t["name"] for t in TASK_TOOLS}:
            return None
        can = declared(ctx.params)
        if name in REQUIRED and not can:
            raise missing_extension()
        if name == "greet":
            return text(f"Hello, {arguments.get('name')}!")
        if name == "release_quiet":
            self._released.set()
            return text("released")
        if name == "slow_compute":
            seconds = float(arguments.get("seconds") or 0)
            if not can or seconds < 1:
                await anyio.sleep(seconds)
                return text(f"computed {arguments.get('label')}")
            return self._start(self._compute, seconds, str(arguments.get("label")))
        if name == "failing_job":
            return self._start(self._failing)
        if name == "protocol_error_job":
            return self._start(self._protocol_error)
        if name == "confirm_delete":
            question = elicit(f"Delete {arguments.get('filename')}?", {"confirm": {"type": "boolean"}}, ("confirm",))
            return self._start(self._ask, {"confirm": question}, f"deleted {arguments.get('filename')}")
        if name == "quiet_input":
            created = self._start(self._quiet)
            self._tasks[created["taskId"]].set("input_required")
            return {**created, "status": "input_required"}
        if name == "multi_input":
            return self._start(self._ask, {
                "first": elicit("First?", {"name": {"type": "string"}}, ("name",)),
                "second": elicit("Second?", {"name": {"type": "string"}}, ("name",))}, "both answered")
        answer = responses.get("user_name")  # test_tool_with_task: one round in-band first
        if answer is None:
            return input_required({"user_name": elicit("What is your name?", {"name": {"type": "string"}},
                                                        ("name",))})
        return self._start(self._compute, 0.5, f"Hello, {(answer.get('content') or {}).get('name')}")

    def _start(self, job: Any, *args: Any) -> dict[str, Any]:
        assert self._tg is not None, "Tasks.run() is not running"
        task_id = f"task-{next(self._ids)}"
        task = self._tasks[task_id] = _Task(task_id)
        self._tg.start_soon(self._run, task, job, args)
        return {"resultType": "task", **{k: v for k, v in task.wire().items() if k not in ("result", "error")}}

    async def _run(self, task: _Task, job: Any, args: tuple[Any, ...]) -> None:
        with task.scope:
            await job(task, *args)

    async def _compute(self, task: _Task, seconds: float, label: str) -> None:
        await anyio.sleep(seconds)
        task.result = text(f"computed {label}")
        task.set("completed")

    async def _failing(self, task: _Task) -> None:
        await anyio.sleep(1)
        task.result = {**text("the job failed"), "isError": True}
        task.set("completed")

    async def _protocol_error(self, task: _Task) -> None:
        await anyio.sleep(0.2)
        task.error = {"code": types.INTERNAL_ERROR, "message": "the job crashed"}
        task.set("failed")

    async def _quiet(self, task: _Task) -> None:
        await self._released.wait()
        await self._ask(task, {"confirm": elicit("Go on?", {"confirm": {"type": "boolean"}}, ("confirm",))},
                        "released")

    async def _ask(self, task: _Task, questions: dict[str, dict[str, Any]], done: str) -> None:
        task.pending = dict(questions)
        task.set("input_required")
        while task.pending:
            await task.answered.wait()
            task.answered = anyio.Event()
        task.set("working")
        task.result = text(f"{done}: {sorted(task.answers)}")
        task.set("completed")

    def _find(self, ctx: Any, params: Any) -> _Task:
        if not declared(ctx.params):
            raise missing_extension()
        task_id = (ctx.params or {}).get("taskId")
        headers = getattr(ctx.request, "headers", None)
        name = headers.get("mcp-name") if headers is not None else None
        if name is not None and name.strip() != task_id:
            raise MCPError(types.HEADER_MISMATCH, "the Mcp-Name header does not match params.taskId")
        task = self._tasks.get(task_id) if isinstance(task_id, str) else None
        if task is None:
            raise MCPError(types.INVALID_PARAMS, f"Unknown task: {task_id}")
        return task

    async def _get(self, ctx: Any, params: Any) -> dict[str, Any]:
        return self._find(ctx, params).wire()

    async def _update(self, ctx: Any, params: Any) -> dict[str, Any]:
        task = self._find(ctx, params)
        for key, answer in ((ctx.params or {}).get("inputResponses") or {}).items():
            if key in task.pending:
                del task.pending[key]
                task.answers[key] = answer
        if task.pending:
            task.updated = _now()
        task.answered.set()
        return {}

    async def _cancel(self, ctx: Any, params: Any) -> dict[str, Any]:
        task = self._find(ctx, params)
        if task.status not in TERMINAL:
            task.scope.cancel()
            task.set("cancelled")
        return {}
