"""`triad login UPSTREAM`: one authorization by a person, for an upstream with `auth` (grant authorization_code).

It forgets the stored tokens, connects to the upstream as the daemon does (`initialize`, then a list, which is
what an upstream guards if it lets `initialize` through), and so goes through the upstream's 401: discovery,
registration, the authorization URL shown by `show`, the code on the loopback redirect, the token request. The
tokens end up in the upstream's token file, where the daemon finds them (a user's, with `cluster:`, in Redis).
"""

from __future__ import annotations

from mcp import ClientSession

from consumers.config import UpstreamConfig
from consumers.oauth import Asker, Credentials, CredentialUse, TokenFile, UserAuthorization, token_store
from consumers.transports import open_transport

__all__ = ["LoginError", "login"]


class LoginError(Exception):
    """Why a login could not be done or kept; the message names no token."""


async def login(name: str, config: UpstreamConfig, show: Asker, user: str | None = None,
                for_users: UserAuthorization | None = None) -> str:
    """Authorize Triad at upstream `name` (for `user`, with `auth: per_user`); where the tokens are kept.
    `for_users.stores`: where users' tokens are kept when not in files (the cluster's Redis)."""
    auth = config.auth
    if auth is None:
        raise LoginError(f"upstream {name!r} has no auth block: it needs no login")
    if auth.grant != "authorization_code":
        raise LoginError(f"upstream {name!r} uses grant {auth.grant}: Triad gets its tokens itself, no login")
    if auth.token_store is None:
        raise LoginError("this config has no file, so there is no state directory to keep the tokens in")
    if user is not None and auth.mode != "per_user":
        raise LoginError(f"upstream {name!r} is not per-user: its one credential is Triad's (login without --client)")
    credentials = Credentials(name)
    if for_users is not None and user is not None:
        credentials.for_users = UserAuthorization(stores=for_users.stores)  # the loopback redirect, always
    stores = credentials.for_users.stores if user is not None else None
    store = stores(name, user) if stores is not None and user is not None else token_store(auth, user)
    await store.forget_tokens()
    use = CredentialUse(credentials, user, show)
    async with open_transport(name, config, None, auth=use) as (read, write, _link), \
            ClientSession(read, write) as session:
        await session.initialize()
        await session.list_tools()
    if await store.get_tokens() is None:
        raise LoginError(f"upstream {name!r} did not ask for authorization (it answered without a token)")
    return f"{store.path} (mode 0600)" if isinstance(store, TokenFile) else "the cluster's Redis (encrypted)"
