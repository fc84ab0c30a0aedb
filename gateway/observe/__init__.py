"""What operators see: Prometheus metrics, the calls in flight and recent ones, the call path's log lines and JSON log
format, optional OpenTelemetry tracing, and the record of reloads (with `Reloads`, the reloader as the edge sees it).
"""

from gateway.observe._call_log import CallRecord
from gateway.observe._logs import (
    JsonFormatter,
    LogSummary,
    TextFormatter,
    escape_controls,
    log_call,
    log_denied,
    mask_logs,
)
from gateway.observe._metrics import OUTCOMES, Metrics
from gateway.observe._reloads import ReloadResult, Reloads, ReloadStatus
from gateway.observe._tracing import configure_tracing, tracing_enabled

__all__ = [
    "OUTCOMES",
    "CallRecord",
    "JsonFormatter",
    "LogSummary",
    "Metrics",
    "ReloadResult",
    "ReloadStatus",
    "Reloads",
    "TextFormatter",
    "configure_tracing",
    "escape_controls",
    "log_call",
    "log_denied",
    "mask_logs",
    "tracing_enabled",
]
