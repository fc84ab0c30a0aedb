"""The configuration: one frozen pydantic model per YAML block (read and checked by `gateway.runtime`).

Runtime code receives `TriadConfig`, never dicts. Secrets (env values, headers, tokens) are `SecretStr` and are
never printed: error messages name the key path and line, not the value.
"""

from __future__ import annotations

import ipaddress
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, PrivateAttr, SecretStr, field_validator, model_validator

from consumers import JSON, JSONObject, SandboxConfig, SecretMask
from consumers.config import Duration, UpstreamConfig, parse_duration
from gateway.config._approval import ApprovalConfig
from gateway.config._auth import AuthConfig
from gateway.config._limits import LimitsConfig
from gateway.config._problems import hide_values, variables_mask
from policy.config import PolicyConfig, ToolRule

__all__ = [
    "STANDARD_STREAM",
    "AuthConfig",
    "ClientConfig",
    "ClusterConfig",
    "Duration",
    "HookSpec",
    "ListenConfig",
    "NamingConfig",
    "PolicyConfig",
    "ToolRule",
    "TriadConfig",
    "UpstreamConfig",
    "is_loopback",
    "parse_duration",
    "resolve_path",
]
"""The whole file's model; the upstreams' and the policy's own models come from their packages, and reading a file
is `gateway.runtime`."""

DEFAULT_PORT = 8765
DEFAULT_SHUTDOWN_GRACE = 10.0
"""On SIGTERM, how long calls in flight may run on before each is answered with an error."""
DEFAULT_PAGE_SIZE = 200
DEFAULT_SESSION_IDLE_TIMEOUT = 1800.0
"""How long a handshake-era HTTP session may go without a request before Triad forgets it."""
DEFAULT_MAX_NAME_LENGTH = 64
SPEC_MAX_NAME_LENGTH = 128
"""The MCP spec allows tool names up to 128 characters; LLM providers cap at 64, hence the default."""

PYTHON_VARIABLE = "TRIAD_PYTHON"
"""`${TRIAD_PYTHON}` in a config is the interpreter Triad runs on (unless the environment sets it): a stdio upstream
written in Python with Triad's dependencies then starts whatever the PATH, e.g. when Claude Desktop launches Triad
from `/` with a PATH that does not hold Triad's venv (config.example.yaml's demo upstream)."""

def is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


def is_wildcard(host: str) -> bool:
    """0.0.0.0 or :: (every interface): an address to listen on, not one another host can reach."""
    try:
        return ipaddress.ip_address(host.strip("[]")).is_unspecified
    except ValueError:
        return False


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class ListenConfig(_Model):
    host: str = "127.0.0.1"
    port: int = Field(default=DEFAULT_PORT, ge=0, le=65535)
    session_idle_timeout: Duration = Field(default=DEFAULT_SESSION_IDLE_TIMEOUT, gt=0)
    shutdown_grace: Duration = DEFAULT_SHUTDOWN_GRACE
    direct_path: bool = True
    """Serve the hot HTTP requests (calls, list pages) with Triad's direct handling of the transport work; off,
    every request goes through the SDK's server. Semantics are the same either way."""
    lean_path: bool | None = None
    """The old name of `direct_path`, still read (`triad check` says to rename it)."""
    allow_unauthenticated: bool = False
    """Serve off loopback with no client token and no `auth.oauth` (every caller then unauthenticated, and none of
    them an owner). Without it, `triad serve` refuses to listen off loopback unauthenticated."""
    public_url: str | None = Field(default=None, pattern=r"^https?://[^/?#\s]+/?$")
    """Where people reach this listener (scheme, host and port; behind a proxy, the proxy's): a user's own
    upstream authorization (`auth: per_user`) comes back to `<public_url>/oauth/callback/<upstream>`. Unset: the
    origin of `auth.oauth.audience`, else the listen address when it is loopback (else the loopback redirect)."""
    trusted_proxies: tuple[str, ...] = ()
    """Addresses (or networks, `10.0.0.0/8`) of reverse proxies whose `X-Forwarded-For` and `X-Forwarded-Proto`
    are believed: the caller's address is then the one the proxy names (what the failed-authentication throttle
    counts by). Default none: any local process could otherwise name any source it likes."""

    @field_validator("trusted_proxies")
    @classmethod
    def _addresses(cls, value: tuple[str, ...]) -> tuple[str, ...]:
        for entry in value:
            try:
                ipaddress.ip_network(entry, strict=False)
            except ValueError:
                raise ValueError(f"{entry!r} is not an IP address or network") from None
        return value

    @model_validator(mode="after")
    def _old_name(self) -> ListenConfig:
        if self.lean_path is not None:
            if "direct_path" in self.model_fields_set and self.direct_path != self.lean_path:
                raise ValueError("`lean_path` is the old name of `direct_path`: write only `direct_path`")
            object.__setattr__(self, "direct_path", self.lean_path)  # frozen: set once, while validating
        return self

class ConsoleConfig(_Model):
    """The web console at `/console` on the HTTP listener, for owner clients (sign-in with an owner's token)."""

    enabled: bool = False
    session_lifetime: Duration = 8 * 3600.0
    """How long a console sign-in lasts; a reload that changes or removes the owner's token ends it sooner."""


DEFAULT_RELOAD_SETTLE = 1.0
"""An in-place writer that pauses mid-file for less than this is never caught half-way (the reliability run saw
pauses of 0.4 s apply a partial file); a change takes at least this long to apply."""


class ReloadConfig(_Model):
    """`reload:`: how a changed config file is applied."""

    settle: Duration = Field(default=DEFAULT_RELOAD_SETTLE, gt=0, le=60)
    """A changed file is applied only when two readings this far apart agree."""


class NamingConfig(_Model):
    separator: str = Field(default="__", min_length=1, pattern=r"^[A-Za-z0-9_-]+$")
    prefix: Literal["always", "conditional", "never"] = "conditional"
    max_length: int = Field(default=DEFAULT_MAX_NAME_LENGTH, ge=8, le=SPEC_MAX_NAME_LENGTH)


class HookSpec(_Model):
    """One `hooks:` entry: a built-in name or a plugin `module:attr`, alone or as `{name: {options}}`."""

    name: str
    options: JSONObject = {}

    @model_validator(mode="before")
    @classmethod
    def _accept_short_forms(cls, data: JSON) -> JSON:
        if isinstance(data, str):
            return {"name": data}
        if isinstance(data, dict) and len(data) == 1 and "name" not in data:
            [(name, options)] = data.items()
            if options is not None and not isinstance(options, dict):
                raise ValueError(f"the options of hook {name!r} must be a mapping (`- {name}: {{key: value}}`), "
                                 f"or nothing (`- {name}`)")
            return {"name": name, "options": options if options is not None else {}}
        if isinstance(data, dict) and "name" not in data and all(isinstance(k, str) for k in data):
            raise ValueError(f"one hook per list entry: start each of {', '.join(map(repr, data))} with its own `- `")
        if not isinstance(data, dict):
            raise ValueError("a hook is a name (`- audit`) or a name with options (`- audit: {path: audit.jsonl}`)")
        return data


ToolsMode = Literal["all", "search"]


class SearchConfig(_Model):
    """Tool search (`gateway.search`): what a client in `search` mode lists, and how tools are ranked."""

    tools_mode: ToolsMode = "all"
    """The default for every client (a client's own `tools_mode` wins). `search`: `tools/list` holds the
    always-listed tools plus `search_tools` and `call_tool`; every other visible tool is found by search."""
    always_list: tuple[str, ...] = ()
    """Tools a search-mode client still lists (globs and groups, as in policy); policy still decides."""
    ranker: str = Field(default="hybrid", pattern=r"^(hybrid|bm25|[A-Za-z_][\w.]*:[A-Za-z_]\w*)$")
    """`hybrid` (Triad's default: BM25F and embeddings), `bm25` (BM25F alone) or a plugin `module:attr`: a class or
    factory of a `gateway.search.Ranker`."""


class ClientConfig(_Model):
    token: SecretStr | None = None
    agent: str | None = None
    provider: str | None = None
    model: str | None = None
    groups: tuple[str, ...] = ()
    owner: bool = False
    tools: ToolRule | None = None
    schema_profile: Literal["anthropic", "openai", "google", "xai"] | None = None
    """How the input schemas this client sees are normalised; by default, from its provider."""
    tools_mode: ToolsMode | None = None
    """`all` or `search` (see `SearchConfig`); unset: `search.tools_mode`."""
    always_list: tuple[str, ...] = ()
    """Tools this client lists in search mode, besides `search.always_list`."""
    limits: LimitsConfig = LimitsConfig()
    """This client's quotas, key by key over the top-level `limits` (`gateway.config._limits`)."""


class ClusterConfig(_Model):
    """Several replicas sharing state in Redis (`gateway.cluster`); without this block nothing is shared and Redis
    is never imported. Changes take effect on restart only."""

    redis: str = Field(pattern=r"^(rediss?|unix)://\S+$")
    """Where the shared state lives, e.g. `redis://127.0.0.1:6379/0` (a password goes in the URL, via `${VAR}`)."""
    replica_id: str = Field(pattern=r"^[A-Za-z0-9_-]{1,40}$")
    """This replica's name, unique in the cluster: it is sealed into session ids' records and round states."""
    secret_key: SecretStr = Field(min_length=32)
    """Encrypts what Triad stores in Redis that is secret, and keys the identity hashes stored there; the same on
    every replica (e.g. `${TRIAD_CLUSTER_KEY}`, 32 characters or more)."""
    address: str | None = Field(default=None, pattern=r"^https?://[^/\s]+$")
    """How the other replicas reach this one (to forward a request it owns), e.g. `http://10.0.0.5:8765`; default:
    the address it listens on."""
    heartbeat: Duration = Field(default=1.0, gt=0)
    """How often this replica tells Redis it is alive; one missing for three beats counts as gone."""
    drain_delay: Duration = Field(default=2.0, gt=0)
    """On SIGTERM, how long the replica answers `/readyz` with 503 (and is gone from the cluster's view) before it
    stops listening: the load balancer's health check takes it out first, so no request meets a closing socket.
    Calls in flight then get `listen.shutdown_grace` as on one replica."""


class TriadConfig(_Model):
    listen: ListenConfig = ListenConfig()
    upstreams: dict[str, UpstreamConfig] = {}
    sandbox_default: SandboxConfig | None = None
    """The `sandbox:` of every stdio upstream that has none of its own (`sandbox: false` opts one out)."""
    naming: NamingConfig = NamingConfig()
    clients: dict[str, ClientConfig] = {}
    anonymous: str | None = None
    """The client that HTTP requests without a token act as, when tokens are configured (default: refused)."""
    cluster: ClusterConfig | None = None
    """Scale-out: shared state in Redis (see `ClusterConfig`)."""
    auth: AuthConfig = AuthConfig()
    """How HTTP callers prove who they are besides the clients' static tokens (OAuth 2.1 access tokens)."""
    policy: PolicyConfig = PolicyConfig()
    approval: ApprovalConfig = ApprovalConfig()
    """Calls that wait for a person's yes (`gateway.config._approval`)."""
    search: SearchConfig = SearchConfig()
    hooks: tuple[HookSpec, ...] = ()
    min_ready: int = Field(default=1, ge=0)
    """`/readyz` answers 200 once this many upstreams are ready (or all of them, if there are fewer)."""
    page_size: int = Field(default=DEFAULT_PAGE_SIZE, ge=1, le=10_000)
    console: ConsoleConfig = ConsoleConfig()
    reload: ReloadConfig = ReloadConfig()
    limits: LimitsConfig = LimitsConfig()
    """Every identity's quotas, unless its client's `limits` say otherwise (`gateway.config._limits`)."""
    state_dir: str | None = None
    """Where Triad keeps state across restarts (the exposed-name ledger); relative to the config file, whose
    directory is the default."""
    source: Path | None = Field(default=None, exclude=True)
    _variables: dict[str, SecretStr] = PrivateAttr(default_factory=dict)
    """The environment values interpolated into this config, by variable name (see `hide_values`)."""
    _mask: SecretMask | None = PrivateAttr(default=None)
    _lines: dict[tuple[str | int, ...], int] = PrivateAttr(default_factory=dict)
    """The line of every key path in the file it was read from (`line_of`), for warnings found after loading."""

    @model_validator(mode="before")
    @classmethod
    def _accept_mcp_servers(cls, data: JSON) -> JSON:
        if isinstance(data, dict) and "mcpServers" in data:
            data = dict(data)
            servers = data.pop("mcpServers")
            if "upstreams" in data:
                raise ValueError("use either upstreams or mcpServers, not both")
            data["upstreams"] = servers
        return data

    @model_validator(mode="after")
    def _oauth_clients_exist(self) -> TriadConfig:
        oauth = self.auth.oauth
        if oauth is not None:
            for value, client in oauth.clients.items():
                if client not in self.clients:
                    raise ValueError(f"auth.oauth.clients.{value} names {client!r}, which is not in clients:")
        return self

    @model_validator(mode="after")
    def _approvers_exist(self) -> TriadConfig:
        for index, approver in enumerate(self.approval.approvers):
            if approver not in self.clients:
                raise ValueError(f"approval.approvers.{index} names {approver!r}, which is not in clients:")
        console = self.approval.console_rules()
        if console and not self.console.enabled:
            raise ValueError(f"approval.rules.{console[0]}.ask: {self.approval.rules[console[0]].ask} needs the "
                             "console (console.enabled: true), where approvers answer")
        if console and not self.approval.approvers and not any(c.owner for c in self.clients.values()):
            raise ValueError(f"approval.rules.{console[0]}.ask: {self.approval.rules[console[0]].ask} needs someone "
                             "to answer in the console: an owner client, or approval.approvers")
        return self

    @model_validator(mode="after")
    def _per_user_needs_distinct_callers(self) -> TriadConfig:
        """A per-user credential is keyed by the caller's identity (`gateway.identity.credential_owner`): an
        identity several people share would hand the first one's upstream account to all of them."""
        shared = self.shared_identity()
        for name, upstream in self.upstreams.items():
            if upstream.auth is not None and upstream.auth.mode == "per_user" and shared is not None:
                raise ValueError(f"upstreams.{name}.auth.mode: per_user needs callers Triad can tell apart, but "
                                 f"{shared}; use mode: gateway, or remove that shared identity")
        return self

    def shared_identity(self) -> str | None:
        """Why some callers of this config share one identity (None: every caller is one client, or one OAuth
        subject): `anonymous:`, or no authentication at all (every HTTP caller is `local`)."""
        if not self.authenticates():
            return ("no client has a token and auth.oauth is not set (authentication), so every HTTP caller is "
                    "the client 'local'")
        if self.anonymous is not None:
            return f"anonymous: makes every caller without a token the client {self.anonymous!r}"
        return None

    @model_validator(mode="after")
    def _cluster_address_known(self) -> TriadConfig:
        missing = self.cluster_address_missing(self.listen.host)
        if missing is not None:
            raise ValueError(missing)
        return self

    def authenticates(self) -> bool:
        """HTTP callers prove who they are: some client has a token, or OAuth is on."""
        return self.auth.oauth is not None or any(client.token is not None for client in self.clients.values())

    def unauthenticated_off_loopback(self, host: str) -> str | None:
        """Why listening on `host` is refused (or, with `listen.allow_unauthenticated`, what it means): off loopback
        with no authentication, every network caller would be anonymous."""
        if is_loopback(host) or self.authenticates():
            return None
        if self.listen.allow_unauthenticated:
            return (f"listening on {host} with no client token and no auth.oauth (listen.allow_unauthenticated): "
                    "every network caller is unauthenticated and none is an owner (/admin and the console refuse "
                    "them)")
        return (f"listening on {host} (off loopback) needs authentication: give a client a token, or set "
                "auth.oauth, or set listen.allow_unauthenticated: true to serve every network caller as a "
                "non-owner")

    def cluster_address_missing(self, host: str) -> str | None:
        """Why listening on `host` cannot work in this config's cluster: a wildcard address announced to the other
        replicas would have them forward to themselves."""
        if self.cluster is None or self.cluster.address is not None or not is_wildcard(host):
            return None
        return (f"cluster.address is required when listening on {host} (every interface): the other replicas "
                f"reach this one there, e.g. cluster.address: http://10.0.0.5:8765")

    def line_of(self, path: tuple[str | int, ...]) -> int | None:
        """The line of `path` (or of its nearest enclosing key) in the file this config was read from."""
        for end in range(len(path), 0, -1):
            if (line := self._lines.get(path[:end])) is not None:
                return line
        return None

    def hide_values(self, message: str) -> str:
        """`message` with every secret of this config hidden (`secret_mask`)."""
        return hide_values(message, self.secret_mask())

    def secret_mask(self) -> SecretMask:
        """The mask of every secret this config holds: each `${VAR}` value (shown as `${VAR}`), and each value of a
        secret field however it was written (`SecretMask.of_fields`: tokens, env, headers, client secrets...)."""
        if self._mask is None:
            variables = {name: value.get_secret_value() for name, value in self._variables.items()}
            self._mask = variables_mask(variables).with_values(SecretMask.of_fields(self))
        return self._mask

    def limits_of(self, client_id: str) -> LimitsConfig:
        """The quotas of `client_id`'s identities: its own `limits` over the top-level ones."""
        client = self.clients.get(client_id)
        return client.limits.over(self.limits) if client is not None else self.limits

    def enabled_upstreams(self) -> dict[str, UpstreamConfig]:
        return {name: self._with_sandbox(self._with_tls_files(self._with_token_store(name, up)))
                for name, up in self.upstreams.items() if up.enabled}

    def resolve_path(self, value: str) -> str:
        """Every path the config holds (state_dir, tls files, cwd, token_store, hook options such as `audit.path`
        and `pin_definitions.state`) means the same from any working directory: see `resolve_path`."""
        return resolve_path(value, self.source)

    def state_directory(self) -> Path | None:
        """Where state across restarts is kept: `state_dir` (relative to the config file), else the config
        file's directory; None for a config that has no file."""
        if self.source is None:
            return None
        return Path(self.resolve_path(self.state_dir if self.state_dir is not None else "."))

    def _with_token_store(self, name: str, upstream: UpstreamConfig) -> UpstreamConfig:
        """An OAuth upstream's tokens go to `<state dir>/<config name>.tokens/<upstream>.json` unless its
        `auth.token_store` says otherwise (relative to the config file)."""
        directory = self.state_directory()
        if upstream.auth is None or directory is None or self.source is None:
            return upstream
        store = str(directory / f"{self.source.stem}.tokens" / f"{name}.json") if upstream.auth.token_store is None \
            else self.resolve_path(upstream.auth.token_store)
        return upstream.model_copy(update={"auth": upstream.auth.model_copy(update={"token_store": store})})

    def _with_sandbox(self, upstream: UpstreamConfig) -> UpstreamConfig:
        """`sandbox_default` where a stdio upstream has no `sandbox`; `read` and `write` relative to the config
        file, as every path is."""
        sandbox = upstream.sandbox
        if sandbox is None and upstream.kind == "stdio":
            sandbox = self.sandbox_default
        if sandbox is None or not sandbox.enabled:
            return upstream if sandbox is None else upstream.model_copy(update={"sandbox": None})
        paths = {key: tuple(self.resolve_path(p) for p in getattr(sandbox, key)) for key in ("read", "write")}
        return upstream.model_copy(update={"sandbox": sandbox.model_copy(update=paths)})

    def _with_tls_files(self, upstream: UpstreamConfig) -> UpstreamConfig:
        """`tls` files given as relative paths are relative to the config file, as every path is."""
        if upstream.tls is None or self.source is None:
            return upstream
        files = {key: self.resolve_path(value) for key, value in upstream.tls.files().items()}
        return upstream.model_copy(update={"tls": upstream.tls.model_copy(update=files)})

    def resolve_cwd(self, upstream: UpstreamConfig) -> str | None:
        """A relative `cwd` is taken relative to the config file, so a config works from any directory."""
        if upstream.cwd is None or self.source is None:
            return upstream.cwd
        return str(Path(self.resolve_path(upstream.cwd)).resolve())


STANDARD_STREAM = "-"
"""A path option written `-` names a standard stream (`audit: {path: "-"}` is stderr), never a file."""


def resolve_path(value: str, source: Path | None) -> str:
    """The one rule for a path in the config: `~` expanded, and a relative path taken relative to the directory of
    the config file `source` (not the working directory: Claude Desktop starts Triad from `/`). The directory is
    the one the file is named in, not its symlink's target's, so a Kubernetes ConfigMap (`config.yaml ->
    ..data/config.yaml`) keeps its paths when `..data` is swapped. `-` and a config without a file stay as written."""
    if value == STANDARD_STREAM or source is None:
        return value
    return str(source.absolute().parent / Path(value).expanduser())
