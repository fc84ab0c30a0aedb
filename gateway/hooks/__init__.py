"""Hooks: the chain around every tool call, resource read and prompt get, its built-ins, and the contract a plugin
keeps.

- The contract: a hook (a built-in, or a plugin named `module:attr` in the config: a class or factory taking its
  options as keyword arguments) implements any of the hook methods, one `Protocol` each (`BeforeCall`, `AfterCall`,
  `BeforeRead`, `AfterRead`, `BeforeGet`, `AfterGet`, `OnDenied`, `OnApproval`, `OnMessage`), every one `async`;
  optionally `priority` (an int, higher first) and `share(state)` (plain, for a cluster's state). A hook is checked
  against it when the chain is built, and a hook class by `triad check`: a name one edit from a hook method
  (`before_cal`), a hook method that is not callable, not async or takes other arguments, or no hook method at all is a
  `HookConfigError` naming the hook and the method.
- What hooks see and answer: `Session`, `CallContext`, `Arguments`, `Block`, `Outcome`, `Message`.
- The chain (`HookChain`, made by `build_chain` from the config's `HookSpec`s) is immutable once built: a reload
  builds a new one. Its methods (`run`, `before`, `after`, `message`, `progress`, `rewrite_error`, `denied`,
  `approval`) call the hook methods bound when it was built, never looked up by name.
- Built-ins: `audit`, `validate_arguments`, `rate_limit`, `timeout`, `max_result_size`, `redact`, `pin_definitions`
  (`PinDefinitions` is named for the console, which reads its approvals).
"""

from gateway.hooks._builtin import PinDefinitions, Redact
from gateway.hooks._chain import HookChain
from gateway.hooks._factory import build_chain, check_hook
from gateway.hooks._options import json_size
from gateway.hooks._protocols import (
                                      AfterCall,
                                      AfterGet,
                                      AfterRead,
                                      BeforeCall,
                                      BeforeGet,
                                      BeforeRead,
                                      HookConfigError,
                                      OnApproval,
                                      OnDenied,
                                      OnMessage,
)
from gateway.hooks._values import Arguments, Block, CallContext, Kind, Message, Outcome, Session

__all__ = [
    "AfterCall",
    "AfterGet",
    "AfterRead",
    "Arguments",
    "BeforeCall",
    "BeforeGet",
    "BeforeRead",
    "Block",
    "CallContext",
    "HookChain",
    "HookConfigError",
    "Kind",
    "Message",
    "OnApproval",
    "OnDenied",
    "OnMessage",
    "Outcome",
    "PinDefinitions",
    "Redact",
    "Session",
    "build_chain",
    "check_hook",
    "json_size",
]
