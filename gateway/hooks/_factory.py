"""Building the hook chain from the config: built-in hooks by name, plugins by `module:attr`, each with its options
and its contract checked (`gateway.hooks._protocols`). `triad check` runs `check_hook` (imports, option models, the
hook methods of a class) without starting anything; a factory function's object is checked when the chain is built.

It sits above the chain and the built-ins, which import nothing of it.
"""

from __future__ import annotations

import difflib
import importlib
from collections.abc import Callable, Mapping, Sequence

from pydantic import ValidationError

from consumers import JSON
from gateway.config import HookSpec
from gateway.hooks._builtin import BUILTIN_HOOKS
from gateway.hooks._chain import BlockObserver, HookChain, HookEntry
from gateway.hooks._protocols import HookConfigError, Locates, PathResolver, Prioritised, Shares, check_methods
from gateway.state import SharedState

__all__ = ["HookConfigError", "build_chain", "check_hook", "make_hook"]


def build_chain(specs: Sequence[HookSpec], shared: SharedState | None = None, *,
                on_block: BlockObserver | None = None, resolve: PathResolver | None = None) -> HookChain:
    """Instantiate every hook of the config (`HookSpec`s), in order, and build the (immutable) chain. Raises
    HookConfigError naming the hook. With `shared` (a cluster's state), hooks that keep state (`share(state)`) keep it
    there; hooks with path options (`locate(resolve)`) resolve them with `resolve` (the config's
    `TriadConfig.resolve_path`); `on_block` is told of every call a before-hook blocks."""
    entries = []
    for order, spec in enumerate(specs):
        name, options = spec.name, spec.options
        hook = make_hook(name, options)
        if resolve is not None and isinstance(hook, Locates):
            hook.locate(resolve)
        if shared is not None and isinstance(hook, Shares):
            hook.share(shared)
        entries.append(HookEntry(name, hook, _priority(name, hook), order))
    return HookChain(entries, on_block=on_block)


def _priority(name: str, hook: object) -> int:
    if not isinstance(hook, Prioritised):
        return 0
    try:
        return int(hook.priority)
    except (TypeError, ValueError):
        raise HookConfigError(f"hook {name!r}: priority must be an integer, not {hook.priority!r}") from None


def check_hook(name: str, options: Mapping[str, JSON]) -> None:
    """What `triad check` verifies without running anything: a built-in's options, a plugin's import, and the hook
    methods of a hook class."""
    factory = _factory(name)
    options_model = getattr(factory, "Options", None)
    if options_model is not None:
        try:
            options_model(**options)
        except ValidationError as exc:
            errors = exc.errors(include_input=False, include_url=False)
            raise HookConfigError(f"invalid options for hook {name!r}: {_first_line(exc)}", errors,
                                  options_model) from None
        except Exception as exc:
            raise HookConfigError(f"invalid options for hook {name!r}: {_first_line(exc)}") from None
    if isinstance(factory, type):
        check_methods(name, factory)


def _first_line(exc: Exception) -> str:
    text = str(exc)
    return " ".join(line.strip() for line in text.splitlines()[:3]) if text else type(exc).__name__


def make_hook(name: str, options: Mapping[str, JSON]) -> object:
    """The hook `name` with `options`: a class is checked before it is instantiated, what it (or a factory function)
    makes, after."""
    factory = _factory(name)
    if isinstance(factory, type):
        check_methods(name, factory)
    try:
        hook: object = factory(**options)
    except Exception as exc:
        raise HookConfigError(f"invalid options for hook {name!r}: {_first_line(exc)}") from None
    check_methods(name, hook)
    return hook


def _factory(name: str) -> Callable[..., object]:
    factory: Callable[..., object] | None
    if ":" not in name:
        factory = BUILTIN_HOOKS.get(name)
        if factory is None:
            known = ", ".join(sorted(BUILTIN_HOOKS))
            close = difflib.get_close_matches(name, list(BUILTIN_HOOKS), n=1, cutoff=0.6)
            meant = f"did you mean {close[0]!r}? " if close else ""
            raise HookConfigError(f"unknown built-in hook {name!r} ({meant}built-ins: {known}; plugins are "
                                  "module:attr)")
    else:
        module_name, _, attr = name.partition(":")
        try:
            factory = getattr(importlib.import_module(module_name), attr)
        except ImportError as exc:
            raise HookConfigError(f"cannot import plugin module {module_name!r}: {exc}") from None
        except AttributeError:
            raise HookConfigError(f"plugin module {module_name!r} has no attribute {attr!r}") from None
    return factory
