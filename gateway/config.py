"""The configuration: one frozen pydantic model per YAML block (read and checked by `gateway.loading`).

Runtime code receives `TriadConfig`, never dicts. Secrets (env values, headers, tokens) are `SecretStr` and are
never printed: error messages name the key path and line, not the value.
"""

from __future__ import annotations

import ipaddress
from pathlib import Path
from typing import Any, Literal

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    PrivateAttr,
    SecretStr,
    model_validator,
)

from consumers.config import Duration, UpstreamConfig, parse_duration
from gateway._config_errors import hide_values
from policy.config import PolicyConfig, ToolRule

__all__ = ["ClientConfig", "Duration", "HookSpec", "ListenConfig", "NamingConfig", "PolicyConfig", "ToolRule",
           "TriadConfig", "UpstreamConfig", "is_loopback", "parse_duration"]
"""The whole file's model; the upstreams' and the policy's own models come from their packages, and reading a file
is `gateway.loading`."""

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


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class ListenConfig(_Model):
    host: str = "127.0.0.1"
    port: int = Field(default=DEFAULT_PORT, ge=0, le=65535)
    session_idle_timeout: Duration = Field(default=DEFAULT_SESSION_IDLE_TIMEOUT, gt=0)
    shutdown_grace: Duration = DEFAULT_SHUTDOWN_GRACE
    lean_path: bool = True
    """Serve the hot HTTP requests (calls, list pages) with Triad's direct handling of the transport work; off,
    every request goes through the SDK's server. Semantics are the same either way."""


class ConsoleConfig(_Model):
    """The web console at `/console` on the HTTP listener, for owner clients (sign-in with an owner's token)."""

    enabled: bool = False
    session_lifetime: Duration = 8 * 3600.0
    """How long a console sign-in lasts; a reload that changes or removes the owner's token ends it sooner."""


class NamingConfig(_Model):
    separator: str = Field(default="__", min_length=1, pattern=r"^[A-Za-z0-9_-]+$")
    prefix: Literal["always", "conditional", "never"] = "conditional"
    max_length: int = Field(default=DEFAULT_MAX_NAME_LENGTH, ge=8, le=SPEC_MAX_NAME_LENGTH)


class HookSpec(_Model):
    """One `hooks:` entry: a built-in name or a plugin `module:attr`, alone or as `{name: {options}}`."""

    name: str
    options: dict[str, Any] = {}

    @model_validator(mode="before")
    @classmethod
    def _accept_short_forms(cls, data: Any) -> Any:
        if isinstance(data, str):
            return {"name": data}
        if isinstance(data, dict) and len(data) == 1 and "name" not in data:
            [(name, options)] = data.items()
            return {"name": name, "options": options if options is not None else {}}
        return data


ToolsMode = Literal["all", "search"]


class SearchConfig(_Model):
    """Tool search (`gateway.search`): what a client in `search` mode lists, and how tools are ranked."""

    tools_mode: ToolsMode = "all"
    """The default for every client (a client's own `tools_mode` wins). `search`: `tools/list` holds the
    always-listed tools plus `search_tools` and `call_tool`; every other visible tool is found by search."""
    always_list: tuple[str, ...] = ()
    """Tools a search-mode client still lists (globs and groups, as in policy); policy still decides."""
    ranker: str = Field(default="bm25", pattern=r"^(bm25|[A-Za-z_][\w.]*:[A-Za-z_]\w*)$")
    """`bm25` (Triad's) or a plugin `module:attr`: a class or factory of a `gateway.search.Ranker`."""


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


class TriadConfig(_Model):
    listen: ListenConfig = ListenConfig()
    upstreams: dict[str, UpstreamConfig] = {}
    naming: NamingConfig = NamingConfig()
    clients: dict[str, ClientConfig] = {}
    anonymous: str | None = None
    """The client that HTTP requests without a token act as, when tokens are configured (default: refused)."""
    policy: PolicyConfig = PolicyConfig()
    search: SearchConfig = SearchConfig()
    hooks: tuple[HookSpec, ...] = ()
    min_ready: int = Field(default=1, ge=0)
    """`/readyz` answers 200 once this many upstreams are ready (or all of them, if there are fewer)."""
    page_size: int = Field(default=DEFAULT_PAGE_SIZE, ge=1, le=10_000)
    console: ConsoleConfig = ConsoleConfig()
    state_dir: str | None = None
    """Where Triad keeps state across restarts (the exposed-name ledger); relative to the config file, whose
    directory is the default."""
    source: Path | None = Field(default=None, exclude=True)
    _variables: dict[str, SecretStr] = PrivateAttr(default_factory=dict)
    """The environment values interpolated into this config, by variable name (see `hide_values`)."""

    @model_validator(mode="before")
    @classmethod
    def _accept_mcp_servers(cls, data: Any) -> Any:
        if isinstance(data, dict) and "mcpServers" in data:
            data = dict(data)
            servers = data.pop("mcpServers")
            if "upstreams" in data:
                raise ValueError("use either upstreams or mcpServers, not both")
            data["upstreams"] = servers
        return data

    def hide_values(self, message: str) -> str:
        """`message` with every environment value this config was built from replaced by its `${NAME}`."""
        return hide_values(message, {name: value.get_secret_value() for name, value in self._variables.items()})

    def enabled_upstreams(self) -> dict[str, UpstreamConfig]:
        return {name: up for name, up in self.upstreams.items() if up.enabled}

    def resolve_cwd(self, upstream: UpstreamConfig) -> str | None:
        """A relative `cwd` is taken relative to the config file, so a config works from any directory."""
        if upstream.cwd is None or self.source is None:
            return upstream.cwd
        return str((self.source.parent / upstream.cwd).resolve())
