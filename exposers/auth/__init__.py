"""Inbound OAuth 2.1 (MCP authorization): access tokens checked as JWTs against the authorization server's keys or by
introspection, mapped to Triad identities, and the protected-resource metadata routes.
"""

from exposers.auth._routes import challenge, metadata_routes, public_document
from exposers.auth._tokens import KeysUnavailable, MalformedAuthorization, TokenGate, TokenRejected, bearer_token

__all__ = [
    "KeysUnavailable",
    "MalformedAuthorization",
    "TokenGate",
    "TokenRejected",
    "bearer_token",
    "challenge",
    "metadata_routes",
    "public_document",
]
