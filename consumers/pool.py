"""The pool: every configured upstream, keyed by name, started concurrently, changed live on reload.

Ownership: the daemon creates the pool and calls `start(task_group)` with its root task group; each upstream's
owner task runs there, so one slow or failing upstream never delays the others. `apply(config)` makes a reload's
diff: an upstream whose connection settings did not change keeps its session (and child process) and takes the
new call settings at once; a changed one is started anew and swapped in when it is ready (the old one serves
until then); a removed one takes no new calls, finishes its in-flight calls within the grace period, then
closes. `stop()` asks every owner task to close its session (which ends stdio children and their trees).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping
from typing import Protocol

import anyio
from anyio.abc import TaskGroup
from pydantic import SecretStr

from consumers._json import JSONObject
from consumers.child_groups import ChildGroups
from consumers.config import UpstreamConfig
from consumers.lifecycle import UpstreamState
from consumers.log_fields import log_fields
from consumers.masking import SecretMask
from consumers.oauth import UserAuthorization
from consumers.relay import ClientOrigin
from consumers.transports import TlsContext
from consumers.upstream import Upstream

logger = logging.getLogger("triad.pool")

RETIRE_GRACE = 30.0
"""How long a removed or replaced upstream may finish its in-flight calls before it is closed."""


def connection_key(config: UpstreamConfig, cwd: str | None) -> tuple[object, ...]:
    """What a live connection depends on; other settings (timeouts, tool filters) apply without reconnecting."""
    def secrets(values: Mapping[str, SecretStr]) -> tuple[tuple[str, str], ...]:
        return tuple(sorted((k, v.get_secret_value()) for k, v in values.items()))

    return (config.kind, config.command, config.args, secrets(config.env), cwd, config.url, secrets(config.headers),
            config.protocol, config.session_mode, config.roots, config.auth, config.tls)


class Fleet(Protocol):
    """What the pool needs of the whole config (`gateway.config.TriadConfig` is one)."""

    def enabled_upstreams(self) -> Mapping[str, UpstreamConfig]: ...

    def resolve_cwd(self, upstream: UpstreamConfig) -> str | None: ...

    def secret_mask(self) -> SecretMask: ...


class UpstreamPool:
    def __init__(self, config: Fleet, on_change: Callable[[Upstream], None],
                 retire_grace: float = RETIRE_GRACE, groups: ChildGroups | None = None) -> None:
        self._on_change = on_change
        self._groups = groups
        """Where this run records its stdio children's process groups (`consumers.child_groups`)."""
        self._retire_grace = retire_grace
        self._task_group: TaskGroup | None = None
        self._upstreams: dict[str, Upstream] = {}
        self._pending: dict[str, Upstream] = {}
        """Replacements started by a reload, swapped in when ready."""
        self._tls = TlsContext()
        """One TLS context for every upstream's HTTPS connections, made when the first needs it."""
        self.on_updated: Callable[[str, str], None] = lambda _upstream, _uri: None
        """Told (upstream, raw URI) when a resource some client subscribed to changed (the exposer sets it)."""
        self.on_task_status: Callable[[str, JSONObject, ClientOrigin | None], None] = \
            lambda _upstream, _params, _origin: None
        """Told (upstream, params) of each task status an upstream pushes (the exposer sets it)."""
        self.on_own_updated: Callable[[str, str, ClientOrigin], None] = lambda _upstream, _uri, _origin: None
        """Told (upstream, raw URI, client) when a client's own upstream session says a resource changed."""
        self.for_users = UserAuthorization()
        """Where per-user authorizations come back and their tokens are kept (the daemon fills it in)."""
        for name, up in config.enabled_upstreams().items():
            self._upstreams[name] = self._wired(Upstream(name, up, config.resolve_cwd(up), self._changed,
                                                         self._updated, self._tls, config.secret_mask(),
                                                         self._groups))

    @property
    def upstreams(self) -> Mapping[str, Upstream]:
        return self._upstreams

    @property
    def all_modern(self) -> bool:
        """Every upstream speaks 2026-07-28 (none asks its client mid-call)."""
        return all(upstream.modern for upstream in self._upstreams.values())

    def get(self, name: str) -> Upstream | None:
        return self._upstreams.get(name)

    async def start(self, task_group: TaskGroup) -> None:
        """Start every upstream's owner task in `task_group`; returns once each takes requests (connecting goes on
        in the background)."""
        self._task_group = task_group
        for upstream in self._upstreams.values():
            await self._run(upstream)

    async def _run(self, upstream: Upstream) -> None:
        assert self._task_group is not None, "the pool was not started"
        await self._task_group.start(upstream.run, name=f"upstream:{upstream.name}")

    async def apply(self, config: Fleet) -> dict[str, list[str]]:
        """Make the reload's diff; returns what happened, by kind, for the log."""
        wanted = config.enabled_upstreams()
        diff: dict[str, list[str]] = {"kept": [], "updated": [], "replaced": [], "added": [], "removed": []}
        for name in list(self._upstreams):
            if name not in wanted:
                diff["removed"].append(name)
                self._retire(self._upstreams.pop(name), "removed by a config reload")
        for name in list(self._pending):
            if name not in wanted:
                self._pending.pop(name).stop()
        for name, up in wanted.items():
            cwd = config.resolve_cwd(up)
            current = self._pending.get(name) or self._upstreams.get(name)
            if current is not None and connection_key(current.config, current.cwd) == connection_key(up, cwd):
                diff["kept" if current.config == up else "updated"].append(name)
                current.config = up
                current.child.mask = config.secret_mask()
                continue
            fresh = self._wired(Upstream(name, up, cwd, self._changed, self._updated, self._tls, config.secret_mask(),
                                         self._groups))
            if name in self._pending:
                self._pending.pop(name).stop()
            if name in self._upstreams and self._upstreams[name].state is UpstreamState.READY:
                self._pending[name] = fresh  # the old connection serves until the new one is ready
                diff["replaced"].append(name)
            else:
                if name in self._upstreams:
                    self._retire(self._upstreams[name], "replaced by a config reload")
                    diff["replaced"].append(name)
                else:
                    diff["added"].append(name)
                self._upstreams[name] = fresh
            await self._run(fresh)
        # keep the configured order: names are assigned in config order
        self._upstreams = {name: self._upstreams[name] for name in wanted if name in self._upstreams}
        return diff

    def _updated(self, upstream: str, uri: str) -> None:
        self.on_updated(upstream, uri)

    def _wired(self, upstream: Upstream) -> Upstream:
        upstream.on_task_status = lambda name, params, origin: self.on_task_status(name, params, origin)
        upstream.on_own_updated = lambda name, uri, origin: self.on_own_updated(name, uri, origin)
        upstream.credentials.for_users = self.for_users
        return upstream

    def _changed(self, upstream: Upstream) -> None:
        pending = self._pending.get(upstream.name)
        if pending is upstream and upstream.state is UpstreamState.READY:
            del self._pending[upstream.name]
            old = self._upstreams[upstream.name]
            self._retire(old, "replaced by a config reload")
            self._upstreams[upstream.name] = upstream
            assert self._task_group is not None
            upstream.take_subscriptions(old, self._task_group)
            logger.info("upstream %s: new connection settings are live", upstream.name,
                        extra=log_fields(upstream.name, "replaced"))
        if upstream is self._upstreams.get(upstream.name):
            self._on_change(upstream)

    def _retire(self, upstream: Upstream, reason: str) -> None:
        assert self._task_group is not None
        self._task_group.start_soon(upstream.retire, reason, self._retire_grace, name=f"retire:{upstream.name}")

    async def wait_settled(self, margin: float = 0.0) -> None:
        """Until every upstream has connected or failed once, or the slowest upstream's `connect_timeout`
        (+ `margin`) ran out: each attempt is bounded by its own, this bounds the wait as a whole."""
        longest = max((up.config.connect_timeout for up in self._upstreams.values()), default=0.0)
        with anyio.move_on_after(longest + margin):
            for upstream in list(self._upstreams.values()):
                await upstream.settled.wait()

    async def drain(self, grace: float, reason: str) -> None:
        """Every upstream takes no new calls; calls in flight may finish within `grace` seconds, and the rest are
        answered with an error naming `reason`; then every upstream closes. Returns when all that is done."""
        async with anyio.create_task_group() as tg:
            for upstream in [*self._upstreams.values(), *self._pending.values()]:
                tg.start_soon(upstream.retire, reason, grace, name=f"drain:{upstream.name}")

    def stop(self) -> None:
        for upstream in [*self._upstreams.values(), *self._pending.values()]:
            upstream.stop()

