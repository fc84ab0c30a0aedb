"""The hook chain around every tool call, resource read and prompt get; the built-in hooks; building the chain from the
config (`build_chain`, and `check_hook` for `triad check`).
"""

from gateway.hooks._builtin import PinDefinitions, json_size
from gateway.hooks._chain import CallContext, HookChain, Kind, Outcome, Session
from gateway.hooks._factory import HookConfigError, build_chain, check_hook

__all__ = [
    "CallContext",
    "HookChain",
    "HookConfigError",
    "Kind",
    "Outcome",
    "PinDefinitions",
    "Session",
    "build_chain",
    "check_hook",
    "json_size",
]
