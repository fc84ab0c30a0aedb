"""Hostile input (issue 17, items 2, 4 and 5): oversized run-level lists, deeply nested JSON, NaN and Infinity.

Each gets a clear JSON-RPC error on every transport (streamable HTTP of both eras, legacy SSE, stdio), the
daemon keeps serving, and nothing of it reaches an upstream.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx2
import pytest

import policy.pipeline
from exposers._wire import ParseError, parse_json
from gateway.calls._dispatcher import Dispatcher
from gateway.errors import InvalidRequest
from gateway.identity import MAX_PATTERN_LENGTH, MAX_RUN_LIST_PATTERNS, run_list
from gateway.runtime._loading import parse_config
from policy import Identity, Pipeline, ToolFacts, compile_glob
from policy.patterns import MatcherSet, compile_patterns, first_matcher
from tests.conftest import Proc, start_triad, stdio_upstream, write_config
from tests.raw_clients import (
    HandshakeSession,
    answer_of,
    call,
    dumps,
    modern_call,
    modern_headers,
    modern_post,
    sse_session,
    stdio_session,
)

NESTED = b'{"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": {"name": "fx__rich", "arguments": {"a": ' \
    + b"[" * 5_000 + b"]" * 5_000 + b"}}}"  # deep, but within MAX_JSON_VALUES (which refuses before parsing)
NON_FINITE = (b"NaN", b"Infinity", b"-Infinity", b"1e999")


def rich_call(literal: bytes, ident: Any = 1) -> bytes:
    """A call of the fixture's `rich` tool (it echoes its arguments) with `literal` as an argument's value."""
    return dumps(call(ident, "fx__rich", {"x": "LITERAL"})).replace(b'"LITERAL"', literal)


def modern_rich_call(literal: bytes, ident: Any = 1) -> bytes:
    return dumps(modern_call(ident, "fx__rich", {"x": "LITERAL"})).replace(b'"LITERAL"', literal)


@pytest.fixture(scope="module")
def config(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return write_config(tmp_path_factory.mktemp("hostile"), {
        "upstreams": {"fx": stdio_upstream("hostile")}, "naming": {"prefix": "always"}})


@pytest.fixture(scope="module")
def triad(config: Path) -> Iterator[tuple[str, Proc]]:
    procs: list[Proc] = []
    url = start_triad(procs, config, wait_ready=1)
    yield url, procs[-1]
    for proc in procs:
        proc.terminate()


# -- strict JSON -----------------------------------------------------------------------------------------------


@pytest.mark.parametrize("data", [*NON_FINITE, b"[NaN]", b'{"a": -Infinity}', b"[1.5e400]", b"1" * 400 + b".5",
                                  b"[" * 5_000 + b"]" * 5_000, b'"\\ud800"', b"", b"{", b"[1] x", b"\xff"])
def test_parse_json_refuses_what_json_does_not_have(data: bytes) -> None:
    with pytest.raises(ParseError, match="Parse error"):
        parse_json(data)


@pytest.mark.parametrize("data", [b'{"a": [1, 2.5, -3e10, 1e300, "1e999", "NaN"]}', b"1" * 400, b"[" * 50 + b"]" * 50])
def test_parse_json_takes_what_json_has(data: bytes) -> None:
    assert parse_json(data) == json.loads(data)
    assert parse_json(data.decode()) == json.loads(data)


# -- item 2: run-level lists -----------------------------------------------------------------------------------


@pytest.mark.timeout(10)
def test_a_glob_with_many_stars_costs_linear_time() -> None:
    """`*a*a*...*b` against `aaaa...`: a plain `.*` per star backtracks (n choose stars) ways (hours here)."""
    glob = compile_glob("*a" * 60 + "*b")
    assert glob is not None and not glob.matches_text("a" * 240)
    assert glob.matches_text("a" * 240 + "b")


def test_run_level_lists_over_the_limits_are_refused_naming_the_limit() -> None:
    too_many = ", ".join(f"t{i}" for i in range(MAX_RUN_LIST_PATTERNS + 1))
    with pytest.raises(InvalidRequest, match=rf"X-Triad-Tools has {MAX_RUN_LIST_PATTERNS + 1} patterns; "
                                             rf"the limit is {MAX_RUN_LIST_PATTERNS}"):
        run_list(too_many, "X-Triad-Tools")
    with pytest.raises(InvalidRequest, match=rf"the limit is {MAX_PATTERN_LENGTH}"):
        run_list("x" * (MAX_PATTERN_LENGTH + 1), "?tools=")
    assert len(run_list(", ".join(f"t{i}" for i in range(MAX_RUN_LIST_PATTERNS)))) == MAX_RUN_LIST_PATTERNS


def test_a_run_level_list_is_compiled_once_for_all_tools(monkeypatch: pytest.MonkeyPatch) -> None:
    compiled: list[object] = []

    def counting(*args: Any) -> Any:
        compiled.append(args[0])
        return compile_patterns(*args)

    pipeline = Pipeline(parse_config("upstreams: {}").policy, {})
    monkeypatch.setattr(policy.pipeline, "compile_patterns", counting)
    caller = Identity("c", run_lists=(tuple(f"fx__t{i}*" for i in range(MAX_RUN_LIST_PATTERNS)),))
    decisions = [pipeline.decide(caller, ToolFacts(f"fx__t{i}", "fx", f"t{i}")) for i in range(600)]
    assert all(d.allowed for d in decisions[:MAX_RUN_LIST_PATTERNS])
    assert len(compiled) == 1


@pytest.mark.parametrize("patterns", [["*"], ["fx__*", "group:readonly"], ["gy:*", "fx__t1", "*t1*"],
                                      ["group:destructive", "fx__t2", "FX__T2"], ["a*b*c", "*"], ["fx:t*3"]])
def test_a_matcher_set_finds_the_matcher_a_scan_finds(patterns: list[str]) -> None:
    matchers = compile_patterns(patterns, {})
    found = MatcherSet(matchers)
    for tool in [ToolFacts(f"fx__t{i}", "fx", f"t{i}", read_only=i % 2 == 0, destructive=i % 2 == 1)
                 for i in range(5)] + [ToolFacts("abxbc", "gy", "abc")]:
        assert found.first(tool) is first_matcher(matchers, tool)


def test_distinct_run_lists_neither_grow_nor_flush_the_view_cache() -> None:
    from consumers import UpstreamPool

    config = parse_config("upstreams: {fx: {command: 'true'}}")
    dispatcher = Dispatcher(config, UpstreamPool(config, lambda _up: None))
    caller = Identity("local", owner=True)
    own = dispatcher.view(caller)
    for i in range(3000):
        dispatcher.live.request_view(caller, {"_meta": {"triad/tools": [f"t{i}"]}})
    assert dispatcher.view(caller) is own  # a flood of lists did not push the client's own view out
    narrowed = dispatcher.live.request_view(caller, {"_meta": {"triad/tools": ["t2999"]}})
    assert dispatcher.live.request_view(caller, {"_meta": {"triad/tools": ["t2999"]}}) is narrowed
    assert dispatcher.live.current().cached_views <= 65


@pytest.mark.anyio
async def test_oversized_run_level_lists_get_an_error_naming_the_limit(triad: tuple[str, Proc]) -> None:
    url, _ = triad
    many = [f"fx__t{i}" for i in range(MAX_RUN_LIST_PATTERNS * 4)]  # under MAX_JSON_VALUES in a body
    async with httpx2.AsyncClient(timeout=30) as http:
        session = await HandshakeSession(http, url).open()
        header = await session.post(dumps(call(1, "fx__echo", {"text": "x"})), {"X-Triad-Tools": ",".join(many)})
        assert header.status_code == 400
        assert f"X-Triad-Tools has {len(many)} patterns; the limit is {MAX_RUN_LIST_PATTERNS}" in \
            header.json()["error"]["message"]
        query = await http.post(url + "?tools=" + "x" * 300, content=dumps(call(2, "fx__echo", {})),
                                headers=session.headers)
        assert query.status_code == 400 and f"the limit is {MAX_PATTERN_LENGTH}" in query.json()["error"]["message"]
        read = {"jsonrpc": "2.0", "id": 3, "method": "resources/read",
                "params": {"uri": "fixture://static", "_meta": {"triad/tools": many}}}
        for message in (call(3, "fx__echo", {"text": "x"}, {"triad/tools": many}), read):  # direct path, SDK's
            answer = answer_of(await session.post(dumps(message)))
            assert answer["id"] == 3 and answer["error"]["code"] == -32602
            assert f"_meta['triad/tools'] has {len(many)} patterns" in answer["error"]["message"]
        modern = answer_of(await modern_post(http, url, dumps(modern_call(4, "fx__echo", {"text": "x"},
                                                                          {"triad/tools": many})),
                                             modern_headers("tools/call", "fx__echo")))
        assert f"the limit is {MAX_RUN_LIST_PATTERNS}" in modern["error"]["message"]
        narrowed = {"triad/tools": ["fx__echo", *many[:5]]}
        fine = answer_of(await session.post(dumps(call(5, "fx__echo", {"text": "ok"}, narrowed))))
        assert fine["result"]["content"][0]["text"] == "ok"


# -- items 4 and 5: nesting and non-finite numbers, on every transport -----------------------------------------


def assert_parse_error(response: httpx2.Response) -> None:
    assert response.status_code == 400, response.text
    assert response.headers["content-type"] == "application/json"
    body = response.json()
    assert body["jsonrpc"] == "2.0" and body["id"] is None and body["error"]["code"] == -32700


@pytest.mark.anyio
async def test_nested_and_non_finite_json_gets_a_parse_error_over_http(triad: tuple[str, Proc]) -> None:
    url, proc = triad
    async with httpx2.AsyncClient(timeout=30) as http:
        session = await HandshakeSession(http, url).open()
        assert_parse_error(await session.post(NESTED))  # the direct HTTP path's session: a 500 before
        assert_parse_error(await HandshakeSession(http, url).post(NESTED))  # no session yet: the SDK's path
        assert_parse_error(await modern_post(http, url, NESTED, modern_headers("tools/call", "fx__rich")))
        for literal in NON_FINITE:
            assert_parse_error(await session.post(rich_call(literal)))
            assert_parse_error(await session.post(rich_call(literal).replace(b"tools/call", b"prompts/get")))
            assert_parse_error(await modern_post(http, url, modern_rich_call(literal),
                                                 modern_headers("tools/call", "fx__rich")))
        served = answer_of(await session.post(rich_call(b"[1.5, -2e300]")))
        assert json.loads(served["result"]["content"][0]["text"]) == {"x": [1.5, -2e300]}
    assert "Traceback" not in proc.stderr


@pytest.mark.anyio
async def test_nested_and_non_finite_json_gets_a_parse_error_over_sse(triad: tuple[str, Proc]) -> None:
    url, proc = triad
    async with httpx2.AsyncClient(timeout=30) as http, sse_session(http, url) as session:
        assert_parse_error(await session.post(NESTED))
        for literal in NON_FINITE:
            assert_parse_error(await session.post(rich_call(literal)))
        for not_a_message in (b'{"jsonrpc": "2.0", "id": [1], "result": {}}', b"[]", b'"x"'):  # found by the fuzzer
            refused = await session.post(not_a_message)
            assert refused.status_code == 400 and refused.json()["error"]["code"] == -32600
        served = await session.request(call(9, "fx__rich", {"x": 1.5}))
        assert served["id"] == 9 and json.loads(served["result"]["content"][0]["text"]) == {"x": 1.5}
    assert "Traceback" not in proc.stderr


@pytest.mark.anyio
async def test_nested_and_non_finite_json_gets_a_parse_error_over_stdio(config: Path) -> None:
    async with stdio_session(config) as session:
        await session.send(NESTED)
        nested = await session.receive()
        assert nested["id"] is None and nested["error"]["code"] == -32700
        for ident, literal in enumerate(NON_FINITE, 10):
            await session.send(rich_call(literal, ident))
            answer = await session.receive()
            assert answer["id"] == ident and answer["error"]["code"] == -32700, answer
        await session.send(b"{not json")
        assert (await session.receive())["error"]["code"] == -32700
        await session.send(b"[]")
        assert (await session.receive())["error"]["code"] == -32600
        listed = await session.request({"jsonrpc": "2.0", "id": 19, "method": "tools/list"})  # upstreams settled
        assert "fx__rich" in {tool["name"] for tool in listed["result"]["tools"]}
        served = await session.request(call(20, "fx__rich", {"x": 1.5}))
        assert served["id"] == 20 and json.loads(served["result"]["content"][0]["text"]) == {"x": 1.5}


@pytest.mark.anyio
async def test_a_cancellation_naming_no_valid_request_id_is_ignored(triad: tuple[str, Proc]) -> None:
    """`notifications/cancelled` whose `requestId` is not a JSON-RPC id (a list, an object) reaches Triad's
    middleware unvalidated: it is ignored, never an exception in the notification handler (an ERROR traceback a
    client could write into the log at will), and the session goes on."""
    url, proc = triad
    async with httpx2.AsyncClient(timeout=30) as http:
        session = await HandshakeSession(http, url).open()
        for request_id in ([1], {"a": 1}):
            cancel = {"jsonrpc": "2.0", "method": "notifications/cancelled",
                      "params": {"requestId": request_id, "reason": "odd"}}
            assert (await session.post(dumps(cancel))).status_code == 202
        listed = answer_of(await session.post(dumps({"jsonrpc": "2.0", "id": 3, "method": "tools/list"})))
        assert "fx__rich" in {tool["name"] for tool in listed["result"]["tools"]}
    assert "Traceback" not in proc.stderr
