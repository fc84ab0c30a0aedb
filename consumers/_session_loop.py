"""The one loop an upstream session's owner task serves it with, whether it is the upstream's shared session
(`consumers.upstream`) or a client's own (`consumers.per_client`): wait for work or a quiet interval, act, and stop
when the upstream ends the session or the owner says so. Opening (`consumers._session_open`) and closing stay
with the owner task, which entered the session and alone leaves it.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable

import anyio

from consumers.channel import SessionChannel


class Wake:
    """An event that re-arms once waited for: "there is work", told by any task, taken by the owner task."""

    def __init__(self) -> None:
        self._event = anyio.Event()

    def set(self) -> None:
        self._event.set()

    async def wait(self) -> None:
        await self._event.wait()
        self._event = anyio.Event()

    async def wait_for(self, interval: float) -> bool:
        """Wait at most `interval` seconds; False when nothing woke the loop meanwhile (a quiet interval)."""
        with anyio.move_on_after(interval):
            await self.wait()
            return True
        return False


async def serve_session(channel: SessionChannel, wake: Wake, interval: float,
                        step: Callable[[bool], Awaitable[bool]], on_eof: Callable[[], None] | None = None) -> None:
    """Serve one open session: after each wake-up or quiet `interval`, `step(quiet)` does the owner's work and says
    whether to go on; the loop ends there, or when the upstream ends the session. Its end is told to `on_eof`
    (default: it wakes the loop; another must wake it too)."""
    channel.watch.on_eof = on_eof or wake.set
    while not channel.closed:
        quiet = not await wake.wait_for(interval)
        if channel.closed or not await step(quiet):
            return
