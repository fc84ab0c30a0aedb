"""Who is calling: the identity every request carries down the call path.

Over HTTP the exposer maps a bearer token to a configured client; over stdio the client is the one named by
`--client` (default: `local`, with owner rights). An identity is hashable, so per-client views are cached by it.
"""

from __future__ import annotations

import hmac
from dataclasses import dataclass

from gateway.config import TriadConfig

LOCAL_CLIENT = "local"


@dataclass(frozen=True, slots=True)
class Identity:
    client_id: str
    agent: str | None = None
    provider: str | None = None
    model: str | None = None
    groups: tuple[str, ...] = ()
    owner: bool = False


LOCAL = Identity(LOCAL_CLIENT, owner=True)


def identity_for(config: TriadConfig, client_id: str | None) -> Identity:
    """The identity of a configured client; the default `local` client is an owner unless configured otherwise."""
    if client_id is None:
        client_id = LOCAL_CLIENT
    client = config.clients.get(client_id)
    if client is None:
        if client_id == LOCAL_CLIENT:
            return LOCAL
        raise KeyError(client_id)
    return Identity(client_id, client.agent, client.provider, client.model, client.groups, client.owner)


def identity_for_token(config: TriadConfig, token: str) -> Identity | None:
    """Compare against every configured token in constant time (no early exit that would leak which matched)."""
    found: Identity | None = None
    presented = token.encode()
    for client_id, client in config.clients.items():
        if client.token is None:
            continue
        if hmac.compare_digest(presented, client.token.get_secret_value().encode()) and found is None:
            found = identity_for(config, client_id)
    return found


def requires_token(config: TriadConfig) -> bool:
    """HTTP requires a bearer token as soon as any client has one configured."""
    return any(client.token is not None for client in config.clients.values())
