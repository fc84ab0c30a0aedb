"""Cost, not count (issue 28, item 1): every input a caller controls costs linear time in its size, under a bound.

The class: run-level lists (`_meta["triad/tools"]`, `X-Triad-Tools`, `?tools=`), argument validation against an
upstream's schema, cursors, URIs, search queries, completion values and prompt arguments. Each kind's worst inputs
are generated and sent to a real Triad in front of a real upstream; each gets a correct answer or a precise error,
and a well-behaved client's calls all complete while an attacker loop sends them.
"""

from __future__ import annotations

import json
import re
import string
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import anyio
import httpx2
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from exposers import _wire
from exposers._wire import MAX_JSON_VALUES, ParseError, parse_json
from gateway.errors import InvalidRequest
from gateway.identity import MAX_PATTERN_LENGTH, MAX_RUN_LIST_PATTERNS, MAX_RUN_LIST_WILDCARDS, bounded_run_list
from gateway.registry import MAX_QUERY_CHARS
from policy import ToolFacts, compile_glob, search_cost
from policy.patterns import MatcherSet, compile_patterns, first_matcher
from tests.conftest import Proc, start_triad, stdio_upstream, write_config
from tests.raw_clients import DEADLINE, HandshakeSession, answer_of, call, dumps

# -- the matcher: a reference, and no regex engine on caller patterns -------------------------------------------


def reference(pattern: str, name: str) -> bool:
    """fnmatch with `*` as the only wildcard, on normalised text (a backtracking regex: fine on short strings)."""
    pattern, name = pattern.strip().lower(), name.strip().lower()
    if pattern == "*":
        return True
    return re.fullmatch(".*".join(map(re.escape, pattern.split("*"))), name, re.DOTALL) is not None


PATTERNS = st.text(alphabet="ab*:_", min_size=1, max_size=10)
NAMES = st.text(alphabet="ab:_", max_size=12)


@settings(max_examples=1000, deadline=None)
@given(PATTERNS, NAMES)
def test_a_glob_agrees_with_the_reference(pattern: str, name: str) -> None:
    glob = compile_glob(pattern)
    assert glob is not None and glob.matches_text(name) is reference(pattern, name)


@settings(max_examples=500, deadline=None)
@given(st.lists(PATTERNS, max_size=8), NAMES, NAMES)
def test_a_matcher_set_finds_the_first_matcher_a_scan_finds(patterns: list[str], name: str, raw: str) -> None:
    matchers = compile_patterns(patterns, {})
    tool = ToolFacts(name, "up", raw)
    assert MatcherSet(matchers).first(tool) is first_matcher(matchers, tool)


def worst_patterns(count: int = MAX_RUN_LIST_PATTERNS, length: int = MAX_PATTERN_LENGTH) -> list[str]:
    """`a*b*c*...`, each different: the known instance (a union regex of these compiled for ~1.6 s)."""
    letters = string.ascii_lowercase
    return [("*".join(letters[(i + j) % 26] for j in range(length)))[:length] for i in range(count)]


def test_no_regex_is_compiled_for_a_run_level_list(monkeypatch: pytest.MonkeyPatch) -> None:
    """Python's `re` compiles in pure Python (seconds for a full list) and backtracks: caller patterns never reach
    it. Compiling and matching the worst list with `re` unusable still gives the scan's answers."""
    patterns = worst_patterns()
    expected = [first_matcher(compile_patterns(patterns, {}), ToolFacts(n, "u", n)) for n in ("abc", "a" * 300)]

    def refuse(*_args: Any, **_kwargs: Any) -> Any:
        raise AssertionError("a regex was compiled for a caller's patterns")

    monkeypatch.setattr(re, "compile", refuse)
    monkeypatch.setattr(re, "_compile", refuse)
    found = MatcherSet(compile_patterns(patterns, {}))
    assert [found.first(ToolFacts(n, "u", n)) for n in ("abc", "a" * 300)] == expected


@pytest.mark.parametrize(("pattern", "cost"), [
    ("fx__echo", 0), ("fx__*", 0), ("*echo", 0), ("*", 0), ("**", 0), ("group:readonly", 0), ("group:a*b*c", 0),
    ("fx:*", 0), ("a*b", 1), ("*a*", 2), ("a*b*c", 2), ("a**b", 1), ("*a*b*", 3), (worst_patterns(1)[0], 128),
])
def test_search_cost_counts_the_segment_searches_a_pattern_costs(pattern: str, cost: int) -> None:
    assert search_cost(pattern) == cost


def test_a_run_level_list_over_its_search_budget_is_refused_naming_the_bound() -> None:
    with pytest.raises(InvalidRequest, match=rf"X-Triad-Tools has \d+ stars .* the limit is {MAX_RUN_LIST_WILDCARDS}"):
        bounded_run_list(worst_patterns(), "X-Triad-Tools")
    at_budget = ["*a*"] * (MAX_RUN_LIST_WILDCARDS // 2)
    assert bounded_run_list(at_budget, "x") == tuple(at_budget)
    with pytest.raises(InvalidRequest, match="stars"):
        bounded_run_list([*at_budget, "a*b"], "x")
    # exact names, prefixes and suffixes are dict lookups: a full list of them is in budget
    cheap = [f"{'p' * 200}{i}*" if i % 2 else f"*{i}{'s' * 200}" for i in range(MAX_RUN_LIST_PATTERNS)]
    assert len(bounded_run_list(cheap, "x")) == MAX_RUN_LIST_PATTERNS


# -- end to end: the worst input of each kind, and a victim's calls beside an attacker --------------------------


@pytest.fixture(scope="module")
def triad(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    config = write_config(tmp_path_factory.mktemp("cost"), {
        "upstreams": {"fx": stdio_upstream("cost", "--redos-tool", "--extra-tools", "200")},
        "naming": {"prefix": "always"}, "hooks": ["validate_arguments"]})
    procs: list[Proc] = []
    url = start_triad(procs, config, wait_ready=1)
    yield url
    for proc in procs:
        proc.terminate()


def budget_list() -> list[str]:
    """A run-level list as costly as the bounds let it be: every search it may make, and 512 long patterns."""
    inner = [f"*{c}*x" for c in "fx_extra"][: MAX_RUN_LIST_WILDCARDS // 2]
    return [*inner, *(f"fx__{'e' * 240}{i}*" for i in range(MAX_RUN_LIST_PATTERNS - len(inner) - 1)), "fx__echo"]


def values(count: int) -> list[Any]:
    """`count` JSON values and keys (plus the list holding them) as small objects, the costliest per byte: the
    outside attack's 100,000 `{"a": [k, {"b": k}]}` (5 values and 2 keys each) cost seconds of garbage collection."""
    return [{"a": [k, {"b": k}]} for k in range(count // 7)]


BIG_BODY_METHODS: list[tuple[str, Any]] = [
    ("ping _meta", lambda body: {"jsonrpc": "2.0", "id": 1, "method": "ping", "params": {"_meta": {"x": body}}}),
    ("notification", lambda body: {"jsonrpc": "2.0", "method": "notifications/progress",
                                   "params": {"progressToken": 1, "progress": 1, "_meta": {"x": body}}}),
    ("tools/list _meta", lambda body: {"jsonrpc": "2.0", "id": 1, "method": "tools/list",
                                       "params": {"_meta": {"x": body}}}),
    ("tools/call arguments", lambda body: call(1, "fx__echo", {"text": "hi", "x": body})),
    ("tools/call unknown tool", lambda body: call(1, "fx__nope", {"x": body})),
    ("prompts/get arguments", lambda body: {"jsonrpc": "2.0", "id": 1, "method": "prompts/get",
                                            "params": {"name": "fx__greet", "arguments": {"who": "a"},
                                                       "_meta": {"x": body}}}),
    ("initialize capabilities", lambda body: {
        "jsonrpc": "2.0", "id": 1, "method": "initialize",
        "params": {"protocolVersion": "2025-11-25", "capabilities": {"experimental": {"x": {"y": body}}},
                   "clientInfo": {"name": "big", "version": "1"}}}),
]


def big_bodies() -> list[tuple[str, dict[str, Any], str | None]]:
    """Every method with a body of small objects just under and just over `MAX_JSON_VALUES`."""
    return [row for kind, make in BIG_BODY_METHODS for row in (
        (f"{kind}, values under budget", make(values(MAX_JSON_VALUES - 100)), None),
        (f"{kind}, values over budget", make(values(MAX_JSON_VALUES + 5)), "MAX_JSON_VALUES"))]


def worst_inputs() -> list[tuple[str, dict[str, Any], str | None]]:
    """(kind, request, the error it must get, or None for a result), one row per kind of caller input."""
    echo = {"text": "hi"}
    return [*big_bodies(),
        ("run list over budget", call(1, "fx__echo", echo, {"triad/tools": worst_patterns()}), "the limit is"),
        ("run list at budget", call(1, "fx__echo", echo, {"triad/tools": budget_list()}), None),
        ("run list, no match", call(1, "fx__echo", echo, {"triad/tools": budget_list()[:-1]}), "Unknown tool"),
        ("schema pattern", call(1, "fx__redos", {"s": "a" * 5000 + "!"}), "does not match"),
        ("schema patternProperties", call(1, "fx__redos", {"b" * 5000 + "!": "x", "s": "aa"}), None),
        ("schema look-ahead", call(1, "fx__lookaround", {"s": "xxx"}), "cannot be checked in linear time"),
        ("cursor", {"jsonrpc": "2.0", "id": 1, "method": "tools/list", "params": {"cursor": "A" * 500_000}},
         "invalid cursor"),
        ("cursor of digits", {"jsonrpc": "2.0", "id": 1, "method": "tools/list",
                              "params": {"cursor": "djE6MTo" + "5" * 100_000}}, "invalid cursor"),
        ("uri", {"jsonrpc": "2.0", "id": 1, "method": "resources/read",
                 "params": {"uri": "fixture://items/" + "{" * 100_000}}, None),
        ("prompt arguments", {"jsonrpc": "2.0", "id": 1, "method": "prompts/get",
                              "params": {"name": "fx__greet", "arguments": {f"k{i}": "v" * 50 for i in range(5000)}}},
         None),
        ("completion value", {"jsonrpc": "2.0", "id": 1, "method": "completion/complete",
                              "params": {"ref": {"type": "ref/prompt", "name": "fx__greet"},
                                         "argument": {"name": "who", "value": "w" * 200_000}}}, None),
    ]


Sent = tuple[str, dict[str, Any], str | None, dict[str, str], str]
"""(kind, request, the error it must get or None, extra headers, query string)."""


def worst_sends() -> list[Sent]:
    """`worst_inputs`, and the kinds a caller sends beside the body: run-level lists in `X-Triad-Tools` and
    `?tools=` (httpx takes a URL of 64 KiB: a shorter list of the same patterns), a search query of distinct
    tokens, and bodies near the byte bound (one string; strings of 199 digits, which a backtracking scan for
    huge numbers tried again at every digit)."""
    echo = call(1, "fx__echo", {"text": "hi"})
    words = " ".join(f"w{i}" for i in range(MAX_QUERY_CHARS))[: MAX_QUERY_CHARS - 1]
    query_list = [*budget_list()[: MAX_RUN_LIST_WILDCARDS // 2 + 200], "fx__echo"]
    return [*((kind, request, error, {}, "") for kind, request, error in worst_inputs()),
            ("X-Triad-Tools at budget", echo, None, {"X-Triad-Tools": ",".join(budget_list())}, ""),
            ("X-Triad-Tools over budget", echo, "the limit is", {"X-Triad-Tools": ",".join(worst_patterns())}, ""),
            ("?tools= at budget", echo, None, {}, "?tools=" + ",".join(query_list)),
            ("?tools= over budget", echo, "the limit is", {}, "?tools=" + ",".join(worst_patterns()[:200])),
            ("search query", call(1, "search_tools", {"query": words}), None, {}, ""),
            ("body: one string", call(1, "fx__echo", {"text": "hi", "x": "a" * (4 * 2**20 - 300)}), None, {}, ""),
            ("body: 199-digit runs", call(1, "fx__echo", {"text": "hi", "x": ["1" * 199] * 9_000}), None, {}, "")]


async def answer(session: HandshakeSession, request: dict[str, Any]) -> dict[str, Any]:
    return answer_of(await session.post(dumps(request)))


async def send(session: HandshakeSession, row: Sent) -> httpx2.Response:
    _kind, request, _error, headers, query = row
    if query:
        return await session.http.post(session.url + query, content=dumps(request),
                                       headers={**session.headers, **headers})
    return await session.post(dumps(request), headers)


@pytest.mark.anyio
@pytest.mark.parametrize("row", worst_sends(), ids=lambda row: row[0])
async def test_the_worst_input_of_each_kind_is_answered(triad: str, row: Sent) -> None:
    _kind, request, error, _headers, _query = row
    async with httpx2.AsyncClient(timeout=DEADLINE) as http:
        session = await HandshakeSession(http, triad).open()
        response = await send(session, row)
        if "id" not in request and response.status_code == 202:  # a notification taken: nothing to answer
            assert error is None
            found: dict[str, Any] = {"result": {}}
        else:
            found = answer_of(response)
        text = str(found.get("error") or found.get("result"))
        if error is None:
            assert "result" in found or found["error"]["code"] != -32603, found  # answered, and not a crash
        else:
            assert error in text, text
        assert (await answer(session, call(2, "fx__echo", {"text": "still"})))["result"]["content"][0]["text"] \
            == "still"


@pytest.mark.anyio
async def test_a_search_with_every_token_distinct_is_answered(triad: str) -> None:
    words = iter(f"w{i}" for i in range(MAX_QUERY_CHARS))
    query = ""
    while len(query) < MAX_QUERY_CHARS - 8:
        query += next(words) + " "
    async with httpx2.AsyncClient(timeout=DEADLINE) as http:
        session = await HandshakeSession(http, triad).open()
        found = await answer(session, call(1, "search_tools", {"query": query}))
        assert "result" in found or "Unknown tool" in str(found)  # core tools are listed only in search mode


@pytest.mark.anyio
async def test_a_victims_calls_complete_while_an_attacker_sends_the_worst_inputs(triad: str) -> None:
    victim_calls, done = 30, []
    attacks = worst_sends()

    async def attacker(http: httpx2.AsyncClient, stop: anyio.Event) -> None:
        session = await HandshakeSession(http, triad).open()
        while not stop.is_set():
            for row in attacks:
                await send(session, row)

    async with httpx2.AsyncClient(timeout=DEADLINE) as http:
        stop = anyio.Event()
        async with anyio.create_task_group() as tg:
            tg.start_soon(attacker, http, stop)
            tg.start_soon(attacker, http, stop)
            victim = await HandshakeSession(http, triad).open()
            for i in range(victim_calls):
                found = await answer(victim, call(i, "fx__echo", {"text": f"v{i}"}))
                done.append(found["result"]["content"][0]["text"])
            stop.set()
    assert done == [f"v{i}" for i in range(victim_calls)]


JSON_VALUES = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(alphabet=',:[]{}"\\ab', max_size=6),
    lambda inner: st.lists(inner, max_size=5) | st.dictionaries(st.text(alphabet=",:[a", max_size=3), inner,
                                                                 max_size=5), max_leaves=40)


def count_values(value: Any) -> int:
    """Values and keys: a member is its key and its value."""
    if isinstance(value, dict):
        return 1 + sum(1 + count_values(item) for item in value.values())
    if isinstance(value, list):
        return 1 + sum(map(count_values, value))
    return 1


@settings(max_examples=500, deadline=None)
@given(JSON_VALUES, st.integers(min_value=1, max_value=60))
def test_a_body_is_refused_exactly_when_it_has_more_values_than_the_budget(value: Any, budget: int) -> None:
    """Whatever the shape (strings full of commas and brackets included), the budget counts JSON values and keys, and
    naming it is the refusal's message."""
    original, _wire.MAX_JSON_VALUES = _wire.MAX_JSON_VALUES, budget
    try:
        text = json.dumps(value)
        if count_values(value) > budget:
            with pytest.raises(ParseError, match="MAX_JSON_VALUES") as refused:
                parse_json(text.encode())
            assert refused.value.code == -32600
        else:
            assert parse_json(text.encode()) == json.loads(text)
    finally:
        _wire.MAX_JSON_VALUES = original


ROOT = Path(__file__).resolve().parent.parent
BOUND = re.compile(r"^_?(MAX_[A-Z0-9_]+)\s*(?::[^=]+)?=", re.MULTILINE)


@settings(max_examples=500, deadline=None)
@given(JSON_VALUES, st.integers(min_value=0, max_value=400), st.booleans())
def test_a_prefix_of_a_body_never_counts_more_than_one_past_the_whole(value: Any, cut: int, indent: bool) -> None:
    """A body over the budget is refused on a count of its first bytes: a prefix, cut anywhere (in a string, an
    escape, between brackets), never holds more than the whole's values and keys but for one cut container."""
    text = json.dumps(value, indent=1 if indent else None).encode()
    assert _wire.count_values(text[:cut]) <= _wire.count_values(text) + 1


def test_every_bound_in_the_code_is_in_the_readme() -> None:
    """Every `MAX_*` constant of the four packages is named in the README's security section (with its default),
    so a bound added later without a line there fails here."""
    section = (ROOT / "README.md").read_text().split("## Security: bounds and quotas", 1)[1].split("\n## ", 1)[0]
    found = {match for package in ("gateway", "exposers", "policy", "consumers")
             for path in (ROOT / package).rglob("*.py") for match in BOUND.findall(path.read_text())}
    assert {"MAX_JSON_VALUES", "MAX_RUN_LIST_WORK", "MAX_REQUEST_BODY"} <= found
    assert sorted(name for name in found if re.search(rf"\b{name}\b", section) is None) == []


class _NoParse:
    @staticmethod
    def from_json(*_args: Any, **_kwargs: Any) -> Any:
        raise AssertionError("an over-budget body was parsed")


@settings(max_examples=300, deadline=None)
@given(JSON_VALUES, st.integers(min_value=1, max_value=60))
def test_a_body_over_the_budget_is_refused_before_it_is_parsed(value: Any, budget: int) -> None:
    """The cost class of point 1's bodies: a refused body cost a whole parse (260 ms for 500,000 values, more than
    one under the budget); its values are now counted in C over the bytes, strings full of commas, brackets,
    quotes and backslashes included, and the parser never sees it."""
    if count_values(value) <= budget:
        return
    original, parser = _wire.MAX_JSON_VALUES, _wire.pydantic_core
    _wire.MAX_JSON_VALUES, _wire.pydantic_core = budget, _NoParse  # type: ignore[assignment]
    try:
        with pytest.raises(ParseError, match="MAX_JSON_VALUES"):
            parse_json(json.dumps(value, indent=1 if budget % 2 else None).encode())
    finally:
        _wire.MAX_JSON_VALUES, _wire.pydantic_core = original, parser
