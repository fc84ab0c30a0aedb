"""TODO"""

from exposers.auth._routes import challenge, metadata_routes
from exposers.auth._tokens import KeysUnavailable, TokenGate, TokenRejected

__all__ = [
    "KeysUnavailable",
    "TokenGate",
    "TokenRejected",
    "challenge",
    "metadata_routes",
]
