"""Any JSON value an upstream sends reaches a client on every exposer as a direct connection gets it, or as the
documented substitute (README, "JSON values"; `consumers._json`), and never ends a session or the process.

Differential: hypothesis generates JSON *texts* (fixed seed, bounded count): strings with lone surrogates and every
control character, escaped or not; numbers as literals (`1e400`, `-0`, `1E+2`, 5000-digit integers, floats of
every magnitude); arrays and objects nested within the bounds, with unknown keys and `_meta`. The raw upstream
(`tests/servers/raw_upstream.py`, `echo_<tag>`) answers a call with the text spliced in byte for byte, on each
upstream transport (stdio, streamable HTTP, SSE); a client reads the answer directly and through Triad on each
exposer (`triad stdio`, legacy SSE, streamable HTTP in the handshake era and in 2026-07-28). Triad's answer must be
strict JSON (UTF-8, no `NaN`/`Infinity`), and equal to the direct answer, types made explicit, once the direct
answer's out-of-range numbers are replaced by the substitute (`null`).
"""

from __future__ import annotations

import itertools
import json
import re
from collections.abc import AsyncIterator, Iterator
from contextlib import AsyncExitStack, asynccontextmanager
from pathlib import Path
from typing import Any

import anyio
import httpx2
import pytest
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st

from tests import raw_peers
from tests.conftest import PYTHON, ROOT, TRIAD, Proc, marker, start_triad, write_config
from tests.raw_clients import DEADLINE, JSON_HEADERS, initialize, modern_call, modern_headers
from tests.raw_peers import INITIALIZED, diff, typed

pytestmark = pytest.mark.anyio

RAW = ROOT / "tests" / "servers" / "raw_upstream.py"
TAGS = {"stdio": "o", "http": "h", "sse": "s"}
EXAMPLES = 80
"""Generated values, all sent in each request (one JSON array): a request per (upstream, exposer) pair."""
MAX_INT_DIGITS = 4300
_ids = itertools.count(1)


class LongInt(str):
    """An integer literal longer than Python converts (`sys.get_int_max_str_digits`), kept as its digits."""


def strict(data: bytes) -> Any:
    """The JSON value of `data`, which must be strict JSON: UTF-8, no `NaN` or `Infinity`."""
    def refuse(literal: str) -> Any:
        raise AssertionError(f"not JSON: {literal}")

    return json.loads(data.decode("utf-8"), parse_constant=refuse,
                      parse_int=lambda s: int(s) if len(s.lstrip("-")) <= MAX_INT_DIGITS else LongInt(s))


def answers(data: bytes, message: dict[str, Any]) -> bool:
    """Whether `data` is the response to `message` (read leniently: only its id and method matter here)."""
    found = json.loads(data.decode("utf-8", "surrogatepass"), parse_int=lambda s: int(s) if len(s) < 20 else 0)
    return isinstance(found, dict) and found.get("id") == message.get("id") and "method" not in found


def substituted(value: Any) -> Any:
    """What Triad delivers for `value` read from a direct answer: numbers beyond a double, and integers beyond
    Python's conversion limit, as `None`."""
    if isinstance(value, LongInt) or (isinstance(value, float) and value in (float("inf"), float("-inf"))):
        return None
    if isinstance(value, dict):
        return {key: substituted(item) for key, item in value.items()}
    if isinstance(value, list):
        return [substituted(item) for item in value]
    return value


# -- generated JSON texts -----------------------------------------------------------------------------------------

_CHARACTERS = st.one_of(st.characters(min_codepoint=0, max_codepoint=0x1F),
                        st.characters(categories=["Cs"]),  # lone surrogates (and pairs, when two meet)
                        st.characters(), st.sampled_from("\"\\/\u2028\u2029\ufeff\U0001F600"))
_SURROGATE = re.compile("[\ud800-\udfff]")


@st.composite
def _string(draw: st.DrawFn) -> str:
    text = draw(st.text(_CHARACTERS, max_size=12))
    if draw(st.booleans()):
        return json.dumps(text)  # every non-ASCII character escaped
    # raw UTF-8 where it can be; a surrogate can only be an escape
    return _SURROGATE.sub(lambda m: f"\\u{ord(m.group()):04X}", json.dumps(text, ensure_ascii=False))


_NUMBER_LITERALS = ["1e400", "-1e400", "1E+400", "1e-400", "-1e-400", "-0", "-0.0", "0e0", "1E+2", "1.5e-7",
                    "9" * 5000, "-" + "1" * 5000, "9" * 400, "1" + "0" * 308, "2.2250738585072014e-308",
                    "1.7976931348623157e308", "1.7976931348623159e308", "5e-324", "12345678901234567890123"]
_NUMBER = st.one_of(st.sampled_from(_NUMBER_LITERALS), st.integers().map(str),
                    st.floats(allow_nan=False, allow_infinity=False).map(repr),
                    st.integers(-(10**30), 10**30).map(lambda n: f"{n}e{n % 700 - 350}"))
_LEAF = st.one_of(_string(), _NUMBER, st.sampled_from(["true", "false", "null"]))
_KEY = st.one_of(_string(), st.sampled_from(['"_meta"', '"x-unknown"', '"io.modelcontextprotocol/x"', '""']))


def _container(children: st.SearchStrategy[str]) -> st.SearchStrategy[str]:
    arrays = st.lists(children, max_size=5).map(lambda items: "[" + ",".join(items) + "]")
    objects = st.lists(st.tuples(_KEY, children), max_size=5).map(
        lambda pairs: "{" + ",".join(f"{k}:{v}" for k, v in pairs) + "}")
    return st.one_of(arrays, objects)


_VALUE = st.recursive(_LEAF, _container, max_leaves=12)


def generated(count: int) -> list[str]:
    """`count` JSON texts, the same on every run (derandomized: a fixed seed)."""
    found: list[str] = []

    @settings(max_examples=count, derandomize=True, database=None, phases=[Phase.generate],
              suppress_health_check=list(HealthCheck), deadline=None)
    @given(_VALUE)
    def collect(text: str) -> None:
        found.append(text)

    collect()
    deep = "1"
    for depth in range(100):  # nesting well within the bounds (pydantic's and the SDK's: about 200 levels)
        deep = f'{{"_meta":{deep}}}' if depth % 2 else f"[{deep}]"
    return [*found[:count], deep, '"\\ud800"', '"\\udc00\\ud800"', "1e400", "-1e400", "9" * 5000]


VALUES = generated(EXAMPLES)
PAYLOAD = ("[" + ",".join(VALUES) + "]").encode()


def echo_call(tag: str) -> dict[str, Any]:
    return {"jsonrpc": "2.0", "id": next(_ids), "method": "tools/call",
            "params": {"name": f"echo_{tag}", "arguments": {"hex": PAYLOAD.hex()}}}


# -- peers that return the answer's bytes -------------------------------------------------------------------------


def _sse_data(body: bytes) -> list[bytes]:
    return [line[5:].strip() for line in body.split(b"\n") if line.startswith(b"data:") and line[5:].strip()]


class Stdio:
    """A stdio peer (`tests.raw_peers`) that returns the answer's line as it came."""

    def __init__(self, peer: raw_peers.StdioPeer) -> None:
        self._peer = peer

    async def exchange(self, message: dict[str, Any]) -> bytes:
        await self._peer.send(message)
        while not answers(line := await self._peer.lines(), message):
            pass
        return line


@asynccontextmanager
async def stdio_peer(command: list[str]) -> AsyncIterator[Stdio]:
    async with raw_peers.stdio_peer(command) as peer:
        yield Stdio(peer)


class Http:
    def __init__(self, http: httpx2.AsyncClient, url: str, headers: dict[str, str]) -> None:
        self.http, self.url, self.headers = http, url, headers

    async def exchange(self, message: dict[str, Any]) -> bytes:
        with anyio.fail_after(DEADLINE):
            response = await self.http.post(self.url, content=json.dumps(message).encode(), headers=self.headers)
        assert response.status_code == 200, response.text
        if response.headers.get("content-type", "").startswith("text/event-stream"):
            return _sse_data(response.content)[-1]
        return response.content


@asynccontextmanager
async def http_peer(url: str) -> AsyncIterator[Http]:
    async with httpx2.AsyncClient(timeout=DEADLINE) as http:
        peer = Http(http, url, dict(JSON_HEADERS))
        response = await http.post(url, content=json.dumps(initialize()).encode(), headers=JSON_HEADERS)
        assert response.status_code == 200, response.text
        peer.headers |= {"Mcp-Session-Id": response.headers["mcp-session-id"],
                         "MCP-Protocol-Version": strict(_answer(response))["result"]["protocolVersion"]}
        await http.post(url, content=json.dumps(INITIALIZED).encode(), headers=peer.headers)
        yield peer


def _answer(response: httpx2.Response) -> bytes:
    if response.headers.get("content-type", "").startswith("text/event-stream"):
        return _sse_data(response.content)[-1]
    return response.content


class Modern:
    """Stateless 2026-07-28 requests (no session)."""

    def __init__(self, http: httpx2.AsyncClient, url: str) -> None:
        self.http, self.url = http, url

    async def exchange(self, message: dict[str, Any]) -> bytes:
        params = message["params"]
        body = modern_call(message["id"], params["name"], params["arguments"])
        with anyio.fail_after(DEADLINE):
            response = await self.http.post(self.url, content=json.dumps(body).encode(),
                                            headers=modern_headers("tools/call", params["name"]))
        assert response.status_code == 200, response.text
        return _answer(response)


class Sse:
    def __init__(self, http: httpx2.AsyncClient, base: str, stream: httpx2.Response) -> None:
        self.http, self.base, self._lines = http, base, stream.aiter_raw()
        self._buffer = b""
        self.endpoint = ""

    async def _data(self) -> bytes:
        with anyio.fail_after(DEADLINE):
            while True:
                while b"\n" in self._buffer:
                    line, self._buffer = self._buffer.split(b"\n", 1)
                    if line.startswith(b"data:") and line[5:].strip():
                        return line[5:].strip()
                try:
                    self._buffer += await anext(self._lines)
                except StopAsyncIteration:
                    raise AssertionError("the SSE stream ended") from None

    async def exchange(self, message: dict[str, Any]) -> bytes:
        with anyio.fail_after(DEADLINE):
            response = await self.http.post(self.base + self.endpoint, content=json.dumps(message).encode(),
                                            headers={"Content-Type": "application/json"})
        assert response.status_code == 202, response.text
        while not answers(data := await self._data(), message):
            pass
        return data


@asynccontextmanager
async def sse_peer(sse_url: str) -> AsyncIterator[Sse]:
    base = sse_url.removesuffix("/sse")
    async with httpx2.AsyncClient(timeout=DEADLINE) as http, \
            http.stream("GET", sse_url, headers={"Accept": "text/event-stream"}) as stream:
        peer = Sse(http, base, stream)
        peer.endpoint = (await peer._data()).decode()
        await peer.exchange(initialize(next(_ids)))
        response = await http.post(base + peer.endpoint, content=json.dumps(INITIALIZED).encode(),
                                   headers={"Content-Type": "application/json"})
        assert response.status_code == 202
        yield peer


# -- the daemon and its upstreams, once for the module ------------------------------------------------------------


def stdio_command() -> list[str]:
    return [PYTHON, str(RAW), "--name", marker("json-stdio"), "--tag", TAGS["stdio"]]


@pytest.fixture(scope="module")
def gateway(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[dict[str, str], Path, str]]:
    started: list[Proc] = []
    try:
        urls = {}
        for transport in ("http", "sse"):
            proc = Proc([PYTHON, str(RAW), "--transport", transport, "--name", marker(f"json-{transport}"),
                         "--tag", TAGS[transport]])
            started.append(proc)
            port = proc.wait_for(r"READY (\d+)").group(1)
            urls[transport] = f"http://127.0.0.1:{port}/{'mcp' if transport == 'http' else 'sse'}"
        config = write_config(tmp_path_factory.mktemp("json"), {
            "upstreams": {"o": {"command": PYTHON, "args": stdio_command()[1:]}, "h": {"url": urls["http"]},
                          "s": {"url": urls["sse"], "transport": "sse"}},
            "naming": {"prefix": "never"}})
        yield urls, config, start_triad(started, config, wait_ready=3)
    finally:
        for proc in reversed(started):
            proc.terminate()


@asynccontextmanager
async def exposer(kind: str, config: Path, url: str) -> AsyncIterator[Any]:
    if kind == "stdio":
        async with stdio_peer([*TRIAD, "stdio", "-c", str(config)]) as peer:
            yield peer
    elif kind == "sse":
        async with sse_peer(url.removesuffix("/mcp") + "/sse") as sse:
            yield sse
    elif kind == "http":
        async with http_peer(url) as http:
            yield http
    else:
        async with httpx2.AsyncClient(timeout=DEADLINE) as client:
            yield Modern(client, url)


def differences(direct: bytes, through: bytes) -> list[str]:
    want = substituted(strict(direct))["result"]
    got = strict(through)
    if "result" not in got:
        return [f"Triad answered {got}"]
    got = got["result"]
    found = []
    reserved = {k: v for k, v in want["_meta"].items() if k != "example.com/raw"}
    if diff(reserved, {k: got.get("_meta", {}).get(k, "<absent>") for k in reserved}):
        found.append(f"_meta: {str(got.get('_meta'))[:200]} (want its keys {sorted(reserved)})")
    for where, want_values, got_values in [
            ("structuredContent", want["structuredContent"]["value"], got["structuredContent"]["value"]),
            ("_meta", want["_meta"]["example.com/raw"], got.get("_meta", {}).get("example.com/raw")),
            ("content[0]", want["content"][0]["x-raw"], got["content"][0].get("x-raw")),
            ("x-raw", want["x-raw"], got.get("x-raw"))]:
        if not isinstance(got_values, list) or len(got_values) != len(want_values):
            found.append(f"{where}: {str(got_values)[:200]}")
            continue
        found += [f"{where}[{i}] {VALUES[i][:120]}: got {str(g)[:120]}, want {str(w)[:120]}"
                  for i, (w, g) in enumerate(zip(want_values, got_values, strict=True)) if typed(w) != typed(g)]
    return found


@pytest.mark.parametrize("kind", ["stdio", "sse", "http", "modern"])
async def test_any_json_value_of_an_upstream_reaches_a_client_as_sent_or_as_its_substitute(
        gateway: tuple[dict[str, str], Path, str], kind: str) -> None:
    urls, config, url = gateway
    found: list[str] = []
    async with AsyncExitStack() as stack:
        direct = {"stdio": await stack.enter_async_context(stdio_peer(stdio_command())),
                  "http": await stack.enter_async_context(http_peer(urls["http"])),
                  "sse": await stack.enter_async_context(sse_peer(urls["sse"]))}
        through = await stack.enter_async_context(exposer(kind, config, url))
        for transport, peer in direct.items():
            tag = TAGS[transport]
            found += [f"{transport} upstream: {line}" for line in
                      differences(await peer.exchange(echo_call(tag)), await through.exchange(echo_call(tag)))]
        # the session (and `triad stdio`'s process) goes on: the next request is answered
        listed = strict(await through.exchange({"jsonrpc": "2.0", "id": next(_ids), "method": "tools/call",
                                                "params": {"name": "echo_o", "arguments": {"hex": b"1".hex()}}}))
        assert listed["result"]["structuredContent"] == {"value": 1}, listed
    assert not found, f"{len(found)} differences:\n" + "\n".join(found[:40])


@settings(max_examples=200, deadline=None, derandomize=True, database=None)
@given(point=st.integers(0xD800, 0xDFFF), form=st.sampled_from(["alone", "then text", "then a non-pair escape"]),
       before=st.text(alphabet="ab \u00e9\U0001f600", max_size=5))
def test_a_clients_lone_surrogate_is_a_parse_error_that_says_so(point: int, form: str, before: str) -> None:
    """Found by an outside attack: `"\\ud800"` from a client got "unexpected end of hex escape". Every lone
    surrogate, wherever it stands, is named; a pair is one character."""
    from exposers._wire import ParseError, parse_json

    escape = f"\\u{point:04x}"
    tail = {"alone": "", "then text": "x", "then a non-pair escape": "\\u0041"}[form]
    text = json.dumps({"k": before})[:-2] + escape + tail + '"}'
    paired = point < 0xDC00 and form == "alone"  # give a leading one its pair: then it parses
    with pytest.raises(ParseError, match="lone surrogate escape"):
        parse_json(text)
    if paired:
        assert parse_json(text[:-2] + "\\udc00" + '"}') == {"k": before + chr(0x10000 + (point - 0xD800) * 0x400)}
