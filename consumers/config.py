"""The configuration of one upstream (`upstreams.<name>` in the YAML), and the value types it shares with the
rest of the config: durations and wire strings.

These models belong to the consumers (they say how to reach and treat an upstream); `gateway.config` assembles
them into the whole file's model, validates it and names the line of every error. Frozen pydantic models, as every
part of the config.
"""

from __future__ import annotations

import re
from typing import Annotated, Literal

from pydantic import BaseModel, BeforeValidator, ConfigDict, Field, SecretStr, field_validator, model_validator

from consumers._json import JSON, JSONObject
from consumers.sandbox import SandboxConfig

DEFAULT_UPSTREAM_TIMEOUT = 60.0
DEFAULT_CONNECT_TIMEOUT = 30.0
"""Connecting, `initialize` and listing the catalog of an upstream, apart from the deadline of its calls."""
DEFAULT_MAX_CLIENT_SESSIONS = 100
"""Per upstream with `sessions: per_client`: a bound on upstream sessions (stdio: child processes) open at once."""
DEFAULT_MAX_CALL_TIME = 600.0
"""The hard cap on one call whose deadline keeps being pushed back by progress notifications."""
DEFAULT_PING_INTERVAL = 15.0
"""How often an idle upstream is pinged; a missed ping means the connection is gone and is re-opened."""

_DURATION = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*(ms|s|m|h)?\s*$")
_UNIT_SECONDS = {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0, None: 1.0}


def parse_duration(value: JSON) -> float:
    """`30s`, `500ms`, `2m`, `1h`, or a bare number of seconds -> seconds."""
    if isinstance(value, bool):
        raise ValueError("not a duration (use e.g. 30s, 500ms, 2m)")
    if isinstance(value, int | float):
        seconds = float(value)
    elif isinstance(value, str) and (match := _DURATION.match(value)):
        seconds = float(match.group(1)) * _UNIT_SECONDS[match.group(2)]
    else:
        raise ValueError("not a duration (use e.g. 30s, 500ms, 2m)")
    if seconds <= 0:
        raise ValueError("a duration must be greater than zero")
    return seconds


Duration = Annotated[float, BeforeValidator(parse_duration)]


def _stringify(value: JSON) -> JSON:
    """env and header values may be written as numbers or booleans in YAML/JSON; the wire wants strings."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int | float):
        return str(value)
    return value


WireString = Annotated[SecretStr, BeforeValidator(_stringify)]


def _sandbox_off(value: JSON) -> JSON:
    """`sandbox: false` opts an upstream out of `sandbox_default:`."""
    return {"enabled": False} if value is False else value



class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class ToolAnnotationsOverride(_Model):
    """The spec's tool annotations; each one set here replaces the upstream's, the others stay as it sent them."""

    title: str | None = None
    readOnlyHint: bool | None = None  # the spec's spelling
    destructiveHint: bool | None = None
    idempotentHint: bool | None = None
    openWorldHint: bool | None = None


class ToolOverride(_Model):
    """`tools.overrides.<raw tool name>`: how Triad presents one upstream tool (applied in the registry, so plans,
    policy, pins, search and the console see the tool so changed).

    `name` replaces the raw name in the exposed one (prefixing and clash rules apply as to any tool);
    `hide_arguments` leaves arguments out of the input schema and drops them from calls; `fixed_arguments` are left
    out of the schema too and sent on every call whatever the client sends."""

    name: str | None = Field(default=None, min_length=1, max_length=128, pattern=r"^[A-Za-z0-9_-]+$")
    title: str | None = None
    description: str | None = None
    annotations: ToolAnnotationsOverride | None = None
    hide_arguments: tuple[str, ...] = ()
    fixed_arguments: JSONObject = {}


class ToolFilter(_Model):
    """`*` globs on the upstream's raw tool names: include first (empty = all), then exclude; and per raw tool
    name, how it is presented (`overrides`)."""

    include: tuple[str, ...] = ()
    exclude: tuple[str, ...] = ()
    overrides: dict[str, ToolOverride] = {}

    @model_validator(mode="after")
    def _renames_unique(self) -> ToolFilter:
        seen: dict[str, str] = {}
        for raw, override in self.overrides.items():
            if override.name is None:
                continue
            other = seen.setdefault(override.name.lower(), raw)
            if other != raw:
                raise ValueError(f"overrides {other!r} and {raw!r} both rename to {override.name!r}")
        return self


class CircuitBreakerConfig(_Model):
    """After `failures` consecutive failed calls, calls fail fast for `cooldown`, then one trial call goes."""

    failures: int = Field(default=5, ge=1)
    cooldown: Duration = 30.0


AUTHORIZATION_WAIT = 300.0
"""How long an OAuth authorization may wait for a person (to come back on the loopback redirect): a connection
that is asking one is not held to its upstream's `connect_timeout` meanwhile."""
DEFAULT_REDIRECT_PORT = 33418
"""The loopback port Triad listens on for an authorization code (the redirect URI it registers is
`http://127.0.0.1:<port>/callback`); a fixed default, so that a registration stays valid across runs."""


class UpstreamAuthConfig(_Model):
    """`upstreams.<name>.auth`: Triad as an OAuth 2.1 client of an upstream that requires it (MCP authorization).

    The authorization server is discovered from the upstream's 401 (protected resource metadata, then
    authorization server metadata); Triad registers by, in this order, the pre-registered `client_id`, a client ID
    metadata document (`client_metadata_url`) where the server supports them, or dynamic registration.
    `grant: authorization_code` needs a person once (`triad login <upstream>`, or `browser`); the tokens are kept
    in Triad's state directory and refreshed. `grant: client_credentials` needs `client_id` and `client_secret`."""

    type: Literal["oauth"] = "oauth"
    mode: Literal["gateway", "per_user"] = "gateway"
    """`gateway`: one credential, Triad's, for every client. `per_user`: each client identity (each OAuth subject)
    calls with a token of its own, obtained by its own authorization (URL-mode elicitation to its client, or
    `triad login <upstream> --client <id>`); Triad's credential only lists the upstream's catalog. Needs
    `sessions: per_client` (the default for streamable HTTP), and callers Triad tells apart (no `anonymous:`, and
    some authentication: `gateway.config.TriadConfig` refuses the rest)."""
    grant: Literal["authorization_code", "client_credentials"] = "authorization_code"
    client_id: str | None = Field(default=None, min_length=1)
    client_secret: SecretStr | None = None
    token_endpoint_auth_method: Literal["client_secret_basic", "client_secret_post", "none"] | None = None
    """With a pre-registered `client_id`. Unset: `client_secret_basic` with a secret, `none` without."""
    issuer: str | None = None
    """The authorization server the pre-registered credentials belong to: they are never sent to another."""
    client_metadata_url: str | None = None
    """An HTTPS URL with a path, where Triad's client ID metadata document is served (it is Triad's client_id
    where the authorization server supports such documents)."""
    client_name: str = "Triad"
    scopes: tuple[str, ...] = ()
    """With grant client_credentials: the scopes asked for. (An authorization asks for what the upstream's
    challenge or metadata name, as the MCP spec orders.)"""
    redirect_port: int = Field(default=DEFAULT_REDIRECT_PORT, ge=1, le=65535)
    browser: str | None = None
    """A command the daemon runs with the authorization URL as its last argument when it has to ask a person
    (no token, or a scope step-up). Unset: the daemon does not ask; the upstream is down until `triad login`."""
    token_store: str | None = None
    """The file the tokens are kept in (mode 0600). Unset: `<state_dir>/<config name>.tokens/<upstream>.json`,
    filled in when the config is loaded; in memory only for a config that has no file."""

    @model_validator(mode="after")
    def _check_grant(self) -> UpstreamAuthConfig:
        if self.grant == "client_credentials" and (self.client_id is None or self.client_secret is None):
            raise ValueError("grant client_credentials needs client_id and client_secret")
        if self.grant == "client_credentials" and self.token_endpoint_auth_method == "none":
            raise ValueError("grant client_credentials authenticates the client: token_endpoint_auth_method "
                             "cannot be none")
        if self.scopes and self.grant != "client_credentials":
            raise ValueError("scopes apply to grant client_credentials only (an authorization asks for the scopes "
                             "the upstream names)")
        if self.client_secret is not None and self.client_id is None:
            raise ValueError("client_secret needs client_id")
        if self.client_metadata_url is not None and not re.match(r"^https://[^/\s]+/\S", self.client_metadata_url):
            raise ValueError("client_metadata_url must be an https URL with a path")
        return self


class UpstreamTlsConfig(_Model):
    """`upstreams.<name>.tls`: how Triad verifies an HTTPS upstream and proves itself to it, on every connection to
    it (the SDK's session and GET stream, and the direct path). Verification is always on: the upstream's
    certificate must chain to `ca_bundle` (unset: the system's trust store, or `SSL_CERT_FILE`/`SSL_CERT_DIR`)."""

    ca_bundle: str | None = Field(default=None, min_length=1)
    """A PEM file of the CA certificates to trust instead of the system's."""
    client_cert: str | None = Field(default=None, min_length=1)
    """A PEM file with Triad's client certificate (and its key, unless `client_key` is given): mutual TLS."""
    client_key: str | None = Field(default=None, min_length=1)

    @model_validator(mode="after")
    def _check_pair(self) -> UpstreamTlsConfig:
        if self.client_key is not None and self.client_cert is None:
            raise ValueError("client_key needs client_cert")
        return self

    def files(self) -> dict[str, str]:
        """The files this block names, by setting (those that are set)."""
        return {key: value for key in ("ca_bundle", "client_cert", "client_key")
                if (value := getattr(self, key)) is not None}


Transport = Literal["stdio", "streamable-http", "sse"]

_TRANSPORT_SPELLINGS: dict[str, Transport] = {
    "stdio": "stdio",
    "sse": "sse",
    "http": "streamable-http",
    "streamable-http": "streamable-http",
    "streamable_http": "streamable-http",
    "streamablehttp": "streamable-http",
}
"""Spellings used by Claude Desktop, Claude Code, Cursor and VS Code for the same three transports."""


class UpstreamConfig(_Model):
    command: str | None = None
    args: tuple[str, ...] = ()
    env: dict[str, WireString] = {}
    cwd: str | None = None
    url: str | None = None
    headers: dict[str, WireString] = {}
    auth: UpstreamAuthConfig | None = None
    """OAuth towards this upstream (streamable HTTP only)."""
    tls: UpstreamTlsConfig | None = None
    """TLS towards an HTTPS upstream (streamable HTTP and SSE); unset: the system's trust store, no client
    certificate."""
    transport: Transport | None = None
    timeout: Duration = DEFAULT_UPSTREAM_TIMEOUT
    connect_timeout: Duration = DEFAULT_CONNECT_TIMEOUT
    max_call_time: Duration = DEFAULT_MAX_CALL_TIME
    ping_interval: Duration = DEFAULT_PING_INTERVAL
    circuit_breaker: CircuitBreakerConfig = CircuitBreakerConfig()
    protocol: Literal["handshake", "auto"] = "handshake"
    """`auto`: ask `server/discover` and speak 2026-07-28 where the upstream offers it, else `initialize`."""
    enabled: bool = True
    tools: ToolFilter = ToolFilter()
    sessions: Literal["shared", "per_client"] | None = None
    """`per_client`: each downstream session gets an upstream session of its own, declaring that client's
    capabilities and roots; `shared`: one session, Triad's. Unset: `per_client` for streamable HTTP (one
    `initialize` more per client), `shared` for stdio and SSE (a child process or stream per client)."""
    max_sessions: int = Field(default=DEFAULT_MAX_CLIENT_SESSIONS, ge=1)
    """With `per_client`: how many client sessions this upstream may have open at once."""
    roots: tuple[str, ...] | None = None
    """With `shared`: the roots Triad declares to the upstream (file:// URIs). Unset: Triad declares no roots
    (it never hands one client's roots to another)."""
    sandbox: Annotated[SandboxConfig | None, BeforeValidator(_sandbox_off)] = None
    """A stdio child in bubblewrap (`consumers.sandbox`). Unset: `sandbox_default:`, if any; `false`: none."""

    @property
    def sandboxed(self) -> SandboxConfig | None:
        return self.sandbox if self.sandbox is not None and self.sandbox.enabled else None

    @property
    def session_mode(self) -> Literal["shared", "per_client"]:
        if self.sessions is not None:
            return self.sessions
        return "per_client" if self.kind == "streamable-http" else "shared"

    @model_validator(mode="before")
    @classmethod
    def _accept_client_spellings(cls, data: JSON) -> JSON:
        if not isinstance(data, dict):
            return data
        data = dict(data)
        if "type" in data and "transport" not in data:
            data["transport"] = data.pop("type")
        if isinstance(data.get("transport"), str):
            spelled = data["transport"].strip().lower()
            data["transport"] = _TRANSPORT_SPELLINGS.get(spelled, data["transport"])
        if "disabled" in data and "enabled" not in data and isinstance(data["disabled"], bool):
            data["enabled"] = not data.pop("disabled")
        return data

    @model_validator(mode="after")
    def _check_target(self) -> UpstreamConfig:
        if self.sandboxed is not None and self.command is None:
            raise ValueError("sandbox: applies to stdio upstreams (a command) only")
        if self.tls is not None and self.kind == "stdio":
            raise ValueError("tls: applies to HTTP upstreams (streamable-http, sse) only")
        if self.auth is not None and self.kind != "streamable-http":
            raise ValueError("auth: OAuth is supported on streamable-http upstreams only")
        if self.auth is not None and self.auth.mode == "per_user" and self.session_mode != "per_client":
            raise ValueError("auth: mode per_user needs sessions: per_client (one upstream session per client)")
        if self.auth is not None and any(key.lower() == "authorization" for key in self.headers):
            raise ValueError("auth: give either auth or an Authorization header, not both")
        if self.command is not None:
            if not self.command.strip():
                raise ValueError("command is empty")
            return self
        if self.url is None:
            raise ValueError("needs either a command (stdio) or a url (streamable-http, sse)")
        if self.transport == "stdio":
            raise ValueError("transport stdio needs a command")
        return self

    @field_validator("url")
    @classmethod
    def _check_url(cls, url: str | None) -> str | None:
        # The URL itself is not repeated in the message: it may carry a token.
        if url is not None and not re.match(r"^https?://[^/\s]+", url):
            raise ValueError("not an http(s) URL")
        return url

    @property
    def kind(self) -> Transport:
        """A command means stdio; else the explicit transport; else by URL suffix (`/sse` -> sse)."""
        if self.command is not None:
            return "stdio"
        if self.transport is not None:
            return self.transport
        path = (self.url or "").split("?", 1)[0].rstrip("/")
        return "sse" if path.endswith("/sse") else "streamable-http"
