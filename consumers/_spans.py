"""Triad's client span for a request on the direct HTTP path, and the W3C trace context it carries upstream.

The SDK's session opens a client span for each request it sends and injects its `traceparent` into `_meta`; the
direct path (`consumers._direct_http`) bypasses the SDK, so it does the same here, and also sends the context as
the `traceparent` / `tracestate` HTTP headers (the W3C Trace Context convention for HTTP, which HTTP middleware
of an upstream reads). The span is a child of the current one (Triad's server span for the client's request), so
the upstream sees Triad's hop as its parent, never the client's own `traceparent` unchanged.

On the SDK's path (a 2026-07-28 session's requests, lists and pings of every session) the SDK injects its span's
context into `_meta` only, from its own task; `sdk_trace_headers` copies it into the headers of the POST that
carries the message, where the span's context is no longer current.

With no tracer provider installed (tracing off), nothing is opened or injected and the client's `_meta` passes
through untouched, as it does on the SDK's path; the check costs one global lookup per request.
"""

from __future__ import annotations

from collections.abc import Iterator, MutableMapping
from contextlib import contextmanager

from opentelemetry import propagate, trace
from opentelemetry.trace import Span, SpanKind

from consumers._json import JSONObject, loads

TRACER_NAME = "triad"


def tracing() -> bool:
    return not isinstance(trace.get_tracer_provider(), trace.ProxyTracerProvider | trace.NoOpTracerProvider)


def sdk_trace_headers(body: bytes, headers: MutableMapping[str, str]) -> None:
    """The `traceparent` / `tracestate` of the message in `body` (as the SDK injected them into its `_meta`) set as
    `headers`, when tracing is on and the message carries them."""
    if not tracing() or b"traceparent" not in body:
        return
    try:
        message = loads(body)
    except ValueError:
        return
    params = message.get("params") if isinstance(message, dict) else None
    meta = params.get("_meta") if isinstance(params, dict) else None
    if isinstance(meta, dict):
        for key in ("traceparent", "tracestate"):
            if isinstance(value := meta.get(key), str):
                headers[key] = value


@contextmanager
def request_span(message: JSONObject, request_id: str, headers: dict[str, str]) -> Iterator[Span | None]:
    """A client span around one request: its context injected into `message`'s `_meta` and into `headers`."""
    if not tracing():
        yield None
        return
    provider = trace.get_tracer_provider()
    method = str(message.get("method", ""))
    params = message.get("params")
    target = params.get("name") if isinstance(params, dict) else None
    name = f"MCP send {method}{f' {target}' if isinstance(target, str) else ''}"  # the SDK's span names
    with provider.get_tracer(TRACER_NAME).start_as_current_span(
            name, kind=SpanKind.CLIENT,
            attributes={"mcp.method.name": method, "jsonrpc.request.id": request_id}) as span:
        if isinstance(params, dict):
            meta = params.setdefault("_meta", {})
            for key in ("traceparent", "tracestate"):  # the client's context is replaced, not kept beside ours
                meta.pop(key, None)
            propagate.inject(meta)
        propagate.inject(headers)
        yield span
