"""Inbound OAuth, against the real authorization server (`tests/node/oauth_as.mjs`): opaque access tokens
checked by introspection (RFC 7662, `auth.oauth.introspection`), `token_type: at+jwt` (RFC 9068), and the
TypeScript SDK client's own OAuth flow against Triad."""

from __future__ import annotations

import json
import time
from pathlib import Path

import anyio
import httpx2
import jwt
import pytest

from exposers.auth._tokens import TokenRejected, TokenValidator
from gateway.config import OAuthConfig
from tests.conftest import NODE_DIR, TRIAD, Proc, marker, node_bin, start_fixture, write_config
from tests.test_direct_path import Raw, call
from tests.test_oauth import OTHER_RESOURCE, AuthServer, free_port, signing_key

pytestmark = pytest.mark.anyio

RESOURCE = "http://127.0.0.1:1/mcp"
INTROSPECTION = {"client_id": "bob-app", "client_secret": "bob-app-secret"}


def opaque_server(procs: list[Proc], resource: str = RESOURCE) -> AuthServer:
    server = AuthServer(procs, resource, env={"AS_OPAQUE": "1"})
    server.start(signing_key("opaque-key")[1])
    return server


async def test_an_opaque_token_is_introspected_once_and_then_served_from_the_cache(procs: list[Proc]) -> None:
    server = opaque_server(procs)
    validator = TokenValidator(OAuthConfig(issuer=server.issuer, audience=RESOURCE, scopes=("mcp:read",),
                                           introspection=INTROSPECTION))  # type: ignore[arg-type]
    token = await server.token()
    assert token.count(".") != 2, "the server should have issued an opaque token"
    first = await validator.claims(token)
    assert first["sub"] == "alice-app" and first["iss"] == server.issuer
    assert await validator.claims(token) == first
    assert validator.introspector is not None and validator.introspector.requests == 1


async def test_opaque_tokens_that_are_unknown_for_another_resource_or_short_of_scope_are_refused(
        procs: list[Proc]) -> None:
    server = opaque_server(procs)
    validator = TokenValidator(OAuthConfig(issuer=server.issuer, audience=RESOURCE, scopes=("mcp:write",),
                                           introspection=INTROSPECTION))  # type: ignore[arg-type]
    with pytest.raises(TokenRejected, match="not active"):
        await validator.claims("not-a-token-the-server-issued")
    with pytest.raises(TokenRejected, match="not issued for this resource"):
        await validator.claims(await server.token(scope="mcp:write", resource=OTHER_RESOURCE))
    with pytest.raises(TokenRejected, match="lacks the scope mcp:write") as refused:
        await validator.claims(await server.token(scope="mcp:read"))
    assert refused.value.status == 403


async def test_without_introspection_an_opaque_token_is_refused(procs: list[Proc]) -> None:
    server = opaque_server(procs)
    validator = TokenValidator(OAuthConfig(issuer=server.issuer, audience=RESOURCE))
    with pytest.raises(TokenRejected, match="not a JWT"):
        await validator.claims(await server.token())


async def test_triad_serves_a_client_whose_opaque_token_it_introspects(procs: list[Proc], tmp_path: Path) -> None:
    port = free_port()
    url = f"http://127.0.0.1:{port}/mcp"
    server = opaque_server(procs, url)
    config = write_config(tmp_path, {
        "upstreams": {"fx": {"url": start_fixture(procs, "http", "introspected")}},
        "auth": {"oauth": {"issuer": server.issuer, "audience": url, "scopes": ["mcp:read"],
                           "introspection": INTROSPECTION}}})
    procs.append(triad := Proc([*TRIAD, "serve", "-c", str(config), "--port", str(port), "--log-level", "DEBUG"],
                               env={"TRIAD_TEST_MARK": marker("triad")}))
    triad.wait_for(r"upstream \S+ ready")
    async with httpx2.AsyncClient(timeout=30) as http:
        refused = await http.post(url, json={"jsonrpc": "2.0", "id": 0, "method": "ping"},
                                  headers={"Authorization": "Bearer not-a-token-the-server-issued",
                                           "Accept": "application/json, text/event-stream"})
        assert refused.status_code == 401
        session = Raw(http, url)
        session.headers["Authorization"] = f"Bearer {await server.token()}"
        answer = await (await session.open()).post(call(1, "echo", {"text": "hi"}))
    assert answer.status_code == 200 and "hi" in answer.text


async def test_token_type_at_jwt_refuses_a_jwt_that_does_not_say_it_is_an_access_token(procs: list[Proc]) -> None:
    key, jwk = signing_key("typ-key")
    server = AuthServer(procs, RESOURCE)
    server.start(jwk)
    validator = TokenValidator(OAuthConfig(issuer=server.issuer, audience=RESOURCE, token_type="at+jwt"))
    assert (await validator.claims(await server.token()))["sub"] == "alice-app"  # oidc-provider's: typ at+jwt
    now = int(time.time())
    id_token_like = jwt.encode({"iss": server.issuer, "aud": RESOURCE, "sub": "someone", "iat": now,
                                "exp": now + 600}, key, algorithm="RS256", headers={"kid": "typ-key", "typ": "JWT"})
    with pytest.raises(TokenRejected, match="not an access token"):
        await validator.claims(id_token_like)
    assert (await TokenValidator(OAuthConfig(issuer=server.issuer, audience=RESOURCE)).claims(id_token_like))["sub"]


async def test_the_typescript_sdk_client_authorizes_itself_and_calls_through_triad(procs: list[Proc],
                                                                                  tmp_path: Path) -> None:
    """The TS SDK client's whole flow: Triad's 401 and metadata, the authorization server's discovery, dynamic
    registration, authorization code with PKCE (the browser step: a redirect loop), the token, then calls."""
    port = free_port()
    url = f"http://127.0.0.1:{port}/mcp"
    server = AuthServer(procs, url, env={"AS_LOGIN": "1"})
    server.start(signing_key("ts-key")[1])
    config = write_config(tmp_path, {
        "upstreams": {"fx": {"url": start_fixture(procs, "http", "ts-oauth")}},
        "auth": {"oauth": {"issuer": server.issuer, "audience": url, "scopes": ["mcp:read"]}}})
    procs.append(triad := Proc([*TRIAD, "serve", "-c", str(config), "--port", str(port), "--log-level", "DEBUG"],
                               env={"TRIAD_TEST_MARK": marker("triad")}))
    triad.wait_for(r"upstream \S+ ready")
    done = await anyio.run_process([node_bin(), str(NODE_DIR / "oauth_client.mjs"), url, "echo", '{"text": "hi"}'],
                                   check=False)
    assert done.returncode == 0, done.stderr.decode()
    answer = json.loads(done.stdout.decode().strip().splitlines()[-1])
    assert answer["authorized"] is True
    assert "echo" in answer["tools"] and answer["result"]["content"][0]["text"] == "hi"
