"""Triad as a protected resource, round two: the issuer's keys under rotation and outage, CORS on the public
metadata documents (and nowhere else), and the OAuth subject in the audit log. One oidc-provider
(`tests/node/oauth_as.mjs`, started and restarted by the tests on a fixed port) and one Triad for the module; the
tests run in file order (the first one needs the authorization server still down).
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx2
import jwt
import pytest
from cryptography.hazmat.primitives.asymmetric import rsa

from exposers.auth._keys import KeySet, KeysUnavailable
from exposers.auth._tokens import TokenRejected, TokenValidator
from gateway.config import OAuthConfig
from tests.conftest import TRIAD, Proc, marker, start_fixture, write_config
from tests.test_direct_path import Raw, call
from tests.test_isolation import reply
from tests.test_oauth import AuthServer, free_port, signing_key

pytestmark = pytest.mark.anyio

KID = "the-kid"


class Stack:
    def __init__(self, tmp_path: Path) -> None:
        self.procs: list[Proc] = []
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}/mcp"
        self.base = self.url.removesuffix("/mcp")
        self.auth = AuthServer(self.procs, self.url)
        self.key, self.jwk = signing_key(KID)
        """The key the authorization server signs with now (a test may replace it)."""
        self.audit = tmp_path / "audit.jsonl"
        upstream = start_fixture(self.procs, "http", "keys-up")
        config = write_config(tmp_path, {
            "upstreams": {"fx": {"url": upstream}},
            "clients": {"alice": {"agent": "coder"}},
            "auth": {"oauth": {"issuer": self.auth.issuer, "audience": self.url, "scopes": ["mcp:read"],
                               "leeway": "0s", "jwks_refetch_interval": "0s", "clients": {"alice-app": "alice"}}},
            "hooks": [{"audit": {"path": str(self.audit)}}]})
        proc = Proc([*TRIAD, "serve", "-c", str(config), "--port", str(self.port), "--log-level", "DEBUG"],
                    env={"TRIAD_TEST_MARK": marker("triad")})
        self.procs.append(proc)
        proc.wait_for(r"listening on http://127\.0\.0\.1:\d+/mcp")

    def auth_up(self) -> None:
        if self.auth.proc is None:
            self.auth.start(self.jwk)

    def mint(self, key: rsa.RSAPrivateKey | None = None, **claims: Any) -> str:
        now = int(time.time())
        body = {"iss": self.auth.issuer, "aud": self.url, "sub": "ada", "client_id": "alice-app",
                "scope": "mcp:read", "iat": now, "exp": now + 600, **claims}
        return jwt.encode(body, key or self.key, algorithm="RS256", headers={"kid": KID})

    async def status(self, token: str) -> httpx2.Response:
        """The answer to an `initialize` sent with `token` (200: the token was accepted)."""
        session = Raw(httpx2.AsyncClient(timeout=30), self.url)
        session.headers["Authorization"] = f"Bearer {token}"
        async with session.http:
            return await session.post({"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": {
                "protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name": "t", "version": "1"}}})


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    found = Stack(tmp_path_factory.mktemp("keys"))
    yield found
    for proc in reversed(found.procs):
        proc.terminate()


async def test_an_empty_key_cache_answers_503_with_retry_after(stack: Stack) -> None:
    response = await stack.status(stack.mint())  # the authorization server is not started yet
    assert response.status_code == 503, response.text
    assert int(response.headers["retry-after"]) >= 1


@pytest.mark.parametrize(("elapsed", "expected"), [(0.0, 30), (0.5, 30), (10.0, 20), (29.2, 1), (29.9, 1)])
async def test_retry_after_counts_down_to_the_next_allowed_fetch(elapsed: float, expected: int) -> None:
    now = [1000.0]
    keys = KeySet(OAuthConfig(issuer=f"http://127.0.0.1:{free_port()}", audience="http://127.0.0.1:9/mcp",
                              jwks_refetch_interval=30), clock=lambda: now[0])
    with pytest.raises(KeysUnavailable) as first:
        await keys.key(KID)
    assert first.value.retry_after == 30
    now[0] += elapsed
    with pytest.raises(KeysUnavailable) as later:
        await keys.key(KID)
    assert later.value.retry_after == expected and keys.fetches == 1


async def test_a_key_replaced_under_the_same_kid_is_fetched_and_the_old_one_refused(stack: Stack) -> None:
    stack.auth_up()
    old = stack.mint()
    assert (await stack.status(old)).status_code == 200
    replacement, replacement_jwk = signing_key(KID)
    stack.auth.restart(replacement_jwk)
    stack.key, stack.jwk = replacement, replacement_jwk
    new = stack.mint()
    answered = await stack.status(new)
    assert answered.status_code == 200, answered.text  # the signature failure refetched the keys
    refused = await stack.status(old)
    assert refused.status_code == 401 and 'error="invalid_token"' in refused.headers["www-authenticate"]


@pytest.mark.parametrize("steps", [[0, 0, 0, 0], [0, 10, 10, 10], [0, 30, 0, 30, 1], [0, 29, 2, 28, 31]])
async def test_failing_signatures_refetch_at_most_once_per_interval(stack: Stack, steps: list[float]) -> None:
    """Tokens signed by a key the issuer never published, under its `kid`: each may refetch the keys, but no more
    often than `jwks_refetch_interval` (30 s here), whatever the spacing of the requests."""
    now = [1000.0]
    config = OAuthConfig(issuer=stack.auth.issuer, audience=stack.url, jwks_refetch_interval=30, leeway=0)
    keys = KeySet(config, clock=lambda: now[0])
    validator = TokenValidator(config, keys)
    stack.auth_up()
    await keys.key(KID)
    forger = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    allowed, last = 1, now[0]
    for step in steps:
        now[0] += step
        if now[0] - last >= 30:
            allowed, last = allowed + 1, now[0]
        with pytest.raises(TokenRejected, match="signature"):
            await validator.claims(stack.mint(forger))
        assert keys.fetches == allowed, (steps, step)


PUBLIC = ["/.well-known/oauth-protected-resource", "/.well-known/oauth-protected-resource/mcp",
          "/.well-known/oauth-authorization-server", "/.well-known/oauth-authorization-server/mcp",
          "/.well-known/openid-configuration", "/.well-known/openid-configuration/mcp"]


@pytest.mark.parametrize("path", PUBLIC)
async def test_public_metadata_answers_cors_and_its_preflight(stack: Stack, path: str) -> None:
    origin = {"Origin": "https://browser-client.example"}
    async with httpx2.AsyncClient(timeout=30) as http:
        preflight = await http.options(stack.base + path, headers={
            **origin, "Access-Control-Request-Method": "GET", "Access-Control-Request-Headers": "mcp-protocol-version"})
        got = await http.get(stack.base + path, headers={**origin, "MCP-Protocol-Version": "2025-11-25"})
    assert preflight.status_code == 204, preflight.text
    assert preflight.headers["access-control-allow-origin"] == "*"
    assert "GET" in preflight.headers["access-control-allow-methods"]
    assert "mcp-protocol-version" in preflight.headers["access-control-allow-headers"]
    assert got.headers["access-control-allow-origin"] == "*"
    assert got.status_code == (200 if "protected-resource" in path else 404)


@pytest.mark.parametrize("method", ["OPTIONS", "POST", "GET"])
async def test_the_mcp_endpoint_gets_no_cors(stack: Stack, method: str) -> None:
    async with httpx2.AsyncClient(timeout=30) as http:
        response = await http.request(method, stack.url, headers={
            "Origin": "https://browser-client.example", "Access-Control-Request-Method": "POST",
            "Authorization": f"Bearer {stack.mint()}", "Accept": "application/json, text/event-stream"},
            json={"jsonrpc": "2.0", "id": 1, "method": "tools/list"} if method == "POST" else None)
    assert not any(name.startswith("access-control-") for name in response.headers), response.headers


async def test_the_audit_log_records_the_oauth_subject_with_the_client(stack: Stack) -> None:
    stack.auth_up()
    for subject in ("ada", "bo"):
        async with httpx2.AsyncClient(timeout=30) as http:
            session = Raw(http, stack.url)
            session.headers["Authorization"] = f"Bearer {stack.mint(sub=subject)}"
            answered = reply(await (await session.open()).post(call(2, "echo", {"text": subject})))
            assert answered["result"]["content"][0]["text"] == subject
    records = [json.loads(line) for line in stack.audit.read_text().splitlines()]
    assert {(record["client"], record.get("subject")) for record in records if record["name"] == "echo"} == \
        {("alice", "ada"), ("alice", "bo")}
