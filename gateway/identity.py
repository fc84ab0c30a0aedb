"""Who is calling: the identity every request carries down the call path.

Over HTTP the exposer maps a bearer token to a configured client; over stdio the client is the one named by
`--client` (default: `local`, with owner rights). An identity is hashable, so per-client views are cached by it.
"""

from __future__ import annotations

import dataclasses
import hmac
from collections.abc import Mapping

from gateway.config import TriadConfig
from gateway.errors import UnknownSession
from policy import Identity

LOCAL_CLIENT = "local"
DEFAULT_PROVIDER_MAP: Mapping[str, str] = {
    "claude-ai": "anthropic",
    "claude-code": "anthropic",
    "claude-desktop": "anthropic",
    "openai-mcp": "openai",
    "codex-mcp-client": "openai",
    "gemini-cli-mcp-client": "google",
    "grok": "xai",
}
"""clientInfo.name -> LLM provider, used when a client's config does not fix `provider`; `policy.provider_map`
adds to and overrides these."""

__all__ = [
    "LOCAL",
    "Identity",
    "identity_for",
    "identity_for_token",
    "infer_provider",
    "narrowed",
    "requires_token",
    "run_list",
    "with_provider",
]

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


def infer_provider(config: TriadConfig, client_name: str | None) -> str | None:
    if not client_name:
        return None
    name = client_name.strip().lower()
    return config.policy.provider_map.get(name) or DEFAULT_PROVIDER_MAP.get(name)


def run_list(value: str) -> tuple[str, ...]:
    """`a, b*` -> ("a", "b*"); an empty value is an empty list, which denies everything."""
    return tuple(part.strip() for part in value.split(",") if part.strip())


def with_provider(config: TriadConfig, identity: Identity, client_name: str | None) -> Identity:
    """`identity` with the provider its client's self-declared name implies, when its config fixes none."""
    if identity.provider is None and (provider := infer_provider(config, client_name)):
        return dataclasses.replace(identity, provider=provider)
    return identity


def narrowed(session: Identity, request: Identity) -> Identity:
    """A session's identity acting for one of its requests: narrowed by the run-level lists the request brings,
    never widened. The request must come from the session's own principal (the HTTP edge makes sure of that
    before a request reaches a session); anything else is refused here too, as an unknown session."""
    if request.client_id != session.client_id:
        raise UnknownSession
    extra = tuple(found for found in request.run_lists if found not in session.run_lists)
    return dataclasses.replace(session, run_lists=(*session.run_lists, *extra)) if extra else session
