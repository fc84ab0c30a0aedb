"""Pins at listing: what the registry lists of each tool a `pin_definitions` hook pins, and where first listings are
recorded.

Ownership: `Live` holds one `PinGate` and runs each rebuild's sources through `apply` (plain: it reads each hook's
state file, `PinStore`, which re-reads it only when it changed on disk). A tool whose definition is approved is
listed as it is; one whose definition changed is listed with its approved definition (`listed_approved`), or
withheld with a diagnostic when the state file kept only the approved hash; a new one is withheld while its first
definition is recorded (with `trust_new`; without it, until an operator approves it). Recording is I/O (the file,
or with `cluster:` Redis, where two replicas agree on one first definition), so it is not done in `apply`:
`record_pending` does it, from the dispatcher's registry task and before the first list is answered (`settled`),
and says whether the registry must be rebuilt. So what clients are first shown is what gets pinned, and a changed
definition never reaches a list (nor causes a `list_changed`). `record=False` (`plan`, `explain`, `search`,
`approve`): nothing is written, and a new tool is shown as a client's first list would show it.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
from collections.abc import Sequence

from consumers import JSON
from gateway.hooks import HookChain, PinDefinitions
from gateway.registry import ToolDescriptor, ToolSource, listed_approved, withheld
from gateway.state import PinStateUnreadable

logger = logging.getLogger("triad.pins")

_APPROVE = "review it and run `triad approve -c <config> {name}`"


def pin_hooks(hooks: HookChain) -> list[PinDefinitions]:
    return [entry.hook for entry in hooks.entries if isinstance(entry.hook, PinDefinitions)]


@dataclasses.dataclass(frozen=True)
class _Pending:
    hook: PinDefinitions
    upstream: str
    raw: str
    definition: dict[str, JSON]


class PinGate:
    def __init__(self, *, record: bool) -> None:
        self.record = record
        self._pending: list[_Pending] = []
        self._recording = asyncio.Lock()

    @property
    def busy(self) -> bool:
        """First definitions wait to be recorded, or are being recorded: a tool may be withheld for a moment."""
        return bool(self._pending) or self._recording.locked()

    def apply(self, hooks: HookChain, sources: Sequence[ToolSource]) -> list[ToolSource]:
        """`sources` as `hooks`' pins let clients see them (every source, when no hook pins)."""
        pinning = pin_hooks(hooks)
        if not pinning:
            return list(sources)
        pending: list[_Pending] = []
        out = [dataclasses.replace(source, tools=[self._listed(pinning, tool, pending) for tool in source.tools])
               if source.kind == "mcp" else source for source in sources]
        self._pending = pending
        return out

    def _listed(self, hooks: list[PinDefinitions], tool: ToolDescriptor, pending: list[_Pending]) -> ToolDescriptor:
        executor = tool.executor
        if executor is None or executor.kind != "mcp":
            return tool
        current = dict(tool.current)
        for hook in hooks:
            try:
                status = hook.store.status(executor.id, executor.tool, current)
            except (OSError, ValueError, PinStateUnreadable) as exc:  # unreadable: withhold what it pins (fail closed)
                logger.error("pin_definitions: cannot read %s (%s); withholding %s", hook.store.path, exc, tool.name)
                return withheld(tool, "pin-pending", f"its approvals cannot be read from {hook.store.path}")
            if status.state == "approved":
                if status.legacy and self.record:  # the full hash takes over the five-field pin (`PinStore.check`)
                    pending.append(_Pending(hook, executor.id, executor.tool, current))
                continue
            if status.state == "changed":
                if status.approved is not None:
                    return listed_approved(tool, status.approved)
                return withheld(tool, "pin-changed", "its definition changed since it was approved (the approved "
                                f"one was not kept, only its hash): {_APPROVE.format(name=tool.name)}")
            if not hook.options.trust_new:
                return withheld(tool, "pin-unapproved", "its definition has not been approved yet (trust_new is "
                                f"off): {_APPROVE.format(name=tool.name)}")
            if self.record:
                pending.append(_Pending(hook, executor.id, executor.tool, current))
                return withheld(tool, "pin-pending", "its first definition is being recorded as approved")
        return tool

    async def record_pending(self) -> bool:
        """Pin the first definitions of the tools `apply` withheld for it; True if any was recorded (the registry
        must be rebuilt to list them)."""
        async with self._recording:  # one at a time: `busy` stays true until what was taken is written
            return await self._record(self._take())

    def _take(self) -> list[_Pending]:
        pending, self._pending = self._pending, []
        return pending

    async def _record(self, pending: list[_Pending]) -> bool:
        recorded = False
        for item in pending:
            try:
                verdict = await item.hook.pins.check(item.upstream, item.raw, item.definition, True)
                recorded |= item.hook.store.status(item.upstream, item.raw, item.definition).state != "new"
            except Exception:  # a disk or Redis failure: the tool stays withheld (fail closed), retried next rebuild
                logger.exception("pin_definitions: cannot record the first definition of %s:%s", item.upstream,
                                 item.raw)
                continue
            if verdict is not None:
                logger.warning("pin_definitions: %s:%s is withheld: %s", item.upstream, item.raw, verdict)
        return recorded
