"""Joining a replica's own parts to the cluster: what it tells the others, and what it does when they tell it.

- A reload asked of this replica (`POST /admin/reload`, SIGHUP) is announced; the others reload the shared config
  file too (each also watches it, and a file whose content did not change is applied again harmlessly).
- An upstream whose lists changed here is announced with a digest of what it now offers; a replica whose own
  connection to that upstream offers something else re-lists it, and its clients get `list_changed` from their own
  views. Announcing only a digest that is new to this replica keeps two replicas from re-listing each other forever.
- A resource update an upstream sent here is passed on; each replica tells its own subscribers.
- Per-user upstream tokens (`auth: per_user`) are kept in the vault (`vault_tokens`), so every replica uses them.
"""

from __future__ import annotations

import hashlib
import json
import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Protocol

from consumers import Upstream, UpstreamPool
from gateway.cluster import Cluster, Event, vault_stores
from gateway.runtime._reload import Reloader

logger = logging.getLogger("triad.cluster")


class _Notified(Protocol):
    def resource_updated(self, upstream: str, raw: str) -> None: ...


def catalog_digest(upstream: Upstream) -> str | None:
    catalog = upstream.catalog
    if catalog is None:
        return None
    offered = [catalog.tools, catalog.resources, catalog.templates, catalog.prompts]
    return hashlib.sha256(json.dumps(offered, sort_keys=True, default=str).encode()).hexdigest()[:32]


@dataclass(frozen=True)
class Joined:
    """What the pool's callbacks must call with `cluster:` (the daemon sets each once)."""

    changed: Callable[[Upstream], None]
    """Besides the dispatcher, on each upstream change: announce a new offer."""
    resource_updated: Callable[[str, str], None]
    """Instead of the notifier alone, on a resource update: tell this replica's subscribers, and the others."""


def join(cluster: Cluster, pool: UpstreamPool, notifier: _Notified, reloader: Reloader | None) -> Joined:
    """Wire the events, and keep per-user upstream tokens in the vault; returns what the pool's callbacks must
    call (`Joined`)."""
    pool.for_users.stores = vault_stores(cluster.vault)
    known: dict[str, str] = {}
    """Upstream -> the digest of its offer last seen here or announced by another replica."""
    asked: set[str] = set()
    """Upstreams re-listed because another replica said so: what they offer then is not announced back (two
    replicas whose connections differ for good would otherwise re-list each other for ever)."""
    events = cluster.events

    def changed(upstream: Upstream) -> None:
        digest = catalog_digest(upstream)
        if digest is None:
            return
        was_asked = upstream.name in asked
        asked.discard(upstream.name)
        if known.get(upstream.name) == digest:
            return
        known[upstream.name] = digest
        if not was_asked:
            logger.debug("cluster: upstream %s now offers %s; announced", upstream.name, digest[:8])
            events.send_soon("relist", upstream=upstream.name, digest=digest)

    async def relist(event: Event) -> None:
        name, digest = event.upstream, event.digest
        upstream = pool.get(name) if name is not None else None
        if upstream is None or digest is None:
            return
        known[upstream.name] = digest
        mine = catalog_digest(upstream)
        # not listed here yet: its first listing is fresh anyway
        if mine is not None and mine != digest:
            logger.info("cluster: replica %s saw upstream %s change; re-listing it here", event.sender, name)
            asked.add(upstream.name)
            upstream.request_relist()

    async def updated(event: Event) -> None:
        if event.upstream is not None and event.uri is not None:
            notifier.resource_updated(event.upstream, event.uri)

    def local_update(upstream: str, raw: str) -> None:
        notifier.resource_updated(upstream, raw)
        events.send_soon("updated", upstream=upstream, uri=raw)

    async def reload(event: Event) -> None:
        if reloader is not None:
            await reloader.reload(f"cluster: asked on replica {event.sender}")

    async def catch_up() -> None:
        for upstream in pool.upstreams.values():
            upstream.request_relist()

    events.on("relist", relist)
    events.on("updated", updated)
    events.on("reload", reload)
    events.on_reconnect = catch_up
    return Joined(changed, local_update)


def reload_announcer(cluster: Cluster) -> Callable[[], Awaitable[None]]:
    """What the reloader calls after a reload asked of this replica succeeded: the others reload too."""

    async def announce() -> None:
        await cluster.events.publish("reload")

    return announce
