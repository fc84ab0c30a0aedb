"""Optional OpenTelemetry tracing (`pip install 'mcp-triad[otel]'`).

The SDK already opens a server span for each request Triad receives (continuing a `traceparent` the client sent in
`_meta`) and a client span for each request Triad sends upstream (injecting its `traceparent` into `_meta`); with
no tracer provider those spans cost nothing and the client's trace context still passes through. This module
installs a provider when `OTEL_TRACES_EXPORTER` asks for one: `console` (spans as JSON on stdout) or `otlp`
(needs `opentelemetry-exporter-otlp`; configured by the standard `OTEL_EXPORTER_OTLP_*` variables).
"""

from __future__ import annotations

import logging
import os

logger = logging.getLogger("triad")


def configure_tracing() -> str | None:
    """Install a tracer provider if asked to; returns the exporter's name, or None when tracing stays off."""
    wanted = os.environ.get("OTEL_TRACES_EXPORTER", "").strip().lower()
    if wanted in ("", "none"):
        return None
    try:
        from opentelemetry import trace
        from opentelemetry.sdk.resources import Resource
        from opentelemetry.sdk.trace import TracerProvider
        from opentelemetry.sdk.trace.export import BatchSpanProcessor, ConsoleSpanExporter, SimpleSpanProcessor
    except ImportError:
        logger.error("OTEL_TRACES_EXPORTER=%s but opentelemetry-sdk is missing: pip install 'mcp-triad[otel]'",
                     wanted)
        return None
    provider = TracerProvider(resource=Resource.create({"service.name": os.environ.get("OTEL_SERVICE_NAME",
                                                                                         "triad")}))
    if wanted == "console":
        provider.add_span_processor(SimpleSpanProcessor(ConsoleSpanExporter()))
    elif wanted == "otlp":
        try:
            from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
        except ImportError:
            logger.error("OTEL_TRACES_EXPORTER=otlp needs opentelemetry-exporter-otlp-proto-http")
            return None
        provider.add_span_processor(BatchSpanProcessor(OTLPSpanExporter()))
    else:
        logger.error("OTEL_TRACES_EXPORTER=%s is not supported (console, otlp, none)", wanted)
        return None
    trace.set_tracer_provider(provider)
    return wanted


def tracing_enabled() -> bool:
    """True once a real tracer provider is installed (by `configure_tracing` or by the embedding program)."""
    from opentelemetry import trace

    return not isinstance(trace.get_tracer_provider(), trace.ProxyTracerProvider | trace.NoOpTracerProvider)
