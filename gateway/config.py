"""The configuration: one frozen pydantic model per YAML block, and `load_config` that reports every problem.

Runtime code receives `TriadConfig`, never dicts. Secrets (env values, headers, tokens) are `SecretStr` and are
never printed: error messages name the key path and line, not the value.
"""

from __future__ import annotations

import ipaddress
import os
import re
import sys
from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import (
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    PrivateAttr,
    SecretStr,
    ValidationError,
    field_validator,
    model_validator,
)

from gateway._config_errors import describe_error, format_problem, hide_values
from gateway._yaml import LineMap, Loaded, YamlProblem, load_with_lines
from gateway.errors import ConfigError

DEFAULT_PORT = 8765
DEFAULT_UPSTREAM_TIMEOUT = 60.0
DEFAULT_CONNECT_TIMEOUT = 30.0
"""Connecting, `initialize` and listing the catalog of an upstream, apart from the deadline of its calls."""
DEFAULT_MAX_CLIENT_SESSIONS = 100
"""Per upstream with `sessions: per_client`: a bound on upstream sessions (stdio: child processes) open at once."""
DEFAULT_SHUTDOWN_GRACE = 10.0
"""On SIGTERM, how long calls in flight may run on before each is answered with an error."""
DEFAULT_MAX_CALL_TIME = 600.0
"""The hard cap on one call whose deadline keeps being pushed back by progress notifications."""
DEFAULT_PING_INTERVAL = 15.0
"""How often an idle upstream is pinged; a missed ping means the connection is gone and is re-opened."""
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

_DURATION = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*(ms|s|m|h)?\s*$")
_UNIT_SECONDS = {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0, None: 1.0}


def parse_duration(value: Any) -> float:
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


def _stringify(value: Any) -> Any:
    """env and header values may be written as numbers or booleans in YAML/JSON; the wire wants strings."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int | float):
        return str(value)
    return value


WireString = Annotated[SecretStr, BeforeValidator(_stringify)]


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


class ToolFilter(_Model):
    """`*` globs on the upstream's raw tool names: include first (empty = all), then exclude."""

    include: tuple[str, ...] = ()
    exclude: tuple[str, ...] = ()


class CircuitBreakerConfig(_Model):
    """After `failures` consecutive failed calls, calls fail fast for `cooldown`, then one trial call goes."""

    failures: int = Field(default=5, ge=1)
    cooldown: Duration = 30.0


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

    @property
    def session_mode(self) -> Literal["shared", "per_client"]:
        if self.sessions is not None:
            return self.sessions
        return "per_client" if self.kind == "streamable-http" else "shared"

    @model_validator(mode="before")
    @classmethod
    def _accept_client_spellings(cls, data: Any) -> Any:
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


class NamingConfig(_Model):
    separator: str = Field(default="__", min_length=1, pattern=r"^[A-Za-z0-9_-]+$")
    prefix: Literal["always", "conditional", "never"] = "conditional"
    max_length: int = Field(default=DEFAULT_MAX_NAME_LENGTH, ge=8, le=SPEC_MAX_NAME_LENGTH)


class ToolRule(_Model):
    """One policy layer's rule: `*` globs, exact names, `group:<name>`. An absent or empty allow allows all."""

    allow: tuple[str, ...] | None = None
    deny: tuple[str, ...] = ()
    also_allow: tuple[str, ...] = ()


class PolicyConfig(_Model):
    profile: ToolRule | None = None
    profiles: dict[str, ToolRule] = {}
    use: str | None = None
    agents: dict[str, ToolRule] = {}
    providers: dict[str, ToolRule] = {}
    groups: dict[str, ToolRule] = {}
    gateway_deny: tuple[str, ...] = ()
    gateway_allow: tuple[str, ...] = ()
    """Names lifted from the built-in deny list that applies when listening on a non-loopback address."""
    owner_only: tuple[str, ...] = ()
    tool_groups: dict[str, tuple[str, ...]] = {}
    provider_map: dict[str, str] = {}
    """clientInfo.name -> provider, for clients whose config does not fix `provider` (added to the defaults)."""

    @model_validator(mode="after")
    def _check_profile(self) -> PolicyConfig:
        if self.use is not None:
            if self.profile is not None:
                raise ValueError("use either profile or use (a named profile), not both")
            if self.use not in self.profiles:
                raise ValueError(f"use: no profile named {self.use!r} under policy.profiles")
        return self

    def active_profile(self) -> ToolRule | None:
        return self.profiles[self.use] if self.use is not None else self.profile


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


class TriadConfig(_Model):
    listen: ListenConfig = ListenConfig()
    upstreams: dict[str, UpstreamConfig] = {}
    naming: NamingConfig = NamingConfig()
    clients: dict[str, ClientConfig] = {}
    anonymous: str | None = None
    """The client that HTTP requests without a token act as, when tokens are configured (default: refused)."""
    policy: PolicyConfig = PolicyConfig()
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


def load_config(path: str | Path) -> TriadConfig:
    """Read, interpolate and validate a config file. Raises ConfigError listing every problem."""
    path = Path(path)
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise ConfigError([f"{path}: cannot read ({exc.strerror})"]) from None
    return parse_config(text, source=path)


def parse_config(text: str, *, source: Path | None = None, environ: dict[str, str] | None = None) -> TriadConfig:
    environ = {PYTHON_VARIABLE: sys.executable, **(os.environ if environ is None else environ)}
    try:
        loaded = load_with_lines(text, environ)
    except YamlProblem as exc:
        raise ConfigError([format_problem((), exc.message, exc.line)]) from None
    try:
        config = _validate(loaded, source)
    except ConfigError as exc:
        raise ConfigError([hide_values(problem, loaded.variables) for problem in exc.problems]) from None
    config._variables = {name: SecretStr(value) for name, value in loaded.variables.items()}
    return config


def _validate(loaded: Loaded, source: Path | None) -> TriadConfig:
    data, lines = loaded.data, loaded.lines
    if data is None:  # an editor's truncate-then-write caught half-way looks just like this
        raise ConfigError([format_problem((), "the file is empty (only whitespace or comments); a config with no "
                                              "settings is written `{}`", None)])
    messages = [format_problem(p.path, p.message, p.line) for p in loaded.problems]
    if not isinstance(data, dict):
        raise ConfigError([*messages, format_problem((), "the top level must be a mapping of keys", lines.get(()))])
    if "mcpServers" in data:
        lines.update({("upstreams", *k[1:]): v for k, v in lines.items() if k[:1] == ("mcpServers",)})
    try:
        config = TriadConfig.model_validate({**data, "source": source})
    except ValidationError as exc:
        errors = exc.errors(include_input=False, include_url=False)
        messages += [describe_error(error, lines, TriadConfig) for error in errors]
        config = None
    messages += _semantic_problems(config, lines) if config is not None else []
    if messages:
        raise ConfigError(messages)
    assert config is not None
    return config


def _semantic_problems(config: TriadConfig, lines: LineMap) -> list[str]:
    """Checks that span several keys (pydantic validates one value at a time)."""
    problems = []
    if config.anonymous is not None and config.anonymous not in config.clients:
        problems.append(format_problem(("anonymous",), f"no client named {config.anonymous!r} under clients",
                                lines.get(("anonymous",))))
    from gateway.hooks import HookConfigError, check_hook  # hooks import config types; imported here

    for index, spec in enumerate(config.hooks):
        try:
            check_hook(spec.name, spec.options)
        except HookConfigError as exc:
            problems.append(format_problem(("hooks", index), str(exc), lines.get(("hooks", index))))
    raw_seen: dict[str, str] = {}
    for name in config.upstreams:
        key = re.sub(r"[^A-Za-z0-9_-]", "-", name.strip()).lower()
        if key in raw_seen:
            problems.append(
                format_problem(
                    ("upstreams", name),
                    f"same name as upstream {raw_seen[key]!r} once sanitised for tool names ({key!r})",
                    lines.get(("upstreams", name)),
                )
            )
        raw_seen.setdefault(key, name)
    problems += _prefix_problems(config, lines)
    for name, upstream in config.enabled_upstreams().items():
        cwd = config.resolve_cwd(upstream)
        if cwd is not None and not Path(cwd).is_dir():  # spawning would name it as a missing command
            where = ("upstreams", name, "cwd")
            problems.append(format_problem(where, f"working directory not found: {cwd}", lines.get(where)))
    tokens: dict[str, str] = {}
    for client_id, client in config.clients.items():
        if client.token is None:
            continue
        secret = client.token.get_secret_value()
        if not secret:
            where = ("clients", client_id, "token")
            problems.append(format_problem(where, "token is empty", lines.get(where)))
        elif secret in tokens:
            problems.append(
                format_problem(
                    ("clients", client_id, "token"),
                    f"same token as client {tokens[secret]!r}",
                    lines.get(("clients", client_id, "token")),
                )
            )
        tokens.setdefault(secret, client_id)
    return problems


def _prefix_problems(config: TriadConfig, lines: LineMap) -> list[str]:
    """Exposed names are `<upstream><separator><tool>`: no upstream's prefix may be read as (part of) another's,
    or a rule written for `fs__*` would also reach the tools of an upstream named `fs__evil` (or `fs_`)."""
    if config.naming.prefix == "never":
        return []
    from gateway.naming import sanitize_server_names  # naming imports this module's types

    separator = config.naming.separator
    problems = []
    heads: dict[str, str] = {}
    for name, part in sanitize_server_names(list(config.upstreams)).items():
        where = ("upstreams", name)
        head = (part + separator).lower()
        if separator.lower() in part.lower():
            problems.append(format_problem(where, f"the name contains the naming separator {separator!r}, so its "
                                           "tools would look like another upstream's; rename it or change "
                                           "naming.separator", lines.get(where)))
        elif clash := next((other for other, h in heads.items() if h.startswith(head) or head.startswith(h)), None):
            problems.append(format_problem(where, f"its tools' prefix {head!r} overlaps {heads[clash]!r} of "
                                           f"upstream {clash!r}, so a pattern for one also matches the other's "
                                           "tools; rename one of them", lines.get(where)))
        heads[name] = head
    return problems
