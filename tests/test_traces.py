"""One span per hop, client -> Triad -> upstream, on every upstream transport (issue 31, point 11).

Triad runs with the OpenTelemetry SDK's console exporter (its spans, as JSON, go to a file); the client sends its
own `traceparent`. Each upstream (stdio, legacy SSE, which takes the SDK's path, and streamable HTTP in the
handshake era, which takes Triad's direct HTTP path) echoes the `_meta` it received, and over HTTP the `traceparent`
header too: each must name Triad's client span, whose parent is Triad's server span for the client's request, whose
parent is the client's span.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from mcp import Client

from tests.conftest import PYTHON, TRIAD, Proc, start_fixture, stdio_upstream, write_config

pytestmark = pytest.mark.anyio

WITH_STDOUT_TO = "import os, sys; fd = os.open(sys.argv[1], os.O_WRONLY | os.O_CREAT); os.dup2(fd, 1); " \
                 "os.execv(sys.executable, [sys.executable, *sys.argv[2:]])"
"""Run a command with its stdout in a file (the same process: its PID is the one the test stops)."""


def spans_in(text: str) -> list[dict[str, Any]]:
    decoder, spans, at = json.JSONDecoder(), [], 0
    while (at := text.find("{", at)) >= 0:
        span, at = decoder.raw_decode(text, at)
        spans.append(span)
    return spans


def parent_of(traceparent: str) -> tuple[str, str]:
    _, trace_id, span_id, _ = traceparent.split("-")
    return trace_id, span_id


async def test_each_hop_has_a_span_and_the_upstream_sees_triads_as_its_parent(procs: list[Proc],
                                                                               tmp_path: Path) -> None:
    upstreams = {"st": stdio_upstream("trace-stdio"), "ht": {"url": start_fixture(procs, "http", "trace-http")},
                 "ss": {"url": start_fixture(procs, "sse", "trace-sse")}}
    config = write_config(tmp_path, {"upstreams": upstreams})
    spans_file = tmp_path / "spans.json"
    proc = Proc([PYTHON, "-c", WITH_STDOUT_TO, str(spans_file), *TRIAD[1:], "serve", "-c", str(config),
                 "--port", "0"], env={"OTEL_TRACES_EXPORTER": "console"})
    procs.append(proc)
    url = (await proc.until(r"listening on (http://127\.0\.0\.1:\d+/mcp)")).group(1)
    await proc.until(r"upstream \S+ ready", count=len(upstreams))
    received: dict[str, tuple[str, dict[str, Any]]] = {}
    async with Client(url, mode="legacy", cache=None) as client:
        for index, name in enumerate(upstreams):
            traceparent = f"00-{index + 1:032x}-{index + 1:016x}-01"
            result = await client.call_tool(f"{name}__echo", {"text": "traced"}, meta={"traceparent": traceparent})
            received[name] = (traceparent, result.meta or {})
    proc.terminate()
    spans = spans_in(spans_file.read_text())
    by_id = {span["context"]["span_id"]: span for span in spans}
    for name, (sent, meta) in received.items():
        trace_id, client_span = parent_of(sent)
        upstream_trace, upstream_parent = parent_of(meta["fixture/received-meta"]["traceparent"])
        assert upstream_trace == trace_id, name  # the client's trace goes on
        assert upstream_parent != client_span, f"{name}: the upstream got the client's own traceparent"
        hop = by_id.get(f"0x{upstream_parent}")
        assert hop is not None, f"{name}: the upstream's parent is no span Triad exported"
        assert hop["kind"] == "SpanKind.CLIENT" and hop["name"] == "MCP send tools/call echo", (name, hop)
        server = by_id[hop["parent_id"]]
        assert server["kind"] == "SpanKind.SERVER" and server["name"] == f"tools/call {name}__echo", (name, server)
        assert server["parent_id"] == f"0x{client_span}" and server["context"]["trace_id"] == f"0x{trace_id}"
        if name != "st":  # over HTTP the context travels in the W3C header as well, naming the same span: on the
            # direct path (ht), and on the SDK's (ss: legacy SSE, as a 2026-07-28 session's calls)
            assert meta.get("fixture/received-traceparent-header") == meta["fixture/received-meta"]["traceparent"], \
                name
