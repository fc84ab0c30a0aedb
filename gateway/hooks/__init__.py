"""TODO"""

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
