"""Building the hook chain from the config: built-in hooks by name, plugins by `module:attr`, each with its options
checked. `triad check` runs `check_hook` (imports, option models) without starting anything.

It sits above the chain (`gateway.hooks`) and the built-ins (`gateway.hooks`), which import nothing of it.
"""

from __future__ import annotations

import importlib
from collections.abc import Mapping, Sequence
from typing import Any

from gateway.hooks._builtin import BUILTIN_HOOKS
from gateway.hooks._chain import HOOK_METHODS, HookChain, HookEntry
from gateway.state import SharedState

__all__ = ["HookConfigError", "build_chain", "check_hook", "make_hook"]


def build_chain(specs: Sequence[Any], shared: SharedState | None = None) -> HookChain:
    """Instantiate every hook of the config (`HookSpec`s), in order. Raises HookConfigError naming the hook. With
    `shared` (a cluster's state), hooks that keep state (`share(state)`) keep it there."""
    entries = []
    for order, spec in enumerate(specs):
        name, options = spec.name, spec.options
        hook = make_hook(name, options)
        if shared is not None and callable(getattr(hook, "share", None)):
            hook.share(shared)
        entries.append(HookEntry(name, hook, int(getattr(hook, "priority", 0)), order))
    return HookChain(entries)


class HookConfigError(Exception):
    pass


def check_hook(name: str, options: Mapping[str, Any]) -> None:
    """What `triad check` verifies without running anything: a built-in's options, a plugin's import."""
    factory = _factory(name)
    options_model = getattr(factory, "Options", None)
    if options_model is not None:
        try:
            options_model(**options)
        except Exception as exc:
            raise HookConfigError(f"invalid options for hook {name!r}: {_first_line(exc)}") from None


def _first_line(exc: Exception) -> str:
    text = str(exc)
    return " ".join(line.strip() for line in text.splitlines()[:3]) if text else type(exc).__name__


def make_hook(name: str, options: Mapping[str, Any]) -> Any:
    factory = _factory(name)
    try:
        hook = factory(**options)
    except Exception as exc:
        raise HookConfigError(f"invalid options for hook {name!r}: {_first_line(exc)}") from None
    if not any(callable(getattr(hook, m, None)) for pair in HOOK_METHODS.values() for m in pair) and not any(
            callable(getattr(hook, m, None)) for m in ("on_denied", "on_message")):
        raise HookConfigError(f"hook {name!r} implements none of before_call, after_call, before_read, after_read, "
                              "before_get, after_get, on_denied, on_message")
    return hook


def _factory(name: str) -> Any:
    if ":" not in name:
        factory = BUILTIN_HOOKS.get(name)
        if factory is None:
            known = ", ".join(sorted(BUILTIN_HOOKS))
            raise HookConfigError(f"unknown built-in hook {name!r} (built-ins: {known}; plugins are module:attr)")
    else:
        module_name, _, attr = name.partition(":")
        try:
            factory = getattr(importlib.import_module(module_name), attr)
        except ImportError as exc:
            raise HookConfigError(f"cannot import plugin module {module_name!r}: {exc}") from None
        except AttributeError:
            raise HookConfigError(f"plugin module {module_name!r} has no attribute {attr!r}") from None
    return factory
