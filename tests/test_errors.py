"""Failure descriptions shown in logs, `triad plan` and `/readyz` never carry credentials or query tokens."""

from __future__ import annotations

import pytest

from consumers import describe_failure
from consumers._errors import redact_urls


@pytest.mark.parametrize(("text", "expected"), [
    ("for url 'https://user:pw@api.example/mcp?token=abc'", "for url 'https://api.example/mcp'"),
    ("GET http://127.0.0.1:9000/sse?key=s3cret failed", "GET http://127.0.0.1:9000/sse failed"),
    ("no url here", "no url here"),
])
def test_urls_lose_credentials_and_queries(text: str, expected: str) -> None:
    assert redact_urls(text) == expected


def test_exception_groups_are_flattened_and_redacted() -> None:
    group = ExceptionGroup("x", [OSError("connect to http://a:b@h/mcp?t=1 refused"), FileNotFoundError(2, "x", "npx")])
    assert describe_failure(group) == "OSError: connect to http://h/mcp refused; command not found: npx"
