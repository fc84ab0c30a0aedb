"""Who is calling: the identity every request carries down the call path.

Over HTTP the exposer maps a bearer token to a configured client; over stdio the client is the one named by
`--client` (default: `local`, with owner rights). An identity is hashable, so per-client views are cached by it.
"""

from __future__ import annotations

import dataclasses
import hmac
from collections.abc import Mapping, Sequence

from gateway.config import TriadConfig
from gateway.errors import InvalidRequest, UnknownSession
from policy import Identity, search_cost

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
    "MAX_PATTERN_LENGTH",
    "MAX_RUN_LIST_PATTERNS",
    "MAX_RUN_LIST_WILDCARDS",
    "MAX_RUN_LIST_WORK",
    "Identity",
    "RunListTooLarge",
    "bounded_run_list",
    "bounded_run_list_work",
    "credential_owner",
    "identity_for",
    "identity_for_token",
    "infer_provider",
    "narrowed",
    "requires_token",
    "run_list",
    "same_principal",
    "subject_of",
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
    """HTTP requires a bearer token as soon as any client has one configured, or OAuth is on."""
    return config.authenticates()


def same_principal(a: Identity, b: Identity) -> bool:
    """Whether two identities are the same caller as far as a session is concerned: the same client and, for OAuth
    callers, the same issuer and subject (`principal` is not part of an identity's equality)."""
    return a.client_id == b.client_id and a.principal == b.principal


def subject_of(identity: Identity) -> str | None:
    """The OAuth subject (`sub`) of the caller's access token (None: the caller has none), as the audit records it."""
    return identity.principal[1] if identity.principal is not None else None


def credential_owner(identity: Identity) -> str:
    """Whose upstream credentials a request uses with `auth: per_user`: the client's, and for an OAuth caller those
    of its issuer and subject (two subjects of one OAuth client never share a token)."""
    if identity.principal is None:
        return identity.client_id
    issuer, subject = identity.principal
    return f"{identity.client_id} {issuer} {subject}"


def infer_provider(config: TriadConfig, client_name: str | None) -> str | None:
    if not client_name:
        return None
    name = client_name.strip().lower()
    return config.policy.provider_map.get(name) or DEFAULT_PROVIDER_MAP.get(name)


MAX_RUN_LIST_PATTERNS = 512
"""Patterns in one run-level list. A judgment call: far more than a client names by hand or an agent framework
generates for one run (one pattern per tool of a large fleet still fits), far less than it takes to stall a view."""
MAX_PATTERN_LENGTH = 256
"""Characters in one pattern: an exposed name has at most 128 (the spec's limit), `upstream:raw` a little more."""
MAX_RUN_LIST_WILDCARDS = 64
"""Stars in one run-level list's globs that are neither exact names nor a prefix `x*` nor a suffix `*x` (those are
dict lookups): each costs a segment search per form of every tool's name that a view or a call decides on."""

MAX_RUN_LIST_WORK = 64_000
"""Stars in a run-level list's inner globs times the tools a view narrowed by it decides on (a view of 1,000 tools
takes the 64 stars `MAX_RUN_LIST_WILDCARDS` allows, one of 5,000 tools 12): each inner glob is matched against
every such tool (in RE2, `policy.ToolIndex`), where exact names, prefixes and suffixes are looked up once."""


class RunListTooLarge(InvalidRequest):
    """A run-level list over `MAX_RUN_LIST_PATTERNS` patterns, with a pattern over `MAX_PATTERN_LENGTH`, or with
    more than `MAX_RUN_LIST_WILDCARDS` stars in its inner globs (`policy.search_cost`).

    A list comes from a request's `_meta["triad/tools"]`, a session's `X-Triad-Tools` header or its `tools` query
    parameter, so its size is the client's choice: it is bounded here, before anything compiles or caches it."""


def bounded_run_list(patterns: Sequence[str], source: str) -> tuple[str, ...]:
    """The patterns as a tuple (a view key), or `RunListTooLarge` naming `source` and the limit it exceeds."""
    if len(patterns) > MAX_RUN_LIST_PATTERNS:
        raise RunListTooLarge(f"{source} has {len(patterns)} patterns; the limit is {MAX_RUN_LIST_PATTERNS}")
    for pattern in patterns:
        if len(pattern) > MAX_PATTERN_LENGTH:
            raise RunListTooLarge(f"{source} has a pattern of {len(pattern)} characters; the limit is "
                                  f"{MAX_PATTERN_LENGTH}")
    cost = sum(map(search_cost, patterns))
    if cost > MAX_RUN_LIST_WILDCARDS:
        raise RunListTooLarge(f"{source} has {cost} stars in globs other than exact names, prefixes (x*) and "
                              f"suffixes (*x); the limit is {MAX_RUN_LIST_WILDCARDS}")
    return tuple(patterns)


def bounded_run_list_work(patterns: Sequence[str], tools: int) -> None:
    """`RunListTooLarge` when deciding `patterns` for `tools` tools at once is over `MAX_RUN_LIST_WORK`."""
    stars = sum(map(search_cost, patterns))
    if stars * tools > MAX_RUN_LIST_WORK:
        raise RunListTooLarge(f"the run-level list has {stars} stars in globs other than exact names, prefixes (x*) "
                              f"and suffixes (*x), for {tools:,} tools: {stars * tools:,} star-tools; the limit is "
                              f"{MAX_RUN_LIST_WORK:,} (MAX_RUN_LIST_WORK); name tools or use prefixes and suffixes")


def run_list(value: str, source: str = "the run-level list") -> tuple[str, ...]:
    """`a, b*` -> ("a", "b*"); an empty value is an empty list, which denies everything. A list over the limits
    raises `RunListTooLarge`, naming `source` (the header or query parameter)."""
    return bounded_run_list([part.strip() for part in value.split(",") if part.strip()], source)


def with_provider(config: TriadConfig, identity: Identity, client_name: str | None) -> Identity:
    """`identity` with the provider its client's self-declared name implies, when its config fixes none."""
    if identity.provider is None and (provider := infer_provider(config, client_name)):
        return dataclasses.replace(identity, provider=provider)
    return identity


def narrowed(session: Identity, request: Identity) -> Identity:
    """A session's identity acting for one of its requests: narrowed by the run-level lists the request brings,
    never widened. The request must come from the session's own principal (the HTTP edge makes sure of that
    before a request reaches a session); anything else is refused here too, as an unknown session."""
    if not same_principal(request, session):
        raise UnknownSession
    extra = tuple(found for found in request.run_lists if found not in session.run_lists)
    return dataclasses.replace(session, run_lists=(*session.run_lists, *extra)) if extra else session
