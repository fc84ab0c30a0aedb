"""What Triad requires of an upstream's authorization server before it sends a person there, and how an error
names that server."""

from __future__ import annotations

from mcp.shared.auth import OAuthMetadata

from consumers.errors import UpstreamAuthorizationFailed


def server_name(metadata: OAuthMetadata | None, fallback: str) -> str:
    """The authorization server as an error names it: its issuer, else where it was looked for."""
    return str(metadata.issuer) if metadata is not None else fallback


def require_pkce(upstream: str, metadata: OAuthMetadata | None, fallback: str) -> None:
    """MCP authorization (2025-11-25, PKCE): a client MUST verify PKCE support from the authorization server's
    metadata, and MUST refuse to proceed when `code_challenge_methods_supported` is absent. Triad sends S256 only,
    so a list without it is refused as well (and so is a server without metadata: nothing says it supports PKCE).
    Checked before anyone is sent to authorize; `fallback`: where the server was looked for."""
    methods = metadata.code_challenge_methods_supported if metadata is not None else None
    if methods is not None and "S256" in methods:
        return
    seen = "absent" if methods is None else f"{methods!r}"
    raise UpstreamAuthorizationFailed(
        upstream, f"upstream {upstream!r}: authorization server {server_name(metadata, fallback)} does not list S256 "
        f"in code_challenge_methods_supported ({seen}): Triad does not authorize without PKCE")
