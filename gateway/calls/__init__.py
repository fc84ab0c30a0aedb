"""The call path: the `Dispatcher` that holds the current registry snapshot and serves every request an exposer hands it
(tools, resources, prompts, completions, subscriptions, tasks), and the core tools' executors.
"""

from gateway.calls._dispatcher import LEGACY_TASKS, SUBSCRIBE, Dispatcher
from gateway.calls._pin_gate import pin_hooks

__all__ = [
    "LEGACY_TASKS",
    "SUBSCRIBE",
    "Dispatcher",
    "pin_hooks",
]
