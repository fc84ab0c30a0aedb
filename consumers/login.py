"""`triad login UPSTREAM`: one authorization by a person, for an upstream with `auth` (grant authorization_code).

It forgets the stored tokens, connects to the upstream as the daemon does (`initialize`, then a list, which is
what an upstream guards if it lets `initialize` through), and so goes through the upstream's 401: discovery,
registration, the authorization URL shown by `show`, the code on the loopback redirect, the token request. The
tokens end up in the upstream's token file, where the daemon finds them.
"""

from __future__ import annotations

from pathlib import Path

from mcp import ClientSession

from consumers._credentials import CredentialUse
from consumers._token_store import TokenFile
from consumers.config import UpstreamConfig
from consumers.oauth_client import Asker, token_store
from consumers.transports import open_transport

__all__ = ["LoginError", "login"]


class LoginError(Exception):
    """Why a login could not be done or kept; the message names no token."""


async def login(name: str, config: UpstreamConfig, show: Asker, user: str | None = None) -> Path:
    """Authorize Triad at upstream `name` (for `user`, with `auth: per_user`); the file the tokens are kept in."""
    auth = config.auth
    if auth is None:
        raise LoginError(f"upstream {name!r} has no auth block: it needs no login")
    if auth.grant != "authorization_code":
        raise LoginError(f"upstream {name!r} uses grant {auth.grant}: Triad gets its tokens itself, no login")
    if auth.token_store is None:
        raise LoginError("this config has no file, so there is no state directory to keep the tokens in")
    if user is not None and auth.mode != "per_user":
        raise LoginError(f"upstream {name!r} is not per-user: its one credential is Triad's (login without --client)")
    store = token_store(auth, user)
    await store.forget_tokens()
    async with open_transport(name, config, None, auth=CredentialUse(user=user, ask=show)) as (read, write, _link), \
            ClientSession(read, write) as session:
        await session.initialize()
        await session.list_tools()
    if await store.get_tokens() is None:
        raise LoginError(f"upstream {name!r} did not ask for authorization (it answered without a token)")
    assert isinstance(store, TokenFile)
    return store.path
