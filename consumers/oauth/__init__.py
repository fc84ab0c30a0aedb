"""Triad as an OAuth client of protected upstreams: the SDK's OAuth provider with Triad's rules, credentials per
upstream and per user, the token store, the loopback redirect, and the pending authorization redirects.
"""

from consumers.oauth._asking import Asker, link_asker
from consumers.oauth._client import UpstreamOAuth
from consumers.oauth._credentials import Credentials, CredentialUse, UserAuthorization
from consumers.oauth._redirects import CALLBACK_PREFIX, Answer, Redirects, state_owner
from consumers.oauth._token_store import TokenFile, token_store

__all__ = [
    "CALLBACK_PREFIX",
    "Answer",
    "Asker",
    "CredentialUse",
    "Credentials",
    "Redirects",
    "TokenFile",
    "UpstreamOAuth",
    "UserAuthorization",
    "link_asker",
    "state_owner",
    "token_store",
]
