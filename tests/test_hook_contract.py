"""The hook contract, checked when the chain is built and by `triad check`: plugin classes generated with every kind
of defect (each hook method misspelt by one edit, wrong arity, sync instead of async, not callable, no hook method
at all) are refused with a message naming the hook and the method; every correct combination is accepted and each
of its methods is the one the chain calls."""

from __future__ import annotations

import itertools
import string
import sys
import types as pytypes
from collections.abc import Callable, Iterator
from dataclasses import FrozenInstanceError
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gateway.config._models import HookSpec
from gateway.errors import ConfigError
from gateway.hooks import CallContext, HookChain, HookConfigError, Message, Outcome, Session, build_chain, check_hook
from gateway.hooks._chain import HookEntry
from gateway.runtime._loading import parse_config

pytestmark = pytest.mark.anyio

MODULE = "triad_generated_hooks"
"""The module generated plugin classes are loaded from, as `triad_generated_hooks:<Class>` in the config."""

ARITY = {"before_call": 1, "after_call": 2, "before_read": 1, "after_read": 2, "before_get": 1, "after_get": 2,
         "on_denied": 4, "on_message": 2}
"""Every hook method, and how many arguments after `self` the chain passes it."""
METHODS = tuple(ARITY)
ALPHABET = string.ascii_lowercase + "_"


@pytest.fixture(autouse=True)
def plugin_module(monkeypatch: pytest.MonkeyPatch) -> pytypes.ModuleType:
    module = pytypes.ModuleType(MODULE)
    monkeypatch.setitem(sys.modules, MODULE, module)
    return module


def async_method(arity: int, calls: list[str] | None = None, name: str = "") -> Callable[..., Any]:
    """`async def m(self, a0, ..., a<arity-1>)`, recording its name in `calls` when called."""
    params = ", ".join(["self", *(f"a{i}" for i in range(arity))])
    namespace: dict[str, Any] = {"calls": calls if calls is not None else [], "name": name}
    exec(f"async def method({params}):\n    calls.append(name)\n", namespace)
    method: Callable[..., Any] = namespace["method"]
    return method


def sync_method(arity: int) -> Callable[..., Any]:
    params = ", ".join(["self", *(f"a{i}" for i in range(arity))])
    namespace: dict[str, Any] = {}
    exec(f"def method({params}):\n    return None\n", namespace)
    method: Callable[..., Any] = namespace["method"]
    return method


def plugin(module: pytypes.ModuleType, attributes: dict[str, Any], name: str = "Plugin") -> str:
    """A plugin class with these attributes, published in the generated module; its `module:attr` name."""
    setattr(module, name, type(name, (), attributes))
    return f"{MODULE}:{name}"


def refused(spec: str) -> str:
    """The message of building a chain with `spec` (it must fail)."""
    with pytest.raises(HookConfigError) as raised:
        build_chain([HookSpec(name=spec)])
    return str(raised.value)


def misspellings(name: str) -> Iterator[str]:
    """Every name one edit away from `name` (a letter or `_` deleted, inserted, replaced, or two swapped) that is
    public (a name starting with `_` is a helper, never a hook method)."""
    seen = {name}
    for i in range(len(name) + 1):
        head, tail = name[:i], name[i:]
        candidates = [head + c + tail for c in ALPHABET]
        if tail:
            candidates += [head + tail[1:], *(head + c + tail[1:] for c in ALPHABET)]
        if len(tail) > 1:
            candidates.append(head + tail[1] + tail[0] + tail[2:])
        for candidate in candidates:
            if candidate not in seen and not candidate.startswith("_"):
                seen.add(candidate)
                yield candidate


@pytest.mark.parametrize("method", METHODS)
def test_every_one_edit_misspelling_of_a_hook_method_is_refused_by_name(
        plugin_module: pytypes.ModuleType, method: str) -> None:
    """Alone (the plugin would do nothing) and beside a correct method (the misspelt one would be silently
    skipped): each misspelling is refused with its own name and the method it resembles."""
    other = "on_denied" if method != "on_denied" else "before_call"
    count = 0
    for wrong in misspellings(method):
        for extra in ({}, {other: async_method(ARITY[other])}):
            message = refused(plugin(plugin_module, {wrong: async_method(ARITY[method]), **extra}))
            assert f"{MODULE}:Plugin" in message and repr(wrong) in message and repr(method) in message, message
        count += 1
    assert count > 500


@given(method=st.sampled_from(METHODS), position=st.integers(0, 20), char=st.sampled_from(string.ascii_letters),
       edit=st.sampled_from(["insert", "replace", "delete", "swap", "case"]))
@settings(max_examples=200, deadline=None)
def test_a_random_one_edit_misspelling_is_refused(method: str, position: int, char: str, edit: str) -> None:
    i = position % len(method)
    head, tail = method[:i], method[i:]
    wrong = {"insert": head + char + tail, "replace": head + char + tail[1:], "delete": head + tail[1:],
             "swap": head + tail[1:2] + tail[:1] + tail[2:], "case": head + tail[:1].upper() + tail[1:]}[edit]
    module = sys.modules.setdefault(MODULE, pytypes.ModuleType(MODULE))
    if wrong == method or wrong.startswith("_"):
        return
    message = refused(plugin(module, {wrong: async_method(ARITY[method]), "after_get": async_method(2)}))
    assert repr(wrong) in message, message


def defects() -> Iterator[tuple[str, str, Any]]:
    """(defect, method, attribute): each hook method with a wrong arity, sync, or not callable."""
    for method, arity in ARITY.items():
        yield "too few arguments", method, async_method(arity - 1)
        yield "too many arguments", method, async_method(arity + 1)
        yield "keyword-only argument", method, _keyword_only(arity)
        yield "sync", method, sync_method(arity)
        yield "not callable (int)", method, 3
        yield "not callable (None)", method, None
        yield "not callable (str)", method, "before"


def _keyword_only(arity: int) -> Callable[..., Any]:
    namespace: dict[str, Any] = {}
    params = ", ".join(["self", *(f"a{i}" for i in range(arity - 1)), "*", "last"])
    exec(f"async def method({params}):\n    return None\n", namespace)
    method: Callable[..., Any] = namespace["method"]
    return method


@pytest.mark.parametrize(("defect", "method", "attribute"),
                         [pytest.param(*case, id=f"{case[1]}-{case[0]}") for case in defects()])
def test_a_hook_method_with_a_defect_is_refused_by_name(plugin_module: pytypes.ModuleType, defect: str, method: str,
                                                        attribute: Any) -> None:
    other = "on_message" if method != "on_message" else "before_call"
    spec = plugin(plugin_module, {method: attribute, other: async_method(ARITY[other])})
    message = refused(spec)
    assert spec in message and method in message, message
    with pytest.raises(ConfigError) as raised:  # `triad check`: the key path, without starting anything
        parse_config(f"hooks:\n- audit\n- {spec}\n")
    assert any(p.startswith("hooks.1: ") and method in p for p in raised.value.problems), raised.value.problems


@pytest.mark.parametrize("attributes", [
    {}, {"priority": 5}, {"share": lambda self, state: None}, {"_before_call": async_method(1)},
    {"helper": async_method(1), "options": {}},
], ids=["empty", "priority only", "share only", "private only", "helpers only"])
def test_a_plugin_with_no_hook_method_is_refused(plugin_module: pytypes.ModuleType, attributes: dict[str, Any]
                                                 ) -> None:
    spec = plugin(plugin_module, attributes)
    assert "implements none of" in refused(spec) and spec in refused(spec)
    with pytest.raises(ConfigError) as raised:
        parse_config(f"hooks:\n- {spec}\n")
    assert any(p.startswith("hooks.0: ") and "implements none of" in p for p in raised.value.problems)


def test_a_factory_whose_object_has_a_defect_is_refused_when_the_chain_is_built(
        plugin_module: pytypes.ModuleType) -> None:
    """A factory function cannot be checked without running it: its object is, when the chain is built."""
    defective = type("Made", (), {"before_call": sync_method(1)})

    def make(**options: Any) -> Any:
        return defective()

    plugin_module.make = make  # type: ignore[attr-defined]
    message = refused(f"{MODULE}:make")
    assert f"{MODULE}:make" in message and "before_call" in message


def test_an_async_share_is_refused(plugin_module: pytypes.ModuleType) -> None:
    """`share(state)` is called, not awaited: an async one would silently share nothing."""
    spec = plugin(plugin_module, {"before_call": async_method(1), "share": async_method(1)})
    assert "share" in refused(spec)


COMBINATIONS = [combo for size in range(1, len(METHODS) + 1) for combo in itertools.combinations(METHODS, size)]


async def test_every_correct_combination_is_accepted_and_called(plugin_module: pytypes.ModuleType) -> None:
    """All 255 non-empty sets of hook methods: each builds (also through `triad check`), and running every kind of
    request through the chain calls exactly the methods the class has."""
    for index, combo in enumerate(COMBINATIONS):
        calls: list[str] = []
        attributes: dict[str, Any] = {m: async_method(ARITY[m], calls, m) for m in combo}
        if index % 3 == 0:
            attributes["priority"] = index
        if index % 5 == 0:
            attributes["share"] = lambda self, state: None
        spec = plugin(plugin_module, attributes, f"Good{index}")
        check_hook(spec, {})
        chain = build_chain([HookSpec(name=spec)])
        session = Session("s")
        for kind in ("tool", "resource", "prompt"):
            ctx = CallContext(kind, "c", session, "n", "u", "n", {})
            await chain.after(ctx, Outcome({"content": []}, None, 0.0))
            await chain.before(ctx)
            await chain.message(ctx, Message("log", {"data": "x"}))
        await chain.denied(CallContext("tool", "c", session, "n", "u", "n", {}), 1, None, "denied")
        assert sorted(set(calls)) == sorted(combo), (combo, calls)


def _flexible_after_call() -> Callable[..., Any]:
    namespace: dict[str, Any] = {}
    exec("async def after_call(self, ctx, outcome, extra=None, *rest):\n    return None\n", namespace)
    method: Callable[..., Any] = namespace["after_call"]
    return method


@pytest.mark.parametrize("attributes", [
    {"before_call": staticmethod(async_method(0))},   # a static method of one parameter: called with ctx only
    {"after_call": _flexible_after_call()},            # more parameters, with defaults
], ids=["staticmethod", "defaulted extra arguments"])
def test_flexible_signatures_that_the_chain_can_call_are_accepted(plugin_module: pytypes.ModuleType,
                                                                  attributes: dict[str, Any]) -> None:
    spec = plugin(plugin_module, attributes)
    check_hook(spec, {})
    assert build_chain([HookSpec(name=spec)])


class _Pass:
    async def before_call(self, ctx: CallContext) -> None:
        return None


def test_the_chain_is_immutable_once_built() -> None:
    chain = HookChain([HookEntry("pass", _Pass(), 0, 0)])
    for attribute, value in (("entries", ()), ("_before", {}), ("_message", ()), ("added", 1)):
        with pytest.raises(AttributeError, match="immutable"):
            setattr(chain, attribute, value)
    with pytest.raises(AttributeError, match="immutable"):
        del chain.entries
    assert isinstance(chain.entries, tuple) and len(chain.entries) == 1
    with pytest.raises(FrozenInstanceError):
        chain.entries[0].hook = _Pass()  # type: ignore[misc]


def test_on_block_is_given_at_construction_and_never_changed() -> None:
    def first(ctx: CallContext, hook: str) -> None: ...

    def second(ctx: CallContext, hook: str) -> None: ...

    wired = HookChain([HookEntry("pass", _Pass(), 0, 0)], on_block=first)
    assert wired.on_block is first
    for observer in (first, second, None):
        with pytest.raises(AttributeError, match="immutable"):
            wired.on_block = observer  # type: ignore[misc]
    assert wired.on_block is first


def test_a_chain_built_by_hand_is_checked_too() -> None:
    class Sync:
        def before_call(self, ctx: CallContext) -> None: ...

    with pytest.raises(HookConfigError, match=r"'by-hand'.*before_call must be async"):
        HookChain([HookEntry("by-hand", Sync(), 0, 0)])
