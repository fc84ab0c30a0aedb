"""The pool: every configured upstream, keyed by name, started concurrently.

Ownership: the daemon creates the pool and calls `start(task_group)` with its root task group; each upstream's
owner task runs there, so one slow or failing upstream never delays the others. `stop()` asks every owner task
to close its session (which ends stdio children and their process trees); cancelling the task group does the
same under anyio's shielded cleanup.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping

import anyio
from anyio.abc import TaskGroup

from consumers.upstream import Upstream
from gateway.config import TriadConfig


class UpstreamPool:
    def __init__(self, config: TriadConfig, on_change: Callable[[Upstream], None]) -> None:
        self._upstreams: dict[str, Upstream] = {
            name: Upstream(name, up, config.resolve_cwd(up), on_change)
            for name, up in config.enabled_upstreams().items()
        }

    @property
    def upstreams(self) -> Mapping[str, Upstream]:
        return self._upstreams

    def get(self, name: str) -> Upstream | None:
        return self._upstreams.get(name)

    def start(self, task_group: TaskGroup) -> None:
        for upstream in self._upstreams.values():
            task_group.start_soon(upstream.run, name=f"upstream:{upstream.name}")

    async def wait_settled(self) -> None:
        """Until every upstream has connected or failed once (each bounded by its own timeout)."""
        for upstream in self._upstreams.values():
            await upstream.settled.wait()

    def stop(self) -> None:
        for upstream in self._upstreams.values():
            upstream.stop()


async def wait_settled_or_timeout(pool: UpstreamPool, seconds: float) -> None:
    with anyio.move_on_after(seconds):
        await pool.wait_settled()
