"""The hook contract: one `Protocol` per hook method, and the check that a hook keeps it.

A hook (built-in or plugin) implements any of the methods below, each `async` but `on_listed`, each called by the
chain with the arguments `HOOK_METHODS` names (positionally). `on_listed` is plain: it runs while the registry is
rebuilt (a plain function of the catalogs), once per catalog entry and change, never per request. A hook may also
have `priority` (an int; higher runs first) and `share(state)` (a plain method, called once when the chain is built
with a cluster's state).

`check_methods` runs before anything is started: by `triad check` on a plugin class (`check_hook`), and when the chain
is built on the class and on the object its factory made (so a hook class declares its hook methods in the class, not
in `__init__`). A public attribute whose name is one edit away from a hook method (`before_cal`, `after_Call`), a hook
method that is not callable, not async or cannot be called with the chain's arguments, and a hook with no hook method
at all are config errors naming the hook and the attribute: a hook that would silently never run is worse than one
that does not load. Helpers keep clear by starting with `_`.
"""

from __future__ import annotations

import inspect
import types
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Protocol, runtime_checkable

from pydantic import BaseModel
from pydantic_core import ErrorDetails

from consumers import JSON, JSONObject
from gateway.hooks._values import Arguments, Block, CallContext, Message, Outcome
from gateway.registry import ListedKind
from gateway.state import SharedState

BeforeOutcome = Arguments | Block | None
"""What a before-hook answers: pass (None), rewrite the arguments, or block."""
BeforeFn = Callable[[CallContext], Awaitable[BeforeOutcome]]
AfterFn = Callable[[CallContext, Outcome], Awaitable[Mapping[str, JSON] | None]]
DeniedFn = Callable[[CallContext, int, str | None, str], Awaitable[None]]
ApprovalFn = Callable[[CallContext, str, str, str], Awaitable[None]]
MessageFn = Callable[[CallContext, Message], Awaitable[Mapping[str, JSON] | None]]
ListedFn = Callable[[ListedKind, JSONObject], Mapping[str, JSON] | None]


class HookConfigError(Exception):
    """A hook that cannot be built from the config: unknown, not importable, bad options, or breaking the contract.
    For options its `Options` model refused, `errors` holds pydantic's errors and `options` the model, so the
    config loader can word each one like any other config problem (key path, line, the fix)."""

    def __init__(self, message: str, errors: Sequence[ErrorDetails] = (), options: type[BaseModel] | None = None
                 ) -> None:
        super().__init__(message)
        self.errors = list(errors)
        self.options = options


@runtime_checkable
class BeforeCall(Protocol):
    async def before_call(self, ctx: CallContext) -> BeforeOutcome: ...


@runtime_checkable
class AfterCall(Protocol):
    async def after_call(self, ctx: CallContext, outcome: Outcome) -> Mapping[str, JSON] | None: ...


@runtime_checkable
class BeforeRead(Protocol):
    async def before_read(self, ctx: CallContext) -> BeforeOutcome: ...


@runtime_checkable
class AfterRead(Protocol):
    async def after_read(self, ctx: CallContext, outcome: Outcome) -> Mapping[str, JSON] | None: ...


@runtime_checkable
class BeforeGet(Protocol):
    async def before_get(self, ctx: CallContext) -> BeforeOutcome: ...


@runtime_checkable
class AfterGet(Protocol):
    async def after_get(self, ctx: CallContext, outcome: Outcome) -> Mapping[str, JSON] | None: ...


@runtime_checkable
class OnDenied(Protocol):
    async def on_denied(self, ctx: CallContext, layer: int, pattern: str | None, detail: str) -> None: ...


@runtime_checkable
class OnApproval(Protocol):
    async def on_approval(self, ctx: CallContext, decision: str, by: str, reason: str) -> None: ...


@runtime_checkable
class OnMessage(Protocol):
    async def on_message(self, ctx: CallContext, message: Message) -> Mapping[str, JSON] | None: ...


@runtime_checkable
class OnListed(Protocol):
    def on_listed(self, kind: ListedKind, item: JSONObject) -> Mapping[str, JSON] | None: ...


@runtime_checkable
class Prioritised(Protocol):
    priority: int


@runtime_checkable
class Shares(Protocol):
    def share(self, state: SharedState) -> None: ...


PathResolver = Callable[[str], str]
"""`TriadConfig.resolve_path`: a path option as written -> the path it means (relative to the config file)."""


@runtime_checkable
class Locates(Protocol):
    """A hook with options that are paths: told, when the chain is built, how the config resolves a path."""

    def locate(self, resolve: PathResolver) -> None: ...


@dataclass(frozen=True)
class HookMethod:
    name: str
    arguments: tuple[str, ...]
    """What the chain passes, in order (after `self`)."""
    awaited: bool = True


HOOK_METHODS: tuple[HookMethod, ...] = (
    HookMethod("before_call", ("ctx",)), HookMethod("after_call", ("ctx", "outcome")),
    HookMethod("before_read", ("ctx",)), HookMethod("after_read", ("ctx", "outcome")),
    HookMethod("before_get", ("ctx",)), HookMethod("after_get", ("ctx", "outcome")),
    HookMethod("on_denied", ("ctx", "layer", "pattern", "detail")), HookMethod("on_message", ("ctx", "message")),
    HookMethod("on_approval", ("ctx", "decision", "by", "reason")),
    HookMethod("on_listed", ("kind", "item"), awaited=False),
)
"""Every hook method; one `Protocol` above each."""
SHARE = HookMethod("share", ("state",), awaited=False)
"""Not a hook method (a hook with only `share` does nothing), but checked like one: an async `share` would share
nothing, silently."""
LOCATE = HookMethod("locate", ("resolve",), awaited=False)
"""Likewise: told how paths resolve before the first call, so it must not be async."""
_SETUP = (SHARE, LOCATE)
_BY_NAME: Mapping[str, HookMethod] = {m.name: m for m in (*HOOK_METHODS, *_SETUP)}
_NONE_OF = ", ".join(m.name for m in HOOK_METHODS)


class _Unknown:
    """An attribute of a class whose value only an instance has (a property or another descriptor)."""


_UNKNOWN = _Unknown()
_UNBOUND_SELF = object()
"""What a function in a class is bound to when the class itself is checked: the `self` an instance would be."""


def check_methods(name: str, target: object) -> tuple[str, ...]:
    """Check a hook class (before instantiating it) or a hook object against the contract; the hook methods it has.
    Raises `HookConfigError` naming the hook and every attribute that breaks it."""
    found: list[str] = []
    problems: list[str] = []
    for attr in dir(target):
        if attr.startswith("_"):
            continue
        method = _BY_NAME.get(attr)
        if method is None:
            if (near := _resembles(attr)) is not None:
                problems.append(f"{attr!r} is not a hook method; did you mean {near!r}? (a helper's name starts "
                                "with _)")
            continue
        if method not in _SETUP:
            found.append(attr)
        try:
            value = _attribute(target, attr)
        except Exception as exc:  # a property that fails: the hook cannot be read, so it cannot run
            problems.append(f"reading {attr} failed: {type(exc).__name__}")
            continue
        if (problem := _method_problem(method, value)) is not None:
            problems.append(problem)
    if problems:
        raise HookConfigError(f"hook {name!r}: " + "; ".join(problems))
    if not found:
        raise HookConfigError(f"hook {name!r} implements none of {_NONE_OF}")
    return tuple(found)


def _attribute(target: object, attr: str) -> object:
    """What `target.attr` is on an instance: the object's own attribute, or for a class, the bound form of a
    function, static or class method, without instantiating it."""
    if not isinstance(target, type):
        return getattr(target, attr)
    raw = inspect.getattr_static(target, attr)
    if isinstance(raw, staticmethod):
        return raw.__func__
    if isinstance(raw, classmethod):
        return types.MethodType(raw.__func__, target)
    if isinstance(raw, types.FunctionType):
        return types.MethodType(raw, _UNBOUND_SELF)
    if hasattr(type(raw), "__get__") and not callable(raw):
        return _UNKNOWN
    return raw


def _method_problem(method: HookMethod, value: object) -> str | None:
    if isinstance(value, _Unknown):
        return None  # checked on the object, when the chain is built
    if not callable(value):
        return f"{method.name} is not callable ({type(value).__name__})"
    if method.awaited and not _is_async(value):
        return f"{method.name} must be async (async def): the chain awaits it"
    if not method.awaited and _is_async(value):
        return f"{method.name} must not be async: it is called, not awaited"
    try:
        signature = inspect.signature(value)
    except (TypeError, ValueError):  # a callable without a readable signature: its call will tell
        return None
    try:
        signature.bind(*method.arguments)
    except TypeError:
        return f"{method.name} must accept ({', '.join(method.arguments)}); its signature is {signature}"
    return None


def _is_async(value: object) -> bool:
    """An `async def` function or method, or an object whose `__call__` is one."""
    if inspect.iscoroutinefunction(value):
        return True
    return not inspect.isroutine(value) and inspect.iscoroutinefunction(type(value).__call__)


def _resembles(attr: str) -> str | None:
    """The hook method `attr` is one edit away from (a character deleted, inserted, replaced, two neighbours
    swapped, or only the case differs), if any."""
    lowered = attr.lower()
    for method in HOOK_METHODS:
        if lowered == method.name or _one_edit_apart(lowered, method.name):
            return method.name
    return None


def _one_edit_apart(a: str, b: str) -> bool:
    if len(a) == len(b):
        diff = [i for i, (x, y) in enumerate(zip(a, b, strict=True)) if x != y]
        if len(diff) == 1:
            return True
        return len(diff) == 2 and diff[1] == diff[0] + 1 and a[diff[0]] == b[diff[1]] and a[diff[1]] == b[diff[0]]
    if abs(len(a) - len(b)) != 1:
        return False
    short, long = (a, b) if len(a) < len(b) else (b, a)
    i = next((i for i, (x, y) in enumerate(zip(short, long, strict=False)) if x != y), len(short))
    return short[i:] == long[i + 1:]
