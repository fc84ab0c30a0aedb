"""JSON nested deeper than Python recurses, wherever Triad reads text it did not write (a client's line, an
upstream's message, a file, Redis): a clear error, never a `RecursionError` (one stdio line nested 100,000 deep
ended `triad stdio`, found by CI's fuzzer).

The class is "a parse of foreign text that is not the bounded codec": every such parse goes through
`consumers.loads` (or `exposers._wire.parse_json` for a client's message), which this file drives over a table
of depths and shapes, and a scan of the source finds any `json.loads` left beside them. The running daemon gets
the same table on stdio, in every place of a message.
"""

from __future__ import annotations

import json
import queue
import re
import subprocess
import threading
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import TRIAD, write_config
from tests.raw_clients import HANDSHAKE, dumps, initialize

ROOT = Path(__file__).resolve().parent.parent
PACKAGES = ("consumers", "exposers", "gateway", "policy")
CODEC = ROOT / "consumers" / "_json.py"
DEPTHS = (990, 1_500, 20_000, 90_000)
"""Around the interpreter's recursion limit (1,000) and far past it, all under `MAX_JSON_VALUES` values."""
SHAPES = {"arrays": (b"[", b"]"), "objects": (b'{"a":', b"}"), "mixed": (b'[{"a":', b"}]")}


def nested(depth: int, shape: str, closed: bool = True) -> bytes:
    opener, closer = SHAPES[shape]
    inner = b"0" if opener.endswith(b":") else b""
    reps = depth // (2 if shape == "mixed" else 1)
    return opener * reps + inner + (closer * reps if closed else b"")


def test_no_foreign_text_is_parsed_outside_the_codec() -> None:
    """`json.loads`/`json.load` recurse without bound; only the codec may call them."""
    found = [f"{path.relative_to(ROOT)}:{number}" for package in PACKAGES for path in (ROOT / package).rglob("*.py")
             if path != CODEC
             for number, line in enumerate(path.read_text().splitlines(), 1)
             if re.search(r"\bjson\.loads?\(", line.split("#")[0])]
    assert found == []


@pytest.mark.parametrize("closed", [True, False], ids=["closed", "cut short"])
@pytest.mark.parametrize("shape", SHAPES)
@pytest.mark.parametrize("depth", DEPTHS)
def test_every_parse_of_foreign_text_refuses_deep_nesting_as_bad_json(depth: int, shape: str, closed: bool) -> None:
    from consumers import loads
    from consumers._json import parse_message
    from exposers._wire import ParseError, parse_json, screen_line
    from gateway.cli._jsonc import loads_jsonc

    text = nested(depth, shape, closed)
    message = b'{"jsonrpc": "2.0", "id": 1, "result": ' + text + b"}"
    for parse in (loads, lambda t: loads(t.decode()), lambda t: loads_jsonc(t.decode())):
        with pytest.raises(ValueError):
            parse(text)
    with pytest.raises(ValueError):  # a `ValidationError` or a `JSONDecodeError`, both ValueErrors
        parse_message(message)
    with pytest.raises(ParseError):
        parse_json(text)
    for ident in (b'"x"', b"1.5", b"[" + text + b"]"):  # an odd id makes the line parsed twice
        line = b'{"jsonrpc": "2.0", "id": ' + ident + b', "method": "ping", "params": {"a": ' + text + b"}}"
        assert screen_line(line.decode()).startswith("{")


def test_a_depth_python_can_hold_still_parses() -> None:
    from consumers import loads

    assert loads(nested(500, "arrays")) == json.loads(nested(500, "arrays"))


def test_triad_stdio_answers_every_deeply_nested_line_and_lives(tmp_path: Path) -> None:
    config = write_config(tmp_path, {"upstreams": {}})
    process = subprocess.Popen([*TRIAD, "stdio", "-c", str(config)], stdin=subprocess.PIPE,
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    assert process.stdin is not None and process.stdout is not None and process.stderr is not None
    lines: queue.Queue[bytes] = queue.Queue()
    stdout, stderr = process.stdout, process.stderr
    errors: list[bytes] = []
    threading.Thread(target=lambda: [lines.put(line) for line in stdout], daemon=True).start()
    threading.Thread(target=lambda: errors.extend(stderr), daemon=True).start()

    def send(data: bytes) -> None:
        assert process.stdin is not None
        try:
            process.stdin.write(data + b"\n")
            process.stdin.flush()
        except BrokenPipeError:
            raise AssertionError(f"triad stdio exited on {data[:120]!r}: {b''.join(errors)[-2000:]!r}") from None

    def answer(ident: Any) -> dict[str, Any]:
        while True:
            message = json.loads(lines.get(timeout=20))
            if message.get("id") == ident and "method" not in message:
                return message

    try:
        send(dumps(initialize("init")))
        assert answer("init")["result"]["protocolVersion"] == HANDSHAKE
        send(dumps({"jsonrpc": "2.0", "method": "notifications/initialized"}))
        pings = 0
        for depth in DEPTHS:
            for shape in SHAPES:
                text = nested(depth, shape)
                for place in (b'{"jsonrpc": "2.0", "id": [' + text + b'], "method": "ping"}',
                              b'{"jsonrpc": "2.0", "id": 1.5, "method": "ping", "params": {"a": ' + text + b"}}",
                              b'{"jsonrpc": "2.0", "id": "r", "method": "tools/call", "params": ' + text + b"}",
                              b'{"jsonrpc": "2.0", "method": "notifications/x", "params": {"a": ' + text + b"}}",
                              b'{"jsonrpc": "2.0", "id": "gone", "result": ' + text + b"}"):
                    send(place)
                    pings += 1
                    send(dumps({"jsonrpc": "2.0", "id": f"ping-{pings}", "method": "ping"}))
                    assert answer(f"ping-{pings}")["result"] == {}
    finally:
        process.stdin.close()
        try:
            process.wait(15)
        except subprocess.TimeoutExpired:
            process.kill()
    assert process.returncode == 0
    assert b"Traceback" not in b"".join(errors)
