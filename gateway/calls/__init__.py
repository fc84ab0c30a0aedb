"""TODO"""

from gateway.calls._dispatcher import LEGACY_TASKS, SUBSCRIBE, Dispatcher

__all__ = [
    "LEGACY_TASKS",
    "SUBSCRIBE",
    "Dispatcher",
]
