"""Tasks (the MCP tasks extension) through Triad: which upstream holds each task and who may see it (`TaskBook`), the
mapping between the two eras' tasks, and the `tasks/*` requests relayed to the upstream that holds a task.
"""

from gateway.tasks._records import (
    EXTENSION,
    LEGACY_METHODS,
    METHODS,
    MODERN_METHODS,
    TASK_PREFIX,
    Era,
    TaskBook,
    TaskPush,
    TaskPushParams,
    TaskRequestParams,
    declares_extension,
    missing_extension_data,
    offers_extension,
    offers_legacy_tasks,
    task_owner,
    with_task_id,
)
from gateway.tasks._relay import TaskRelay
from gateway.tasks._relayed import key_of

__all__ = [
    "EXTENSION",
    "LEGACY_METHODS",
    "METHODS",
    "MODERN_METHODS",
    "TASK_PREFIX",
    "Era",
    "TaskBook",
    "TaskPush",
    "TaskPushParams",
    "TaskRelay",
    "TaskRequestParams",
    "declares_extension",
    "key_of",
    "missing_extension_data",
    "offers_extension",
    "offers_legacy_tasks",
    "task_owner",
    "with_task_id",
]
