"""An MCP server that requires OAuth (the SDK's server auth pieces: protected resource metadata, the 401 challenge,
the bearer middleware), accepting JWT access tokens of one authorization server for its own URL (PyJWT against
the server's JWKS). Its one tool, `whoami`, answers with the subject of the token the call came with and the
token's `jti`, so a test sees whose token and which token reached it.

    python oauth_upstream.py --issuer URL --port N     prints `READY <port>` on stderr, then `TOKEN <jti>` per call

`--advertise URL`: the authorization server its protected resource metadata names (default: the issuer), e.g.
the issuer with a trailing slash, as older SDK servers render it (this one renders it as given).
"""

from __future__ import annotations

import argparse
import socket
import sys

import anyio
import jwt
import uvicorn
from mcp.server.auth.middleware.auth_context import get_access_token
from mcp.server.auth.provider import AccessToken
from mcp.server.auth.settings import AuthSettings
from mcp.server.mcpserver import MCPServer
from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.routing import Route

SCOPE = "mcp:read"


class JwtVerifier:
    def __init__(self, issuer: str, audience: str) -> None:
        self._issuer, self._audience = issuer, audience
        self._keys = jwt.PyJWKClient(f"{issuer}/jwks")

    async def verify_token(self, token: str) -> AccessToken | None:
        try:
            key = await anyio.to_thread.run_sync(self._keys.get_signing_key_from_jwt, token)
            claims = jwt.decode(token, key.key, algorithms=["RS256"], audience=self._audience, issuer=self._issuer)
        except jwt.PyJWTError:
            return None
        return AccessToken(token=token, client_id=str(claims.get("client_id", "")), subject=claims.get("sub"),
                           scopes=str(claims.get("scope", "")).split(), expires_at=claims.get("exp"),
                           resource=self._audience, claims=claims)


def build(issuer: str, url: str) -> MCPServer:
    server = MCPServer("oauth-upstream", token_verifier=JwtVerifier(issuer, url),
                       auth=AuthSettings(issuer_url=issuer, resource_server_url=url, required_scopes=[SCOPE]))

    @server.tool()
    def whoami() -> str:
        """The subject of the access token this call came with."""
        token = get_access_token()
        claims = (token.claims or {}) if token is not None else {}
        print(f"TOKEN {claims.get('jti')}", file=sys.stderr, flush=True)
        return f"{claims.get('sub')} {claims.get('jti')}"

    return server


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--issuer", required=True)
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--advertise")
    parser.add_argument("mark", nargs="?", help="a marker for the test run's process list (ignored)")
    args = parser.parse_args()
    url = f"http://127.0.0.1:{args.port}/mcp"
    app = build(args.issuer, url).streamable_http_app(host="127.0.0.1")
    if args.advertise is not None:
        document = {"resource": url, "authorization_servers": [args.advertise], "scopes_supported": [SCOPE],
                    "bearer_methods_supported": ["header"]}

        async def metadata(_request: Request) -> JSONResponse:
            return JSONResponse(document)

        app.router.routes.insert(0, Route("/.well-known/oauth-protected-resource/mcp", metadata))
    sock = socket.socket()
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind(("127.0.0.1", args.port))
    sock.listen(128)  # listening before READY is said
    print(f"READY {args.port}", file=sys.stderr, flush=True)
    anyio.run(uvicorn.Server(uvicorn.Config(app, log_level="warning", timeout_graceful_shutdown=2)).serve, [sock])


if __name__ == "__main__":
    main()
