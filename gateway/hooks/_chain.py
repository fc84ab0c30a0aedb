"""The hook chain around every tool call, resource read and prompt get.

One interface for built-ins and plugins (`module:attr` in the config, a class or factory taking the options as
keyword arguments). A hook implements any of: `before_call` / `after_call` (tools), `before_read` / `after_read`
(resources), `before_get` / `after_get` (prompts), `on_denied` (a call the policy refused), `on_approval` (how a
call that needed a person's yes was decided) and `on_message` (what an upstream says during a request besides its
result). Hooks run by `priority` (higher first), then config order.

- before: return None (pass), `Arguments(...)` (merged over the arguments, or replacing them), or `Block(reason)`.
  A before-hook that raises or exceeds `BEFORE_TIMEOUT` blocks (fail closed) with a fixed message; the
  exception goes to the log, never to the client.
- after: sees the arguments actually sent, the raw result and the duration; may return a dict replacing
  `content`, `structuredContent`, `isError` or `_meta`. One that raises is logged and skipped (fail open).
- on_message: sees each `Message` an upstream sends during a hooked request on its way to the client (a log
  message, a progress message, a sampling or elicitation request), the upstream's error and a completion's result;
  may return a dict replacing fields of its params (`MESSAGE_FIELDS`). One that raises withholds the message
  (fail closed: a log or progress message is dropped, an error's message becomes `WITHHELD`, a request is answered
  with an error, a completion has no values); a message is not worth the risk of leaking what a hook was to hide.
  It runs outside the session lock (see `HookChain.message`), so it must keep no per-session state.
  `HookChain.run` is the one place that routes them: during `send` the request's downstream (`CURRENT_DOWNSTREAM`,
  through which every relayed log message and request goes) is wrapped, its progress callback comes from
  `HookChain.progress`, and a failure's message is rewritten before the after-hooks see it.
- on_listed (plain, not async): sees each entry of an upstream's catalog (tool, resource, template, prompt) once
  per registry rebuild (`HookChain.catalog`), so lists cost nothing per request; may return the entry to list
  instead, never with another identifier (`LISTED_NAMES`). One that raises withholds the entry (fail closed).

Hooks run under the calling session's lock (`CallContext.session.lock`), so per-session hook state
(`session.state`) is safe; the upstream call itself is never under it. The chain is built whole from a
validated config and rebuilt on reload; once built it is immutable (its hooks, their order and their methods are
fixed). Building it checks every hook against the contract (`gateway.hooks._protocols`), and binds each hook
method once, through its typed protocol: the call path calls what was bound, it never looks a method up by name.
"""

from __future__ import annotations

import dataclasses
import logging
import warnings
from collections.abc import Awaitable, Callable, Iterable, Mapping
from dataclasses import dataclass, replace
from types import MappingProxyType
from typing import NoReturn

import anyio
import mcp_types as types
from mcp.shared.exceptions import MCPDeprecationWarning

from consumers import CURRENT_DOWNSTREAM, Answer, Catalog, Downstream, DownstreamWrapper, JSONObject, ProgressFn
from gateway.errors import HookBlocked, TriadError, UpstreamError
from gateway.hooks._protocols import (
    AfterCall,
    AfterFn,
    AfterGet,
    AfterRead,
    ApprovalFn,
    BeforeCall,
    BeforeFn,
    BeforeGet,
    BeforeRead,
    DeniedFn,
    ListedFn,
    MessageFn,
    OnApproval,
    OnDenied,
    OnListed,
    OnMessage,
    check_methods,
)
from gateway.hooks._values import (
    LISTED_NAMES,
    MESSAGE_FIELDS,
    Arguments,
    Block,
    CallContext,
    Kind,
    Message,
    Outcome,
    Session,
)
from gateway.registry import ListedKind

__all__ = ["EMPTY_CHAIN", "MESSAGE_FIELDS", "Arguments", "Block", "BlockObserver", "CallContext", "HookChain",
           "HookEntry", "Message", "Outcome", "Session"]
"""`Session`, `CallContext` and the values hooks return live in `gateway.hooks._values`; named here too, for the
tests that import them from the chain."""

logger = logging.getLogger("triad.hooks")

BEFORE_TIMEOUT = 5.0
"""A before-hook that takes longer than this blocks the call: a stuck policy check must not hang the caller."""
AFTER_TIMEOUT = 5.0
MESSAGE_TIMEOUT = 1.0
"""An `on_message` hook runs on the path that reads the upstream (every call's messages wait behind it): longer than
this, and the message is withheld."""
BLOCKED_BY_FAILURE = "Blocked because a before-hook failed; the gateway's log has the details."
RESULT_FIELDS = ("content", "structuredContent", "isError", "_meta", "contents", "messages", "description")
"""What an after-hook may replace: tool results, resource contents, prompt messages."""

WITHHELD = "The upstream's error message was withheld because a hook failed on it; the gateway's log has the details."
WITHHELD_REQUEST = "Triad withheld this request because a hook failed on it; the gateway's log has the details."
NO_COMPLETION: JSONObject = {"values": []}
"""A completion a hook failed on: none (fail closed)."""

def _log_fields(ctx: CallContext, **more: str) -> JSONObject:
    """The structured fields of a log line about `ctx` (`gateway.observe`): names only, the session hashed."""
    return {"kind": ctx.kind, "client": ctx.client_id, "session": ctx.session.id, "tool": ctx.name,
            "upstream": ctx.upstream, "raw": ctx.raw_name, **more}


@dataclass(frozen=True)
class HookEntry:
    """One hook of the chain: its name in the config, the hook, its priority and its place in the config."""

    name: str
    hook: object
    priority: int
    order: int


BlockObserver = Callable[[CallContext, str], None]
"""Told (the call, the blocking hook's name) when a before-hook blocks a call (the console's call log, the metrics)."""


class HookChain:
    """The hooks of one config, in order, each method bound once (a hook without a method is not in its stage).

    Immutable once built: no attribute can be set or deleted, and no method adds or removes a hook; a reload builds
    a new chain. Who is told of blocked calls (`on_block`) is given at construction too (`build_chain(on_block=)`)."""

    __slots__ = ("_after", "_approval", "_before", "_denied", "_listed", "_message", "_on_block", "entries")

    entries: tuple[HookEntry, ...]
    _before: Mapping[Kind, tuple[tuple[str, BeforeFn], ...]]
    _after: Mapping[Kind, tuple[tuple[str, AfterFn], ...]]
    _denied: tuple[tuple[str, DeniedFn], ...]
    _approval: tuple[tuple[str, ApprovalFn], ...]
    _message: tuple[tuple[str, MessageFn], ...]
    _listed: tuple[tuple[str, ListedFn], ...]
    _on_block: BlockObserver | None

    def __init__(self, entries: Iterable[HookEntry], *, on_block: BlockObserver | None = None) -> None:
        ordered = tuple(sorted(entries, key=lambda e: (-e.priority, e.order)))
        for entry in ordered:
            check_methods(entry.name, entry.hook)
        hooks = tuple((e.name, e.hook) for e in ordered)
        before: dict[Kind, tuple[tuple[str, BeforeFn], ...]] = {
            "tool": tuple((n, h.before_call) for n, h in hooks if isinstance(h, BeforeCall)),
            "resource": tuple((n, h.before_read) for n, h in hooks if isinstance(h, BeforeRead)),
            "prompt": tuple((n, h.before_get) for n, h in hooks if isinstance(h, BeforeGet))}
        after: dict[Kind, tuple[tuple[str, AfterFn], ...]] = {
            "tool": tuple((n, h.after_call) for n, h in hooks if isinstance(h, AfterCall)),
            "resource": tuple((n, h.after_read) for n, h in hooks if isinstance(h, AfterRead)),
            "prompt": tuple((n, h.after_get) for n, h in hooks if isinstance(h, AfterGet))}
        init = object.__setattr__  # the one place the chain's attributes are set
        init(self, "entries", ordered)
        init(self, "_before", MappingProxyType(before))
        init(self, "_after", MappingProxyType(after))
        init(self, "_denied", tuple((n, h.on_denied) for n, h in hooks if isinstance(h, OnDenied)))
        init(self, "_approval", tuple((n, h.on_approval) for n, h in hooks if isinstance(h, OnApproval)))
        init(self, "_message", tuple((n, h.on_message) for n, h in hooks if isinstance(h, OnMessage)))
        init(self, "_listed", tuple((n, h.on_listed) for n, h in hooks if isinstance(h, OnListed)))
        init(self, "_on_block", on_block)

    def __setattr__(self, name: str, value: object) -> NoReturn:
        raise AttributeError(f"the hook chain is immutable once built (cannot set {name!r})")

    def __delattr__(self, name: str) -> NoReturn:
        raise AttributeError(f"the hook chain is immutable once built (cannot delete {name!r})")

    @property
    def on_block(self) -> BlockObserver | None:
        """Told (the call, the blocking hook's name) when a before-hook blocks a call (the console's call log)."""
        return self._on_block

    def __bool__(self) -> bool:
        return bool(self.entries)

    async def before(self, ctx: CallContext) -> Block | None:
        """Run the before-hooks in order; the first block wins. Arguments are rewritten in `ctx` as they go."""
        for name, method in self._before[ctx.kind]:
            try:
                with anyio.fail_after(BEFORE_TIMEOUT):
                    outcome = await method(ctx)
            except Exception:
                logger.exception("before-hook %s failed on %s %s; blocking (fail closed)", name, ctx.kind, ctx.name,
                                 extra=_log_fields(ctx, hook=name, outcome="blocked"))
                return Block(BLOCKED_BY_FAILURE, name)
            if isinstance(outcome, Block):
                return outcome if outcome.hook else replace(outcome, hook=name)
            if isinstance(outcome, Arguments):
                ctx.arguments = dict(outcome.values) if outcome.replace else {**ctx.arguments, **outcome.values}
        return None

    async def after(self, ctx: CallContext, outcome: Outcome) -> JSONObject | None:
        """Run the after-hooks; each sees the result as the previous one left it. Returns the final result."""
        result = outcome.result
        for name, method in self._after[ctx.kind]:
            try:
                with anyio.fail_after(AFTER_TIMEOUT):
                    change = await method(ctx, Outcome(result, outcome.error, outcome.duration, outcome.blocked))
            except Exception:
                logger.exception("after-hook %s failed on %s %s; skipped (fail open)", name, ctx.kind, ctx.name,
                                 extra=_log_fields(ctx, hook=name))
                continue
            if isinstance(change, Mapping) and result is not None:
                result = {**result, **{k: v for k, v in change.items() if k in RESULT_FIELDS}}
        return result

    async def message(self, ctx: CallContext, message: Message) -> JSONObject | None:
        """Run the `on_message` hooks; the params to relay, or None: withheld. Not under the session lock: a log or
        progress message is relayed from the upstream's reading task, which must not wait on a session's hooks."""
        params = dict(message.params)
        allowed = MESSAGE_FIELDS[message.kind]
        for name, method in self._message:
            try:
                with anyio.fail_after(MESSAGE_TIMEOUT):
                    change = await method(ctx, Message(message.kind, params))
            except Exception:
                logger.exception("hook %s failed on a %s message of %s %s; withheld (fail closed)", name,
                                 message.kind, ctx.kind, ctx.name)
                return None
            if isinstance(change, Mapping):
                params.update((k, v) for k, v in change.items() if k in allowed)
        return params

    async def completion(self, ctx: CallContext, result: JSONObject) -> JSONObject:
        """A completion's result through the `on_message` hooks (its values are the upstream's words too)."""
        if not self._message:
            return result
        changed = await self.message(ctx, Message("completion", {k: result[k] for k in MESSAGE_FIELDS["completion"]
                                                                 if k in result}))
        if changed is None:
            return {"completion": NO_COMPLETION}
        return {**result, **changed}

    def listed(self, kind: ListedKind, item: JSONObject) -> JSONObject | None:
        """One catalog entry through the `on_listed` hooks; None: withheld (a hook failed on it)."""
        identifier = LISTED_NAMES[kind]
        for name, method in self._listed:
            try:
                change = method(kind, item)
            except Exception:
                logger.exception("hook %s failed on a %s of the catalog; withheld (fail closed)", name, kind)
                return None
            if isinstance(change, Mapping):
                item = {**change, identifier: item[identifier]} if identifier in item else dict(change)
        return item

    def catalog(self, catalog: Catalog) -> Catalog:
        """An upstream's catalog as clients may see it: every entry through `listed` (the registry is built from
        this, once per change)."""
        if not self._listed:
            return catalog

        def each(kind: ListedKind, items: Iterable[JSONObject]) -> tuple[JSONObject, ...]:
            return tuple(found for item in items if (found := self.listed(kind, item)) is not None)
        return dataclasses.replace(catalog, tools=each("tool", catalog.tools),
                                   resources=each("resource", catalog.resources),
                                   templates=each("template", catalog.templates),
                                   prompts=each("prompt", catalog.prompts))

    def progress(self, ctx: CallContext, progress: ProgressFn | None) -> ProgressFn | None:
        """The progress callback of a hooked call: each progress message passes the `on_message` hooks."""
        if progress is None or not self._message:
            return progress

        async def relay(params: JSONObject) -> None:
            if params.get("message") is not None:
                changed = await self.message(ctx, Message("progress", params))
                if changed is None:
                    return
                message = changed.get("message")
                params = {**params, "message": message} if isinstance(message, str) else \
                    {key: value for key, value in params.items() if key != "message"}
            await progress(params)

        return relay

    async def rewrite_error(self, ctx: CallContext, error: UpstreamError) -> None:
        """An upstream's error passes the `on_message` hooks (its message and data may be rewritten)."""
        if self._message:
            await self._rewrite_error(ctx, error)

    async def _rewrite_error(self, ctx: CallContext, error: UpstreamError) -> None:
        changed = await self.message(ctx, Message("error", {"code": error.code, "message": error.message,
                                                            "data": error.data}))
        if changed is None:
            changed = {"message": WITHHELD, "data": None}
        message = changed.get("message")
        error.message = message if isinstance(message, str) else WITHHELD
        error.args = (error.message,)
        error.data = changed.get("data")

    async def run(self, ctx: CallContext, send: Callable[[CallContext], Awaitable[JSONObject]]
                  ) -> JSONObject:
        """before-hooks (under the session lock), then `send` (not under it), then after-hooks (under it).

        A blocked tool call becomes a tool error the model can read (`isError`); a blocked read or get becomes a
        `HookBlocked` error. Failures still reach the after-hooks (the audit sees them), then the caller."""
        async with ctx.session.lock:
            block = await self.before(ctx)
        if block is not None and self.on_block is not None:
            self.on_block(ctx, block.hook)
        start = anyio.current_time()
        result: JSONObject | None = None
        failure: TriadError | None = None
        if block is not None and ctx.kind == "tool":
            result = {"content": [{"type": "text", "text": block.reason}], "isError": True}
        elif block is not None:
            failure = HookBlocked(block.reason)
        else:
            downstream = CURRENT_DOWNSTREAM.get()
            token = CURRENT_DOWNSTREAM.set(_HookedDownstream(downstream, self, ctx)) \
                if self._message and downstream is not None else None
            try:
                result = await send(ctx)
            except TriadError as exc:
                failure = exc
                if isinstance(exc, UpstreamError):
                    await self.rewrite_error(ctx, exc)
            finally:
                if token is not None:
                    CURRENT_DOWNSTREAM.reset(token)
        outcome = Outcome(result, failure.message if failure else None, anyio.current_time() - start,
                          block is not None)
        async with ctx.session.lock:
            final = await self.after(ctx, outcome)
        if failure is not None:
            raise failure
        assert final is not None
        return final

    async def denied(self, ctx: CallContext, layer: int, pattern: str | None, detail: str) -> None:
        for name, method in self._denied:
            try:
                await method(ctx, layer, pattern, detail)
            except Exception:
                logger.exception("hook %s failed in on_denied", name)

    async def approval(self, ctx: CallContext, decision: str, by: str, reason: str) -> None:
        """Tell the `on_approval` hooks how a call that needed a person's yes was decided (`gateway.approval`):
        `decision` approved | denied | timeout | unanswerable, `by` who answered, `reason` theirs or Triad's."""
        for name, method in self._approval:
            try:
                await method(ctx, decision, by, reason)
            except Exception:
                logger.exception("hook %s failed in on_approval", name)


class _HookedDownstream(DownstreamWrapper):
    """The downstream of a hooked request while it is sent: the upstream's log messages pass the chain's
    `on_message` hooks on their way to the client's own downstream (`inner`); everything else is the inner one's."""

    def __init__(self, inner: Downstream, chain: HookChain, ctx: CallContext) -> None:
        super().__init__(inner)
        self._chain, self._ctx = chain, ctx

    async def log(self, params: types.LoggingMessageNotificationParams) -> None:
        with warnings.catch_warnings():  # the model is deprecated in 2026-07-28, still relayed where asked for
            warnings.simplefilter("ignore", MCPDeprecationWarning)
            dumped = params.model_dump(by_alias=True, mode="json", exclude_none=True)
            changed = await self._chain.message(self._ctx, Message("log", dumped))
            if changed is None:
                return
            rewritten = types.LoggingMessageNotificationParams.model_validate(changed, by_name=False)
        await self._inner.log(rewritten)

    async def ask(self, request: types.ServerRequest, result_type: type[Answer]) -> Answer | types.ErrorData:
        """A sampling or elicitation request of the upstream passes the `on_message` hooks; withheld, the upstream
        is answered with an error (roots requests carry nothing of the upstream's)."""
        if request.params is None or isinstance(request, types.ListRootsRequest):
            return await self._inner.ask(request, result_type)
        params = request.params.model_dump(by_alias=True, mode="json", exclude_none=True)
        changed = await self._chain.message(self._ctx, Message("request", params))
        if changed is None:
            return types.ErrorData(code=types.INTERNAL_ERROR, message=WITHHELD_REQUEST)
        rewritten = type(request).model_validate({"method": request.method, "params": changed}, by_name=False)
        return await self._inner.ask(rewritten, result_type)


EMPTY_CHAIN = HookChain(())
