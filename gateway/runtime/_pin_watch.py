"""Approvals written by another process: `triad approve` writes a `pin_definitions` hook's state file while the daemon
runs; the daemon rebuilds its registry, so its lists show what was approved (`gateway.calls.PinGate`).

Ownership: the daemon starts `watch_pins` in its root task group (serve and stdio only) and cancels it on exit.
The directories watched are those of the state files at start; a reload that moves a state file elsewhere is
seen at the next rebuild (an upstream change, another reload).
"""

from __future__ import annotations

import os

import watchfiles

from gateway.calls import Dispatcher, pin_hooks


def _state_files(dispatcher: Dispatcher) -> set[str]:
    return {os.path.abspath(hook.store.path) for hook in pin_hooks(dispatcher.hooks)}


def _directories(files: set[str]) -> set[str]:
    return {os.path.dirname(path) for path in files if os.path.isdir(os.path.dirname(path))}


def _touches(changes: set[tuple[watchfiles.Change, str]], files: set[str]) -> bool:
    return any(os.path.abspath(changed) in files for _kind, changed in changes)


async def watch_pins(dispatcher: Dispatcher) -> None:
    directories = _directories(_state_files(dispatcher))
    if not directories:
        return
    async for changes in watchfiles.awatch(*directories, recursive=False,  # no wake-up for other files there
                                           watch_filter=lambda _change, changed: changed in _state_files(dispatcher)):
        if _touches(changes, _state_files(dispatcher)):
            dispatcher.invalidate()
