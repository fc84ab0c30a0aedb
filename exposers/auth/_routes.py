"""What an OAuth client learns from Triad over HTTP: the protected resource metadata (RFC 9728) and the
`WWW-Authenticate` challenges of 401 and 403 (RFC 6750, as the MCP authorization spec uses them).

The metadata is served at the root form, `/.well-known/oauth-protected-resource`, and at the path-inserted form
of the canonical resource URI (`/.well-known/oauth-protected-resource/mcp` for `https://host/mcp`); clients try the
URL of the challenge, then the path form, then the root. Every URL here is built from `auth.oauth.audience`, never
from the request's Host. With OAuth off, both routes answer 404.
"""

from __future__ import annotations

from urllib.parse import urlsplit, urlunsplit

from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from consumers import JSONObject
from exposers.auth._tokens import TokenRejected
from gateway.calls import Dispatcher
from gateway.config import OAuthConfig

__all__ = ["WELL_KNOWN", "challenge", "metadata_routes", "metadata_url", "protected_resource_metadata",
           "public_document"]

WELL_KNOWN = "/.well-known/oauth-protected-resource"
AUTHORIZATION_SERVER_PATHS = ("/.well-known/oauth-authorization-server", "/.well-known/openid-configuration")
CORS = {"Access-Control-Allow-Origin": "*", "Access-Control-Allow-Methods": "GET, OPTIONS",
        "Access-Control-Allow-Headers": "mcp-protocol-version, content-type", "Access-Control-Max-Age": "86400"}
"""For the public metadata documents only: any origin may read them, without credentials."""


def public_document(path: str) -> bool:
    """Whether `path` is one of the public metadata documents served with CORS."""
    return any(path == prefix or path.startswith(prefix + "/") for prefix in (WELL_KNOWN, *AUTHORIZATION_SERVER_PATHS))


def metadata_url(oauth: OAuthConfig) -> str:
    """The path-inserted metadata URL of the canonical resource URI (RFC 9728 §3.1)."""
    parts = urlsplit(oauth.audience)
    path = parts.path.rstrip("/")
    return urlunsplit((parts.scheme, parts.netloc, f"{WELL_KNOWN}{path}", "", ""))


def protected_resource_metadata(oauth: OAuthConfig) -> JSONObject:
    document: JSONObject = {
        "resource": oauth.audience,
        "authorization_servers": list(oauth.authorization_servers or (oauth.issuer,)),
        "bearer_methods_supported": ["header"],
        "resource_name": "Triad MCP gateway",
    }
    # 2026-07-28: offline_access belongs to the authorization server, not in a resource's scopes.
    if scopes := [scope for scope in oauth.scopes if scope != "offline_access"]:
        document["scopes_supported"] = scopes
    return document


def _quoted(value: str) -> str:
    return value.replace("\\", "\\\\").replace('"', '\\"')


def challenge(oauth: OAuthConfig, refused: TokenRejected | None) -> Response:
    """401 (no token, or `invalid_token`) or 403 (`insufficient_scope`) with the challenge MCP clients follow.
    Without a token the challenge carries no error code (RFC 6750 §3.1)."""
    params = [f'resource_metadata="{metadata_url(oauth)}"']
    scopes = " ".join(scope for scope in oauth.scopes if scope != "offline_access")
    if scopes:
        params.append(f'scope="{_quoted(scopes)}"')
    body: dict[str, str] = {"error": "invalid_request", "error_description": "a bearer token is required"}
    status = 401
    if refused is not None:
        params += [f'error="{refused.error}"', f'error_description="{_quoted(refused.message)}"']
        body = {"error": refused.error, "error_description": refused.message}
        status = refused.status
    return JSONResponse(body, status_code=status, headers={"WWW-Authenticate": "Bearer " + ", ".join(params)})


def metadata_routes(dispatcher: Dispatcher) -> list[Route]:
    """The root and path-inserted metadata routes; they read the config in force at each request."""

    async def root(request: Request) -> Response:
        return await document(request, "")

    async def suffixed(request: Request) -> Response:
        return await document(request, "/" + request.path_params["path"])

    async def not_an_authorization_server(request: Request) -> Response:
        return _public(request, JSONResponse({"error": "not found"}, status_code=404))

    async def document(request: Request, path: str) -> Response:
        return _public(request, _document(dispatcher.config.auth.oauth, path))

    return [Route(WELL_KNOWN, endpoint=root, methods=["GET", "OPTIONS"]),
            Route(WELL_KNOWN + "/{path:path}", endpoint=suffixed, methods=["GET", "OPTIONS"]),
            *(Route(path, endpoint=not_an_authorization_server, methods=["GET", "OPTIONS"])
              for path in AUTHORIZATION_SERVER_PATHS),
            *(Route(path + "/{path:path}", endpoint=not_an_authorization_server, methods=["GET", "OPTIONS"])
              for path in AUTHORIZATION_SERVER_PATHS)]


def _public(request: Request, response: Response) -> Response:
    """A public document with CORS; a preflight (OPTIONS) gets the CORS headers alone."""
    if request.method == "OPTIONS":
        return Response(status_code=204, headers=CORS)
    response.headers.update(CORS)
    return response


def _document(oauth: OAuthConfig | None, path: str) -> Response:
    if oauth is None or (path and urlsplit(oauth.audience).path.rstrip("/") != path.rstrip("/")):
        return JSONResponse({"error": "not found"}, status_code=404)
    return JSONResponse(protected_resource_metadata(oauth), headers={"Cache-Control": "max-age=300"})
