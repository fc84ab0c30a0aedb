"""The text log format: one record is one line whatever a caller, an upstream or an exception puts in it (no
forged lines), and the text stays recoverable (control characters are escaped, never dropped). The JSON format
holds to the same property."""

from __future__ import annotations

import json
import logging
import re
import sys
from pathlib import Path
from typing import Any

import httpx2
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gateway.observe import JsonFormatter, TextFormatter
from gateway.observe._logs import TEXT_FORMAT
from tests.conftest import Proc, start_triad, stdio_upstream, write_config
from tests.raw_clients import HandshakeSession, call, dumps, modern_headers

ANY_TEXT = st.text(st.characters(exclude_categories=()), max_size=80)
"""Every code point, lone surrogates, C0, C1, DEL, U+2028/2029 and U+0085 included."""
RECORD_LINE = re.compile(r"^\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d{3} (?P<level>[A-Z]+) +(?P<name>.*?): (?P<message>.*)$",
                         re.DOTALL)
_ESCAPE = re.compile(r"\\(\\|n|r|t|x[0-9a-f]{2}|u[0-9a-f]{4})")
_NAMED = {"\\": "\\", "n": "\n", "r": "\r", "t": "\t"}


def unescape(text: str) -> str:
    return _ESCAPE.sub(lambda m: _NAMED.get(m[1]) or chr(int(m[1][1:], 16)), text)


def record(name: str, message: str, args: tuple[Any, ...], error: str | None) -> logging.LogRecord:
    exc_info = None
    if error is not None:
        try:
            raise ValueError(error)
        except ValueError:
            exc_info = sys.exc_info()
    return logging.LogRecord(name, logging.WARNING, __file__, 1, message, args, exc_info)


@settings(max_examples=400)
@given(name=ANY_TEXT, message=ANY_TEXT, arg=ANY_TEXT, error=st.none() | ANY_TEXT)
def test_one_record_is_one_line_in_either_format_and_its_text_is_recoverable(name: str, message: str, arg: str,
                                                                            error: str | None) -> None:
    def made() -> logging.LogRecord:
        return record(name, message.replace("%", "%%") + " %s", (arg,), error)

    one = made()
    line = TextFormatter().format(one)
    assert len(line.splitlines()) == 1 and "\n" not in line, repr(line)
    assert not re.search("[\x00-\x1f\x7f-\x9f\u2028\u2029\ud800-\udfff]", line), repr(line)
    assert RECORD_LINE.match(line), repr(line)
    # the same record as logging's own formatter writes it (lines and all), character for character
    assert unescape(line) == logging.Formatter(TEXT_FORMAT).format(one)

    json_line = JsonFormatter().format(made())
    assert len(json_line.splitlines()) == 1
    assert json.loads(json_line)["message"] == f"{message} {arg}"


FORGED = "\n2099-01-01 00:00:00,000 WARNING triad.auth: FORGED\r2099-01-01 00:00:00,000 INFO x:\u2028FORGED\x85"
ATTACKS: list[tuple[str, dict[str, Any]]] = [
    ("tools/call of an unknown name", call(1, "echo" + FORGED, {})),
    ("tools/call of a denied name", call(2, "fail" + FORGED, {})),
    ("resources/read of a template URI", {"jsonrpc": "2.0", "id": 3, "method": "resources/read",
                                          "params": {"uri": "fixture://items/1" + FORGED}}),
    ("prompts/get of an unknown prompt", {"jsonrpc": "2.0", "id": 4, "method": "prompts/get",
                                          "params": {"name": "p" + FORGED}}),
]


@pytest.mark.anyio
async def test_an_anonymous_caller_cannot_forge_a_log_line(procs: list[Proc], tmp_path: Path) -> None:
    """Names and URIs with line breaks, from a caller without a token, on both eras: every line of the daemon's
    text log is a record of its own, and the forged text shows escaped inside the record that quotes it."""
    config = write_config(tmp_path, {"upstreams": {"fx": stdio_upstream("logtext")},
                                     "clients": {"ide": {"token": "ide-token-0123456789"}, "anon": {}},
                                     "anonymous": "anon", "policy": {"profile": {"deny": ["*fail*"]}}})
    url = start_triad(procs, config, wait_ready=1)  # the text format, at DEBUG
    proc = procs[-1]
    async with httpx2.AsyncClient() as http:
        session = await HandshakeSession(http, url).open()
        for _case, body in ATTACKS:
            response = await session.post(dumps(body))
            assert response.status_code == 200, response.text
        for _case, body in ATTACKS:
            method = body["method"]
            meta = {"io.modelcontextprotocol/protocolVersion": "2026-07-28",
                    "io.modelcontextprotocol/clientCapabilities": {}}
            modern = {**body, "params": {**body["params"], "_meta": meta}}
            response = await http.post(url, content=dumps(modern), headers=modern_headers(method))
            assert response.status_code in (200, 400), response.text
        marker = "end-of-attack"
        await session.post(dumps(call(9, marker, {})))
    await proc.until(marker)
    lines = proc.stderr.splitlines()
    assert [line for line in lines if not RECORD_LINE.match(line) or line.startswith("2099")] == []
    assert "FORGED" in proc.stderr and "\\n2099-01-01" in proc.stderr
