"""Tool calls and prompt gets: the call path from a caller's view to the upstream that owns the name.

A call goes: the caller's view (`Live`) -> lookup of the exposed name (unknown and hidden look the same; with
`sessions: per_client`, also what the caller's own upstream session lists) -> policy (the view holds only what it
allows) -> approval (`gateway.approval`: a person's yes, where a rule asks for one) -> the hook chain around
`send` -> the task relay's `task_param` -> `Forwarder.forward` to the upstream -> the task relay's `adopt` -> the
raw result. A core tool (`ExecutorRef(kind="core")`) takes the same lookup and
hooks, and runs its executor (`gateway.calls._core_tools`) instead of an upstream; `call_tool` becomes the call of
the tool it names.

Ownership: the dispatcher creates one `ToolCalls` with the state of the moment, the forwarder, the task relay and
the metrics and the approval gate; it holds no state of its own.
"""

from __future__ import annotations

from collections.abc import Mapping

import mcp_types as types
from pydantic import ConfigDict

from consumers import JSON, JSONObject, ProgressFn, UpstreamPool
from gateway.approval import ApprovalCall, ApprovalGate
from gateway.calls._core_tools import CALL_THROUGH, inner_call, run_core, tool_error
from gateway.calls._forwarder import Forwarder
from gateway.calls._live import Live
from gateway.calls._own_lists import own_lists
from gateway.errors import TriadError, UnknownName
from gateway.hooks import CallContext, Session
from gateway.identity import Identity, subject_of
from gateway.observe import Metrics, log_denied
from gateway.registry import (
    ClientView,
    ToolDescriptor,
    down_upstream,
    expose_links,
    forwardable_meta,
    input_round,
    pin_withheld,
)
from gateway.tasks import Era, TaskRelay


def _arguments(params: Mapping[str, JSON]) -> JSONObject:
    arguments = params.get("arguments")
    return dict(arguments) if isinstance(arguments, Mapping) else {}


KNOWN_CALL_PARAMS = frozenset({"name", "arguments", "_meta", "task", "inputResponses", "requestState"})
"""The `tools/call` params Triad reads and sets itself; any other is the client's, passed on as it came."""


def unknown_params(params: Mapping[str, JSON]) -> JSONObject:
    """A call's params that Triad does not know (a later revision's, an extension's): the upstream gets them as a
    direct connection would."""
    return {key: value for key, value in params.items() if key not in KNOWN_CALL_PARAMS}


class ForwardedCallParams(types.CallToolRequestParams):
    model_config = ConfigDict(extra="allow")


class ForwardedCall(types.CallToolRequest):
    """A `tools/call` to an upstream, with the client's unknown params kept (`unknown_params`)."""

    params: ForwardedCallParams


class ToolCalls:
    def __init__(self, live: Live, pool: UpstreamPool, forwarder: Forwarder, tasks: TaskRelay,
                 metrics: Metrics, approval: ApprovalGate) -> None:
        self._live = live
        self._approval = approval
        self._pool = pool
        self._forwarder = forwarder
        self._tasks = tasks
        self._metrics = metrics

    async def call_tool(self, identity: Identity, params: Mapping[str, JSON], progress: ProgressFn | None = None,
                        session: Session | None = None, era: Era = "2025-11-25") -> JSONObject:
        """`era`: the client's (a 2026-07-28 client's task on a handshake-era upstream is translated)."""
        await self._live.settled()  # right after start, a name is unknown only once its upstream had its chance
        name = params.get("name")
        only = name if isinstance(name, str) else None
        view = self._live.request_view(identity, params, only=only)
        if only is not None and only not in view.tools and self._live.pins_busy:
            # a rebuild withheld the tool while its first definition is recorded: wait for that, then look again
            await self._live.record_pins()
            view = self._live.request_view(identity, params, only=only)
        return await self.call_visible_tool(view, params, progress, session, era)

    async def call_visible_tool(self, view: ClientView, params: Mapping[str, JSON], progress: ProgressFn | None = None,
                                session: Session | None = None, era: Era = "2025-11-25", *,
                                inner: bool = False) -> JSONObject:
        """A call of a tool by its exposed name, in `view`: what `tools/call` does, and `call_tool` after it."""
        identity, name = view.identity, params.get("name")
        entry = view.tools.get(name) if isinstance(name, str) else None
        if entry is None or (inner and entry.executor.kind == "core"):  # `call_tool` calls no core tool
            if isinstance(name, str) and (why := pin_withheld(view, name, self._live.pipeline)) is not None:
                return tool_error(f"{name} is withheld: {why}")  # an operator's step, not an unknown name
            raise await self._refuse_tool(view, name, params, session)
        if entry.executor.kind == "core":
            # a core tool finds and calls only what this session may call (its own upstream sessions' lists)
            view = self._live.view(identity, await own_lists(self._pool, session))
            if entry.executor.id == CALL_THROUGH:
                called = inner_call(params)
                if isinstance(called, str):
                    return tool_error(called)
                return await self.call_visible_tool(view, called, progress, session, era, inner=True)
            return await self._run_core(view, entry.descriptor, params, session)
        upstream = self._forwarder.upstream(entry.executor.id)
        if session is not None and upstream.own_session(session) is not None \
                and entry.executor.tool not in (await upstream.own_lists(session)).tools:
            raise UnknownName(f"Unknown tool: {name}")  # its own session does not list it: as if it did not exist
        notes = entry.descriptor.annotations or {}
        # policy said yes (the view holds only what it allows); a person's yes comes next, then the before-hooks
        refused = await self._approval.check(self._live.config, self._live.hooks, ApprovalCall(
            identity, entry.descriptor.name, upstream.name, entry.executor.tool, _arguments(params), notes),
            session, progress)
        if refused is not None:
            return tool_error(refused)
        meta = forwardable_meta(params.get("_meta"))
        safe = notes.get("readOnlyHint") is True or notes.get("idempotentHint") is True

        async def send(ctx: CallContext | None) -> JSONObject:
            arguments = ctx.arguments if ctx is not None else params.get("arguments")
            if shape := entry.descriptor.arguments:  # hidden and fixed by a tool override, whatever was sent
                arguments = shape.apply(arguments)
            task = self._tasks.task_param(upstream, entry.descriptor.wire, params, entry.descriptor.name, era)
            request = ForwardedCall(params=ForwardedCallParams.model_validate(
                {**unknown_params(params), "name": entry.executor.tool, "arguments": arguments, "_meta": meta,
                 **input_round(params), **({"task": task} if task is not None else {})}, by_name=False))
            limits = (ctx.timeout, ctx.max_time) if ctx is not None else (None, None)
            relayed = self._live.hooks.progress(ctx, progress) if ctx is not None else progress
            result = await self._forwarder.forward(upstream, "tool", request, progress=relayed, retry_safe=safe,
                                                   client=session, call_limits=limits,
                                                   caller=(identity.client_id, entry.descriptor.name))
            result = self._tasks.adopt(result, upstream, identity, session, ctx, era)
            return expose_links(result, self._live.registry.uri_parts.get(upstream.name))

        if not self._live.hooks:
            return await send(None)
        ctx = CallContext("tool", identity.client_id, session or Session(), entry.descriptor.name, upstream.name,
                          entry.executor.tool, _arguments(params), notes, entry.descriptor.input_schema,
                          entry.descriptor.current, subject=subject_of(identity))
        return await self._live.hooks.run(ctx, send)

    async def _run_core(self, view: ClientView, descriptor: ToolDescriptor, params: Mapping[str, JSON],
                        session: Session | None) -> JSONObject:
        """A core tool that runs here (`search_tools`): inside the hook chain like any tool, with no upstream."""
        snapshot, indexes = self._live.current(), self._live.search

        async def run(ctx: CallContext | None) -> JSONObject:
            arguments = ctx.arguments if ctx is not None else _arguments(params)
            return await run_core(descriptor.executor.id if descriptor.executor else "", indexes, view, arguments,
                                  snapshot.schemas)

        if not self._live.hooks:
            return await run(None)
        ctx = CallContext("tool", view.identity.client_id, session or Session(), descriptor.name, "", descriptor.name,
                          _arguments(params), descriptor.annotations or {}, descriptor.input_schema,
                          subject=subject_of(view.identity))
        return await self._live.hooks.run(ctx, run)

    async def get_prompt(self, identity: Identity, params: Mapping[str, JSON],
                         session: Session | None = None) -> JSONObject:
        await self._live.settled()
        name = params.get("name")
        # a prompt its own upstream session does not list (`sessions: per_client`) is as if it did not exist
        view = (self._live.request_view(identity, params, await own_lists(self._pool, session))
                if isinstance(name, str) else None)
        entry = view.prompts.get(name) if view is not None and isinstance(name, str) else None
        if entry is None:
            raise UnknownName(f"Unknown prompt: {name}")
        meta = forwardable_meta(params.get("_meta"))

        async def send(ctx: CallContext | None) -> JSONObject:
            arguments = ctx.arguments if ctx is not None else params.get("arguments")
            request = types.GetPromptRequest(params=types.GetPromptRequestParams.model_validate(
                {"name": entry.raw, "arguments": arguments or None, "_meta": meta, **input_round(params)},
                by_name=False))
            result = await self._forwarder.forward(self._forwarder.upstream(entry.upstream), "prompt", request,
                                                   retry_safe=True, client=session,
                                                   caller=(identity.client_id, entry.exposed))
            return expose_links(result, self._live.registry.uri_parts.get(entry.upstream), "messages")

        if not self._live.hooks:
            return await send(None)
        ctx = CallContext("prompt", identity.client_id, session or Session(), entry.exposed, entry.upstream,
                          entry.raw, _arguments(params), subject=subject_of(identity))
        return await self._live.hooks.run(ctx, send)

    async def _refuse_tool(self, view: ClientView, name: JSON, params: Mapping[str, JSON],
                           session: Session | None) -> TriadError:
        """Hidden and unknown names get the same answer; a policy denial is counted, logged and audited. A tool
        the caller may see, hidden only because its upstream is down, gets that upstream's state and next try
        (an upstream condition, not the request's fault: not `Unknown tool`)."""
        for descriptor, decision in view.denied:
            if descriptor.name == name and (step := decision.denied_by) is not None:
                self._metrics.deny(step.layer)
                log_denied(view.identity.client_id, name, session, step)
                executor = descriptor.executor
                self._metrics.call_log.denied(view.identity.client_id, descriptor.name, executor.id if executor else "",
                                              executor.tool if executor else "", step)
                if self._live.hooks:
                    ctx = CallContext("tool", view.identity.client_id, session or Session(), name,
                                      executor.id if executor else "", executor.tool if executor else "",
                                      _arguments(params), subject=subject_of(view.identity))
                    await self._live.hooks.denied(ctx, step.layer, step.pattern, step.detail)
                break
        else:
            if isinstance(name, str) and (down := down_upstream(view, name, self._live.pipeline)) is not None:
                return self._forwarder.upstream(down).down()
        return UnknownName(f"Unknown tool: {name}")
