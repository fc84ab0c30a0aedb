"""Triad as an OAuth 2.1 protected resource, against a real authorization server (`tests/node/oauth_as.mjs`:
oidc-provider issuing JWT access tokens for resource indicators by the client_credentials grant).

Tokens with a flaw the server would never issue (another issuer, already expired) are minted here with the
server's own signing key, which the test generated and handed to it; everything else comes from the server.
"""

from __future__ import annotations

import base64
import json
import socket
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx2
import jwt
import pytest
from cryptography.hazmat.primitives.asymmetric import rsa

from exposers.auth._keys import KeySet, KeysUnavailable, UnknownKey, metadata_urls
from exposers.auth._tokens import identity_from_claims
from gateway.config import OAuthConfig, TriadConfig
from tests.conftest import NODE_DIR, TRIAD, Proc, marker, node_bin, start_fixture, write_config
from tests.test_direct_path import Raw, call, modern_post
from tests.test_isolation import REFUSED_BODY, reply

pytestmark = pytest.mark.anyio

STATIC = "ops-static-token-0123456789"
OTHER_RESOURCE = "http://127.0.0.1:1/other"


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def signing_key(kid: str) -> tuple[rsa.RSAPrivateKey, dict[str, Any]]:
    key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    jwk = json.loads(jwt.algorithms.RSAAlgorithm.to_jwk(key))
    return key, {**jwk, "kid": kid}


class AuthServer:
    """oidc-provider on a fixed loopback port (so the issuer stays the same across a key rotation)."""

    def __init__(self, procs: list[Proc], resource: str, env: dict[str, str] | None = None) -> None:
        self.procs, self.resource, self.env = procs, resource, env or {}
        self.port = free_port()
        self.issuer = f"http://127.0.0.1:{self.port}"
        self.proc: Proc | None = None

    def start(self, *jwks: dict[str, Any]) -> None:
        self.proc = Proc([node_bin(), str(NODE_DIR / "oauth_as.mjs"), marker("oauth-as")],
                         env={"AS_PORT": str(self.port), "AS_RESOURCES": json.dumps([self.resource, OTHER_RESOURCE]),
                              "AS_KEYS": json.dumps(list(jwks)), **self.env})
        self.procs.append(self.proc)
        self.proc.wait_for(r"READY \d+")

    def restart(self, *jwks: dict[str, Any]) -> None:
        assert self.proc is not None
        self.proc.terminate()
        self.start(*jwks)

    async def token(self, client: str = "alice-app", scope: str = "mcp:read", resource: str | None = None) -> str:
        async with httpx2.AsyncClient(timeout=30) as http:
            response = await http.post(f"{self.issuer}/token", auth=(client, f"{client}-secret"),
                                       data={"grant_type": "client_credentials", "scope": scope,
                                             "resource": resource or self.resource})
        assert response.status_code == 200, response.text
        return str(response.json()["access_token"])


class Setup:
    def __init__(self, procs: list[Proc], tmp_path: Path) -> None:
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}/mcp"
        self.auth = AuthServer(procs, self.url)
        self.key, self.jwk = signing_key("key-1")
        self.auth.start(self.jwk)
        self.upstream_url = start_fixture(procs, "http", "oauth-up", "--log-auth")
        self.upstream = procs[-1]
        self.procs, self.tmp_path = procs, tmp_path

    def oauth(self, **extra: Any) -> dict[str, Any]:
        return {"issuer": self.auth.issuer, "audience": self.url, "scopes": ["mcp:read"], "leeway": "0s",
                "jwks_refetch_interval": "0s", **extra}

    def start_triad(self, **extra: Any) -> None:
        config = write_config(self.tmp_path, {
            "upstreams": {"fx": {"url": self.upstream_url}},
            "clients": {"ops": {"token": STATIC, "owner": True}, "alice": {"agent": "coder"}},
            "hooks": [{"audit": {"path": str(self.tmp_path / "audit.jsonl")}}],
            **extra})
        proc = Proc([*TRIAD, "serve", "-c", str(config), "--port", str(self.port), "--log-level", "DEBUG"],
                    env={"TRIAD_TEST_MARK": marker("triad")})
        self.procs.append(proc)
        proc.wait_for(r"listening on http://127\.0\.0\.1:\d+/mcp")
        proc.wait_for(r"upstream \S+ ready")

    def mint(self, **claims: Any) -> str:
        now = int(time.time())
        body = {"iss": self.auth.issuer, "aud": self.url, "sub": "minted", "client_id": "alice-app",
                "scope": "mcp:read", "iat": now, "exp": now + 600, **claims}
        return jwt.encode(body, self.key, algorithm="RS256", headers={"kid": "key-1", "typ": "at+jwt"})


@pytest.fixture
def setup(procs: list[Proc], tmp_path: Path) -> Iterator[Setup]:
    yield Setup(procs, tmp_path)


async def session_for(http: httpx2.AsyncClient, url: str, token: str) -> Raw:
    session = Raw(http, url)
    session.headers["Authorization"] = f"Bearer {token}"
    return await session.open()


def challenge(response: httpx2.Response) -> dict[str, str]:
    scheme, _, rest = response.headers["www-authenticate"].partition(" ")
    assert scheme == "Bearer"
    return {k.strip(): v.strip('"') for k, v in (part.split("=", 1) for part in rest.split('", '))}


async def test_a_valid_token_lists_and_calls_tools_and_never_reaches_the_upstream(setup: Setup) -> None:
    setup.start_triad(auth={"oauth": setup.oauth(clients={"alice-app": "alice"}, groups_claim="groups")})
    token = await setup.auth.token("alice-app")
    async with httpx2.AsyncClient(timeout=30) as http:
        session = await session_for(http, setup.url, token)
        listed = reply(await session.post({"jsonrpc": "2.0", "id": 1, "method": "tools/list"}))
        assert "echo" in {tool["name"] for tool in listed["result"]["tools"]}
        called = reply(await session.post(call(2, "echo", {"text": "hello"})))
        assert called["result"]["content"][0]["text"] == "hello"
        # a static token keeps working beside OAuth
        static = await session_for(http, setup.url, STATIC)
        assert reply(await static.post(call(3, "echo", {"text": "ops"})))["result"]["content"][0]["text"] == "ops"
    # the 2026-07-28 era (stateless, no session) is behind the same gate
    async with httpx2.AsyncClient(timeout=30, headers={"Authorization": f"Bearer {token}"}) as modern:
        answered = await modern_post(modern, setup.url, 4, "echo", {"text": "stateless"})
        assert reply(answered)["result"]["content"][0]["text"] == "stateless"
    async with httpx2.AsyncClient(timeout=30) as anonymous:
        refused = await modern_post(anonymous, setup.url, 5, "echo", {"text": "nobody"})
        assert refused.status_code == 401 and "resource_metadata" in challenge(refused)
    records = [json.loads(line) for line in (setup.tmp_path / "audit.jsonl").read_text().splitlines()]
    assert {record["client"] for record in records} == {"alice", "ops"}  # the token's client_id, mapped
    sent = setup.upstream.stderr
    assert "AUTH" in sent and token not in sent and token[:20] not in sent and STATIC not in sent
    assert all(line == "AUTH -" for line in sent.splitlines() if line.startswith("AUTH"))


async def test_metadata_documents_and_the_401_challenge(setup: Setup) -> None:
    setup.start_triad(auth={"oauth": setup.oauth(scopes=["mcp:read", "offline_access"])})
    base = setup.url.removesuffix("/mcp")
    async with httpx2.AsyncClient(timeout=30) as http:
        expected = {"resource": setup.url, "authorization_servers": [setup.auth.issuer],
                    "scopes_supported": ["mcp:read"], "bearer_methods_supported": ["header"]}
        for path in ("/.well-known/oauth-protected-resource/mcp", "/.well-known/oauth-protected-resource"):
            document = (await http.get(base + path)).json()
            assert {k: document[k] for k in expected} == expected
        assert (await http.get(base + "/.well-known/oauth-protected-resource/other")).status_code == 404
        bare = await http.post(setup.url, json={"jsonrpc": "2.0", "id": 1, "method": "tools/list"})
        assert bare.status_code == 401
        assert challenge(bare) == {"resource_metadata": f"{base}/.well-known/oauth-protected-resource/mcp",
                                   "scope": "mcp:read"}  # no error code without a token (RFC 6750 §3.1)


def _tampered(token: str) -> str:
    header, payload, signature = token.split(".")
    claims = json.loads(base64.urlsafe_b64decode(payload + "=" * (-len(payload) % 4)))
    claims["sub"] = "someone-else"
    forged = base64.urlsafe_b64encode(json.dumps(claims).encode()).rstrip(b"=").decode()
    return f"{header}.{forged}.{signature}"


async def test_bad_tokens_get_invalid_token_and_a_missing_scope_gets_403(setup: Setup) -> None:
    setup.start_triad(auth={"oauth": setup.oauth()}, listen={"trusted_proxies": ["127.0.0.1"]})
    good = await setup.auth.token()
    now = int(time.time())
    bad = {
        "wrong audience": await setup.auth.token(resource=OTHER_RESOURCE),
        "wrong issuer": setup.mint(iss="http://127.0.0.1:1"),
        "expired": setup.mint(iat=now - 1200, exp=now - 600),
        "not yet valid": setup.mint(nbf=now + 600),
        "tampered": _tampered(good),
        "unsigned": jwt.encode({"iss": setup.auth.issuer, "aud": setup.url, "sub": "x", "exp": now + 600},
                               None, algorithm="none"),
        "not a jwt": "opaque-token",
    }
    async with httpx2.AsyncClient(timeout=30) as http:
        body = {"jsonrpc": "2.0", "id": 1, "method": "tools/list"}
        for n, (case, token) in enumerate(bad.items()):
            # Each case from a source of its own: more failures than the throttle's allowance from one source
            # get 429 (exposers._throttle); X-Forwarded-For is believed from loopback (`listen.trusted_proxies`).
            response = await http.post(setup.url, json=body, headers={"Authorization": f"Bearer {token}",
                                                                      "X-Forwarded-For": f"10.9.0.{n + 1}"})
            assert response.status_code == 401, case
            found = challenge(response)
            assert found["error"] == "invalid_token" and found["scope"] == "mcp:read", case
            assert found["resource_metadata"].endswith("/.well-known/oauth-protected-resource/mcp"), case
        write_only = await setup.auth.token(scope="mcp:write")
        response = await http.post(setup.url, json=body, headers={"Authorization": f"Bearer {write_only}"})
        assert response.status_code == 403
        found = challenge(response)
        assert found["error"] == "insufficient_scope" and found["scope"] == "mcp:read"
        assert "resource_metadata" in found
        session = await session_for(http, setup.url, good)  # the good token itself still works
        assert reply(await session.post(call(2, "echo", {"text": "ok"})))["result"]["content"][0]["text"] == "ok"


async def test_a_rotated_key_is_fetched_and_the_retired_one_refused(setup: Setup) -> None:
    setup.start_triad(auth={"oauth": setup.oauth()})
    old = await setup.auth.token()
    body = {"jsonrpc": "2.0", "id": 1, "method": "tools/list"}
    async with httpx2.AsyncClient(timeout=30) as http:
        assert (await http.post(setup.url, json=body, headers={"Authorization": f"Bearer {old}"})).status_code \
            != 401  # keys fetched and cached
        _, new_jwk = signing_key("key-2")
        setup.auth.restart(new_jwk)
        new = await setup.auth.token()
        assert jwt.get_unverified_header(new)["kid"] == "key-2"
        session = await session_for(http, setup.url, new)  # an unknown kid refetches the keys once
        assert reply(await session.post(call(2, "echo", {"text": "rotated"})))["result"]["content"][0]["text"] \
            == "rotated"
        refused = await http.post(setup.url, json=body, headers={"Authorization": f"Bearer {old}"})
        assert refused.status_code == 401 and challenge(refused)["error"] == "invalid_token"


@pytest.mark.parametrize("direct_path", [True, False], ids=["direct", "sdk"])
async def test_two_subjects_of_one_client_cannot_use_each_others_session(setup: Setup, direct_path: bool) -> None:
    # Neither OAuth client is mapped: both act as the default client `oauth`, told apart by their subjects only.
    setup.start_triad(auth={"oauth": setup.oauth()}, listen={"direct_path": direct_path})
    alice, bob = await setup.auth.token("alice-app"), await setup.auth.token("bob-app")
    async with httpx2.AsyncClient(timeout=30) as http:
        session = await session_for(http, setup.url, alice)
        session_id = session.headers["Mcp-Session-Id"]
        stolen = await session.post(call(2, "echo", {"text": "theirs"}), Authorization=f"Bearer {bob}")
        assert stolen.status_code == 404 and REFUSED_BODY in stolen.text
        assert reply(await session.post(call(3, "echo", {"text": "mine"})))["result"]["content"][0]["text"] == "mine"
        assert session.headers["Mcp-Session-Id"] == session_id


async def test_an_unknown_kid_refetches_at_most_once_per_interval(procs: list[Proc]) -> None:
    auth = AuthServer(procs, "http://127.0.0.1:9/mcp")
    auth.start(signing_key("key-1")[1])
    now = [1000.0]
    keys = KeySet(OAuthConfig(issuer=auth.issuer, audience=auth.resource, jwks_refetch_interval=30),
                  clock=lambda: now[0])
    assert (await keys.key("key-1")).key_id == "key-1" and keys.fetches == 1
    for _ in range(3):
        with pytest.raises(UnknownKey):
            await keys.key("made-up")
    assert keys.fetches == 1  # within the interval: no refetch
    now[0] += 30
    with pytest.raises(UnknownKey):
        await keys.key("made-up")
    with pytest.raises(UnknownKey):
        await keys.key("made-up-too")
    assert keys.fetches == 2


async def test_an_unreachable_issuer_is_unavailable_not_a_bad_token() -> None:
    issuer = f"http://127.0.0.1:{free_port()}"
    keys = KeySet(OAuthConfig(issuer=issuer, audience="http://127.0.0.1:9/mcp", jwks_refetch_interval=30),
                  clock=lambda: 0.0)
    for _ in range(2):
        with pytest.raises(KeysUnavailable):
            await keys.key("key-1")
    assert keys.fetches == 1  # failing fetches are rate limited too
    assert metadata_urls("https://as.example/tenant1") == [
        "https://as.example/.well-known/oauth-authorization-server/tenant1",
        "https://as.example/.well-known/openid-configuration/tenant1",
        "https://as.example/tenant1/.well-known/openid-configuration"]


def test_claims_map_to_identities_without_granting_ownership() -> None:
    config = TriadConfig.model_validate({
        "clients": {"ops": {"owner": True, "groups": ["sre"]}, "alice": {"agent": "coder"}},
        "auth": {"oauth": {"issuer": "https://as.example", "audience": "https://triad.example/mcp",
                           "clients": {"ops-app": "ops"}, "groups_claim": "groups", "agent_claim": "agent",
                           "provider_claim": "llm"}}})
    oauth = config.auth.oauth
    assert oauth is not None
    base = {"iss": "https://as.example", "sub": "u1"}
    mapped = identity_from_claims(config, oauth, {**base, "client_id": "ops-app", "groups": ["eng", "sre"]})
    assert (mapped.client_id, mapped.owner, mapped.groups) == ("ops", True, ("sre", "eng"))
    assert mapped.principal == ("https://as.example", "u1")
    other = identity_from_claims(config, oauth, {**base, "client_id": "ops", "groups": "a b", "agent": "x",
                                                 "llm": "openai", "owner": True})
    assert (other.client_id, other.owner, other.groups, other.agent, other.provider) == \
        ("oauth", False, ("a", "b"), "x", "openai")
    with pytest.raises(ValueError, match="not in clients"):
        TriadConfig.model_validate({"auth": {"oauth": {"issuer": "i", "audience": "https://t/mcp",
                                                       "clients": {"x": "nobody"}}}})


@pytest.mark.parametrize("direct_path", [True, False], ids=["direct", "sdk"])
async def test_two_subjects_of_one_client_cannot_answer_each_others_input_round(setup: Setup,
                                                                              direct_path: bool) -> None:
    """A parked call (a 2026-07-28 input round) belongs to the subject that made it, as a session does: another
    subject of the same client presenting its `requestState` gets what an expired state gets, and the owner's
    own retry still completes the call."""
    setup.start_triad(auth={"oauth": setup.oauth()}, listen={"direct_path": direct_path})
    capabilities = {"elicitation": {"form": {}}}
    async with httpx2.AsyncClient(timeout=30, headers={"Authorization": f"Bearer {setup.mint(sub='ada')}"}) as ada, \
            httpx2.AsyncClient(timeout=30, headers={"Authorization": f"Bearer {setup.mint(sub='bo')}"}) as bo:
        first = (await modern_post(ada, setup.url, 1, "ask", {"question": "go?"}, capabilities)).json()["result"]
        assert first["resultType"] == "input_required"
        (key, _question), = first["inputRequests"].items()

        def answer(text: str) -> dict[str, Any]:
            return {"inputResponses": {key: {"action": "accept", "content": {"answer": text}}},
                    "requestState": first["requestState"]}

        stolen = await modern_post(bo, setup.url, 2, "ask", {"question": "go?"}, capabilities, **answer("bo's"))
        assert stolen.json()["error"]["message"] == "Invalid or expired requestState", stolen.text
        mine = await modern_post(ada, setup.url, 3, "ask", {"question": "go?"}, capabilities, **answer("ada's"))
        assert "ada's" in mine.json()["result"]["content"][0]["text"], mine.text
