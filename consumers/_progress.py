"""Progress notifications of calls in flight on one upstream session, routed as the upstream sent them.

The SDK's own routing (a progress callback keyed by the request id) turns `1` into `1.0`, and drops `_meta` and
every other field of the notification. So a call on an SDK session carries a progress token of Triad's own instead
(the SDK passes a caller's `progressToken` through when it is given no callback); the session's read stream hands
each notification naming one of these tokens to `deliver` (`consumers._streams.EOFWatch`), before the SDK sees it,
and a task of the call relays its params in order (`routed`). A notification naming no call in flight goes on to
the SDK, which drops it.

Ownership: each `InFlight` (one per upstream session) holds one `ProgressRoutes`; a route lives exactly as long as
the `routed` call that opened it, whose task group runs its relay task.
"""

from __future__ import annotations

import itertools
import logging
import secrets
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

import anyio
import mcp_types as types
from anyio.streams.memory import MemoryObjectSendStream

logger = logging.getLogger("triad.upstream")
T = TypeVar("T")
ProgressFn = Callable[[dict[str, Any]], Awaitable[None]]
"""`consumers.relay.ProgressFn`: told a progress notification's params, without its token."""

MAX_QUEUED = 64
"""Progress notifications of one call waiting for its client; past this, newer ones are dropped (progress is
advisory, and a client that does not read must not grow Triad's memory)."""


class ProgressRoutes:
    def __init__(self) -> None:
        self._routes: dict[str, MemoryObjectSendStream[dict[str, Any]]] = {}
        self._prefix = f"triad-{secrets.token_hex(6)}-"
        self._count = itertools.count(1)

    def deliver(self, item: Any) -> bool:
        """Take a message off the read stream if it is a progress notification for a call in flight here."""
        message = getattr(item, "message", None)
        if not isinstance(message, types.JSONRPCNotification) or message.method != "notifications/progress":
            return False
        params = message.params if isinstance(message.params, dict) else {}
        route = self._routes.get(params.get("progressToken"))  # type: ignore[arg-type]
        if route is None:
            return False
        try:
            route.send_nowait({key: value for key, value in params.items() if key != "progressToken"})
        except anyio.WouldBlock:
            logger.debug("a call's client is behind on progress; a progress notification was dropped")
        except (anyio.BrokenResourceError, anyio.ClosedResourceError):
            pass  # the call just ended
        return True

    async def routed(self, on_progress: ProgressFn, send: Callable[[str], Awaitable[T]]) -> T:
        """`send(token)` with a progress token of its own, whose notifications go to `on_progress` in order; the
        answer is returned once every notification that came before it has been passed on."""
        token = f"{self._prefix}{next(self._count)}"
        sender, receiver = anyio.create_memory_object_stream[dict[str, Any]](MAX_QUEUED)
        self._routes[token] = sender

        async def relay() -> None:
            async with receiver:
                async for params in receiver:
                    try:
                        await on_progress(params)
                    except Exception:  # a client that cannot take progress still gets its answer
                        logger.debug("a progress notification could not be relayed", exc_info=True)

        failure: Exception | None = None
        try:
            async with anyio.create_task_group() as tg:
                tg.start_soon(relay)
                try:
                    answer = await send(token)
                except Exception as exc:  # raised as itself, not wrapped in the task group's ExceptionGroup
                    failure = exc
                finally:
                    self._routes.pop(token, None)
                    sender.close()  # the relay ends once it has passed on what came before the answer
        finally:
            self._routes.pop(token, None)
        if failure is not None:
            raise failure
        return answer
