"""Issue 28, points 7-9: guessing is throttled, the Authorization header is parsed strictly, and a loopback
listener lets in only the Host and Origin forms a browser on this machine sends.

One `triad serve` with tokens and the console; every surface that authenticates is driven over real HTTP. Its
config trusts `X-Forwarded-For` from loopback (`listen.trusted_proxies`, as behind a reverse proxy on this host), so
a test picks its source address with that header: each case comes from a source of its own.
"""

from __future__ import annotations

import logging
import re
import socket
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import httpx2
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from exposers._throttle import FREE_FAILURES, MAX_KEYS, AuthThrottle
from gateway.observe import LogSummary, Metrics
from tests.conftest import TRIAD, Proc, start_triad, stdio_upstream, write_config
from tests.raw_clients import JSON_HEADERS, dumps, initialize

OWNER_TOKEN = "owner-token-3c9d1e7a"
AGENT_TOKEN = "agent-token-8b2f4a60"
SURFACES = ("mcp", "sse", "messages", "admin", "metrics", "console")
"""Every route that checks a credential (the OAuth callback checks it through the same `Authenticator`)."""
STARTED: list[float] = []
"""When the module's daemon started: the summary log line may come once a minute since."""


@pytest.fixture(scope="module")
def triad(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, Proc]]:
    config = write_config(tmp_path_factory.mktemp("auth"), {
        "upstreams": {"fx": stdio_upstream("auth")},
        "clients": {"owner": {"token": OWNER_TOKEN, "owner": True}, "agent": {"token": AGENT_TOKEN}},
        "console": {"enabled": True}, "listen": {"trusted_proxies": ["127.0.0.1", "::1"]}})
    procs: list[Proc] = []
    url = start_triad(procs, config, wait_ready=1)
    STARTED.append(time.monotonic())
    yield url.removesuffix("/mcp"), procs[-1]
    for proc in procs:
        proc.terminate()


def attempt(http: httpx2.Client, base: str, surface: str, source: str,
            authorization: list[bytes] | None) -> httpx2.Response:
    """One request to `surface` from `source`, with these `Authorization` field values (None: none at all; for the
    console, the first value is the sign-in form's token)."""
    headers: list[tuple[bytes, bytes]] = [(b"x-forwarded-for", source.encode())]
    if surface == "console":
        token = (authorization or [b""])[0].decode().removeprefix("Bearer ")
        return http.post(base + "/console/login", data={"token": token},
                         headers={"X-Forwarded-For": source, "Origin": base})
    headers += [(b"authorization", value) for value in authorization or []]
    if surface == "mcp":
        return http.post(base + "/mcp", content=dumps(initialize()), headers=[*JSON_HEADERS.items(), *headers])
    if surface == "sse":
        with http.stream("GET", base + "/sse", headers=[(b"accept", b"text/event-stream"), *headers]) as stream:
            return stream
    if surface == "messages":
        return http.post(base + "/messages/?session_id=" + "0" * 32, content=b"{}",
                         headers=[(b"content-type", b"application/json"), *headers])
    if surface == "admin":
        return http.post(base + "/admin/reload", headers=headers)
    return http.get(base + "/metrics", headers=headers)


def bearer(token: str) -> list[bytes]:
    return [f"Bearer {token}".encode()]


# -- point 7: brute force -------------------------------------------------------------------------------------


@pytest.mark.parametrize("surface", SURFACES)
def test_wrong_tokens_from_one_source_get_429_and_the_right_token_from_another_still_works(
        triad: tuple[str, Proc], surface: str) -> None:
    base, _proc = triad
    attacker, owner = f"10.7.{SURFACES.index(surface)}.1", f"10.7.{SURFACES.index(surface)}.2"
    with httpx2.Client(timeout=30, follow_redirects=False) as http:
        for n in range(FREE_FAILURES + 1):  # the allowance, and the failure that starts the backoff
            assert attempt(http, base, surface, attacker, bearer(f"wrong-{n}")).status_code == 401, n
        for right in (False, True):  # over the allowance even the right token waits: nothing is compared
            refused = attempt(http, base, surface, attacker, bearer(OWNER_TOKEN if right else "wrong-again"))
            assert refused.status_code == 429, refused.text
            assert int(refused.headers["retry-after"]) >= 1
        accepted = attempt(http, base, surface, owner, bearer(OWNER_TOKEN))
        assert accepted.status_code not in (401, 429), accepted.text


def test_without_trusted_proxies_a_forwarded_header_names_no_source(tmp_path: Path) -> None:
    """By default no `X-Forwarded-For` is believed: a local guesser that names a new source per request is still
    the one peer it is, and is throttled as one."""
    config = write_config(tmp_path, {"upstreams": {}, "clients": {"owner": {"token": OWNER_TOKEN, "owner": True}}})
    procs: list[Proc] = []
    base = start_triad(procs, config).removesuffix("/mcp")
    try:
        with httpx2.Client(timeout=30, follow_redirects=False) as http:
            codes = [attempt(http, base, "admin", f"10.9.{n}.1", bearer(f"wrong-{n}")).status_code
                     for n in range(FREE_FAILURES + 2)]
        assert codes == [401] * (FREE_FAILURES + 1) + [429], codes
    finally:
        for proc in procs:
            proc.terminate()


def test_another_identitys_session_id_is_throttled_and_not_logged_per_request(triad: tuple[str, Proc]) -> None:
    base, proc = triad
    with httpx2.Client(timeout=30) as http:
        opened = http.post(base + "/mcp", content=dumps(initialize()),
                           headers={**JSON_HEADERS, "Authorization": f"Bearer {OWNER_TOKEN}"})
        session_id = opened.headers["mcp-session-id"]
        probe = {**JSON_HEADERS, "Authorization": f"Bearer {AGENT_TOKEN}", "Mcp-Session-Id": session_id,
                 "MCP-Protocol-Version": "2025-11-25", "X-Forwarded-For": "10.8.0.1"}
        ping = dumps({"jsonrpc": "2.0", "id": 1, "method": "ping"})
        statuses = [http.post(base + "/mcp", content=ping, headers=probe).status_code for _ in range(FREE_FAILURES * 4)]
        assert statuses[:FREE_FAILURES] == [404] * FREE_FAILURES and 429 in statuses
        # The agent from another source is still refused: the failures are held against the identity too.
        elsewhere = http.post(base + "/mcp", content=ping, headers={**probe, "X-Forwarded-For": "10.8.0.2"})
        assert elsewhere.status_code == 429
        own = http.post(base + "/mcp", content=ping, headers={**probe, "Authorization": f"Bearer {OWNER_TOKEN}"})
        # the session's owner, from the very source of the agent's failures, is never blocked by them
        assert own.status_code == 200, own.text
        metrics = http.get(base + "/metrics", headers={"Authorization": f"Bearer {OWNER_TOKEN}",
                                                       "X-Forwarded-For": "10.8.0.4"}).text
    assert re.search(r'triad_auth_failures_total\{reason="session_mismatch"\} [1-9]', metrics)
    assert re.search(r'triad_auth_failures_total\{reason="throttled"\} [1-9]', metrics)
    assert "credential does not match" not in proc.stderr
    summaries = proc.stderr.count("failed authentications")
    assert 1 <= summaries <= 1 + int((time.monotonic() - STARTED[0]) // 60) + 1, summaries  # one line a minute


def test_the_throttle_table_is_bounded_under_a_flood_of_sources() -> None:
    throttle = AuthThrottle(Metrics(), LogSummary(logging.getLogger("test"), "failed"))
    for n in range(MAX_KEYS * 3):
        throttle.failed("invalid_token", f"source 10.{n >> 16 & 255}.{n >> 8 & 255}.{n & 255}")
    assert len(throttle) == MAX_KEYS


# -- point 9: malformed Authorization -------------------------------------------------------------------------


MALFORMED: dict[str, list[bytes]] = {
    "bearer, nothing after": [b"Bearer"],
    "basic": [b"Basic b3duZXI6cHc="],
    "another scheme": [b"Token " + OWNER_TOKEN.encode()],
    "two parameters": [b"Bearer a b"],
    "a tab": [b"Bearer\t" + OWNER_TOKEN.encode()],
    "non-ascii": ["Bearer tökén".encode()],
    "not a b64token": [b"Bearer a,b"],
    "two headers": [b"Bearer " + OWNER_TOKEN.encode(), b"Bearer " + OWNER_TOKEN.encode()],
    "no space": [b"Bearer" + OWNER_TOKEN.encode()],
}
WELL_FORMED: dict[str, list[bytes]] = {
    "lowercase scheme (RFC 9110 §11.1: case-insensitive)": [b"bearer " + OWNER_TOKEN.encode()],
    "upper case scheme": [b"BEARER " + OWNER_TOKEN.encode()],
    "two spaces (RFC 6750 §2.1: 1*SP)": [b"Bearer  " + OWNER_TOKEN.encode()],
}


@pytest.mark.parametrize("surface", [s for s in SURFACES if s != "console"])
def test_a_malformed_authorization_header_is_400_invalid_request(triad: tuple[str, Proc], surface: str) -> None:
    base, _proc = triad
    with httpx2.Client(timeout=30) as http:
        for n, (case, values) in enumerate(MALFORMED.items()):
            response = attempt(http, base, surface, f"10.6.{SURFACES.index(surface)}.{n + 1}", values)
            assert response.status_code == 400, (case, response.status_code)
            assert 'error="invalid_request"' in response.headers["www-authenticate"], case
        for n, (case, values) in enumerate(WELL_FORMED.items()):
            response = attempt(http, base, surface, f"10.6.{SURFACES.index(surface)}.{100 + n}", values)
            passed = response.status_code != 429 and "www-authenticate" not in response.headers  # past the check
            assert passed, (case, response.status_code)
        missing = attempt(http, base, surface, f"10.6.{SURFACES.index(surface)}.200", None)
        assert missing.status_code == 401


# -- point 8: off loopback, and strict Host and Origin --------------------------------------------------------


def test_serve_and_check_refuse_an_unauthenticated_listener_off_loopback(tmp_path: Path) -> None:
    bare = write_config(tmp_path, {"upstreams": {}, "listen": {"host": "0.0.0.0"}})
    checked = subprocess.run([*TRIAD, "check", "-c", str(bare)], capture_output=True, text=True, timeout=60)
    assert checked.returncode == 1 and "needs authentication" in checked.stderr
    # Refused before anything is bound: nothing listens on 0.0.0.0 in this test.
    served = subprocess.run([*TRIAD, "serve", "-c", str(bare), "--host", "0.0.0.0", "--port", "0"],
                            capture_output=True, text=True, timeout=60)
    assert served.returncode != 0 and "listen.allow_unauthenticated" in served.stderr
    allowed = write_config(tmp_path, {"upstreams": {}, "listen": {"host": "0.0.0.0", "allow_unauthenticated": True}},
                           "allowed.yaml")
    warned = subprocess.run([*TRIAD, "check", "-c", str(allowed)], capture_output=True, text=True, timeout=60)
    assert warned.returncode == 0 and "none is an owner" in warned.stderr


LOOPBACK = re.compile(r"(127\.0\.0\.1|localhost|\[::1\])(:[0-9]{1,5})?")


def allowed_host(value: str) -> bool:
    """The oracle: a loopback name as a browser writes it, and a port of digits within range."""
    found = LOOPBACK.fullmatch(value)
    return found is not None and (found.group(2) is None or int(found.group(2)[1:]) <= 65535)


PIECES = st.sampled_from(["127.0.0.1", "localhost", "[::1]", "LOCALHOST", "LocalHost", "127.0.0.1.", "localhost.",
                          "[0:0:0:0:0:0:0:1]", "::1", "[::1%25lo]", "127.1", "2130706433", "evil.example",
                          "user@127.0.0.1", "127.0.0.1@evil", "127%2e0.0.1", "localhost%00", "[::ffff:127.0.0.1]",
                          "127.0.0.01", "localhost\u3002"])
SUFFIXES = st.sampled_from(["", ":80", ":8765", ":", ":80@evil.example", ":80 x", ":99999", ":65535", ":+80", ":0x50",
                            "/", "/mcp", " ", ":80/", ":٨٠", "%3A80", ":80.", ":080", "\t", ":80:80", "#x", "?a"])
HOSTS = st.one_of(st.builds(lambda a, b: a + b, PIECES, SUFFIXES),
                  st.text(st.characters(min_codepoint=32, max_codepoint=0x2FF, exclude_characters="\x7f"),
                          max_size=24))


def raw_request(port: int, path: str, host: bytes, origin: bytes | None) -> bytes:
    """One request with exactly these Host and Origin bytes (an HTTP library would normalise them)."""
    lines = [f"POST {path} HTTP/1.1".encode(), b"Host: " + host, b"Content-Type: application/json",
             b"Accept: application/json, text/event-stream", b"Content-Length: 2", b"Connection: close"]
    if origin is not None:
        lines.append(b"Origin: " + origin)
    with socket.create_connection(("127.0.0.1", port), timeout=30) as sock:
        sock.sendall(b"\r\n".join(lines) + b"\r\n\r\n{}")
        answer = b""
        while chunk := sock.recv(65536):
            answer += chunk
    return answer


def refused(answer: bytes) -> bool:
    """421/403 from the Host/Origin check, or 400 from the HTTP parser (a value it cannot take at all)."""
    status = answer.split(b" ", 2)[1] if answer.count(b" ") >= 2 else b""
    return status in (b"421", b"403", b"400") and (b"Invalid" in answer)


@pytest.mark.parametrize("path", ["/mcp", "/messages/?session_id=" + "0" * 32, "/console/login", "/admin/reload"])
@settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(host=HOSTS, as_origin=st.booleans())
def test_host_and_origin_are_accepted_iff_they_are_a_loopback_form(
        triad: tuple[str, Proc], path: str, host: str, as_origin: bool) -> None:
    port = int(triad[0].rsplit(":", 1)[1])
    value = host.encode("utf-8")
    if as_origin:  # a good Host, the generated value as the Origin's host[:port]
        answer = raw_request(port, path, f"127.0.0.1:{port}".encode(), b"http://" + value)
    else:
        answer = raw_request(port, path, value, None)
    # Surrounding whitespace is not part of a field value (RFC 9110 §5.5): the Origin's host keeps its leading one.
    expected = allowed_host(host.rstrip(" \t") if as_origin else host.strip(" \t"))
    assert refused(answer) != expected, (host, as_origin, answer[:200])




@pytest.mark.parametrize("anonymous", [False, True])
def test_metrics_and_readyz_details_need_a_token_even_with_anonymous(tmp_path: Path, anonymous: bool) -> None:
    """`anonymous:` lets callers without a token use `/mcp` as that client; it does not open `/metrics` or the
    details of `/readyz` (children's stderr, diagnostics, reload errors) to anyone who can reach the port."""
    config = write_config(tmp_path, {
        "upstreams": {"fx": stdio_upstream("anon-details")},
        "clients": {"owner": {"token": OWNER_TOKEN, "owner": True}, "guest": {}},
        **({"anonymous": "guest"} if anonymous else {})})
    procs: list[Proc] = []
    base = start_triad(procs, config, wait_ready=1).removesuffix("/mcp")
    try:
        with httpx2.Client(timeout=30) as http:
            assert http.get(base + "/metrics").status_code == 401
            assert set(http.get(base + "/readyz").json()) == {"ready"}
            authorised = {"Authorization": f"Bearer {OWNER_TOKEN}"}
            assert http.get(base + "/metrics", headers=authorised).status_code == 200
            assert "upstreams" in http.get(base + "/readyz", headers=authorised).json()
            if anonymous:  # and /mcp still serves the anonymous client
                assert http.post(base + "/mcp", content=dumps(initialize()), headers=JSON_HEADERS).status_code == 200
    finally:
        for proc in procs:
            proc.terminate()
