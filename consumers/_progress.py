"""The calls in flight on one upstream session, each known by a token of Triad's own: their progress notifications
routed as the upstream sent them, and their cancellations sent with the client's own reason.

The SDK's own routing (a progress callback keyed by the request id) turns `1` into `1.0`, and drops `_meta` and
every other field of the notification. So a call on an SDK session carries a progress token of Triad's own instead
(the SDK passes a caller's `progressToken` through when it is given no callback); the session's read stream hands
each notification naming one of these tokens to `deliver` (`consumers._streams.EOFWatch`), before the SDK sees it,
and a task of the call relays its params in order (`routed`). A notification naming no call in flight goes on to
the SDK, which drops it.

The token also names the call's request on the way out (`CallWrites`, the session's write stream): when the SDK
cancels a request upstream ("caller cancelled", once the call's task is cancelled), the notification carries
what the client said in its own `notifications/cancelled` (its reason, `_meta`, any other field), when it said
something.

Ownership: each `InFlight` (one per upstream session) holds one `ProgressRoutes`; a route lives exactly as long as
the `routed` call that opened it, whose task group runs its relay task.
"""

from __future__ import annotations

import dataclasses
import itertools
import logging
import secrets
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

import anyio
import anyio.lowlevel
import mcp_types as types
from anyio.streams.memory import MemoryObjectSendStream
from mcp.shared.message import SessionMessage

from consumers._json import JSONObject
from consumers._sdk import Incoming, WriteEnd

logger = logging.getLogger("triad.upstream")
T = TypeVar("T")
ProgressFn = Callable[[JSONObject], Awaitable[None]]
"""`consumers.relay.ProgressFn`: told a progress notification's params, without its token."""

MAX_QUEUED = 64
"""Progress notifications of one call waiting for its client; past this, newer ones are dropped (progress is
advisory, and a client that does not read must not grow Triad's memory)."""


class ProgressRoutes:
    def __init__(self) -> None:
        self._routes: dict[str, MemoryObjectSendStream[JSONObject]] = {}
        self._cancellations: dict[str, Callable[[], JSONObject | None]] = {}
        """Each call's way to the reason its client gave for cancelling it."""
        self._requests: dict[Any, str] = {}
        """Upstream request id -> the token of the call that sent it."""
        self._prefix = f"triad-{secrets.token_hex(6)}-"
        self._count = itertools.count(1)

    def deliver(self, item: Incoming) -> bool:
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

    def outgoing(self, item: SessionMessage) -> SessionMessage:
        """A message on its way to the upstream (`CallWrites`): a call's request is noted by its id; a cancellation
        of one gets the reason its client gave."""
        message = getattr(item, "message", None)
        if isinstance(message, types.JSONRPCRequest):
            meta = (message.params or {}).get("_meta")
            token = meta.get("progressToken") if isinstance(meta, dict) else None
            if token in self._routes:
                self._requests[message.id] = token
        elif isinstance(message, types.JSONRPCNotification) and message.method == "notifications/cancelled":
            params = message.params or {}
            token = self._requests.get(params.get("requestId"))
            said = self._cancellations[token]() if token in self._cancellations else None
            if said is not None:  # what the client said (reason, `_meta`...), for the upstream's own request id
                message = message.model_copy(update={"params": {**params, **said,
                                                                "requestId": params.get("requestId")}})
                item = dataclasses.replace(item, message=message)
        return item

    async def routed(self, on_progress: ProgressFn, send: Callable[[str], Awaitable[T]],
                     cancellation: Callable[[], JSONObject | None] = lambda: None) -> T:
        """`send(token)` with a progress token of its own, whose notifications go to `on_progress` in order; the
        answer is returned once every notification that came before it has been passed on. `reason()` is why the
        client cancelled the call, if it did and said why."""
        token = f"{self._prefix}{next(self._count)}"
        sender, receiver = anyio.create_memory_object_stream[dict[str, Any]](MAX_QUEUED)
        self._routes[token] = sender
        self._cancellations[token] = cancellation

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
            self._cancellations.pop(token, None)
            for request_id in [key for key, value in self._requests.items() if value == token]:
                del self._requests[request_id]
        if failure is not None:
            raise failure
        return answer


class CallWrites:
    """An upstream session's write stream, through `ProgressRoutes.outgoing` (the SDK's `WriteStream` shape)."""

    def __init__(self, inner: WriteEnd, routes: ProgressRoutes) -> None:
        self._inner = inner
        self._routes = routes

    async def send(self, item: SessionMessage, /) -> None:
        message = getattr(item, "message", None)
        if isinstance(message, types.JSONRPCNotification) and message.method == "notifications/cancelled":
            # The SDK cancels a call upstream as soon as the call is cancelled, before Triad's exposer has seen the
            # client's notification and kept its reason (`exposers.sessions.DownstreamSession.keep_cancellation`):
            # that runs first.
            await anyio.lowlevel.cancel_shielded_checkpoint()
        await self._inner.send(self._routes.outgoing(item))

    async def aclose(self) -> None:
        await self._inner.aclose()

    async def __aenter__(self) -> CallWrites:
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.aclose()
