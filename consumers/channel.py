"""One live upstream session as the rest of Triad sees it: the channel requests and notifications go out on.

`open_channel` is the one place an upstream session is opened, for the shared session and for each client's own
(both through `consumers._session_open.open_session`): it enters the transport (`consumers.transports`) and the
SDK's `ClientSession`, wired so that what the upstream sends reaches the right place (`consumers.relay.InFlight`:
during a call, the call's downstream; outside calls, the session's own client or Triad's log; list changes and
resource updates, the upstream's owner). The task that enters it owns it and alone leaves it, which closes the
session (anyio requires the entering task to exit).

A `SessionChannel` sends a request one of two ways:
- through the SDK's `ClientSession`. Progress comes by a token of Triad's own, routed off the session's read
  stream (`consumers._progress`), so it keeps every field and number type the upstream sent; a 2026-07-28
  upstream's `input_required` rounds are answered by asking a handshake-era client (a 2026-07-28 client gets the
  result and retries itself);
- through `consumers._direct_http.DirectHttp`, Triad's direct HTTP path on a handshake-era streamable HTTP session
  the SDK opened (one POST, its reply read as JSON or SSE), once `use_direct` turned it on after the handshake.

Both follow the same HTTP rules (`consumers._http_rules`).
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable, Collection
from contextlib import asynccontextmanager
from typing import TYPE_CHECKING, Protocol, cast

import mcp_types as types
from mcp import ClientSession
from mcp.client.session import ClientRequestContext, ListRootsFnT, MessageHandlerFnT

from consumers._json import JSONObject
from consumers._progress import CallWrites
from consumers._sdk import Incoming, send_raw
from consumers._streams import EOFWatch
from consumers.child_process import ChildOutput
from consumers.config import UpstreamConfig
from consumers.errors import UpstreamError
from consumers.relay import (
    Downstream,
    InFlight,
    ProgressFn,
    UpstreamRequest,
    answer_input_requests,
    with_params,
    with_progress_token,
)
from consumers.transports import TlsContexts, open_transport

if TYPE_CHECKING:
    from consumers._direct_http import DirectHttp, HttpLink, OwnRoots
    from consumers.oauth import CredentialUse

MAX_INPUT_ROUNDS = 10
"""A bound on `input_required` rounds Triad answers for a handshake-era client, in case an upstream asks forever."""

CLIENT_INFO = types.Implementation(name="triad", version="0.1.0")


class Channel(Protocol):
    """What the call path needs of an upstream session. Receiving is wired when it opens (`open_channel`);
    closing is its owner task leaving `open_channel`."""

    async def request(self, request: UpstreamRequest, on_progress: ProgressFn,
                      downstream: Downstream | None) -> JSONObject:
        """Send `request`, report its progress to `on_progress`, put the upstream's questions to `downstream`;
        the raw result (a JSON-RPC error raises the SDK's `MCPError`)."""
        ...

    async def notify(self, notification: types.ClientNotification) -> None:
        """Send a notification (dropped once the session has closed)."""
        ...

    @property
    def closed(self) -> bool:
        """The upstream ended the session (its stream is at its end): never send on it again."""
        ...


class SessionChannel:
    def __init__(self, upstream: str, session: ClientSession, relays: InFlight, watch: EOFWatch,
                 link: HttpLink | None, declared: Collection[str] = (), own_roots: OwnRoots | None = None) -> None:
        self.upstream = upstream
        self._declared = frozenset(declared)
        """What the session declared (of sampling, elicitation, roots): the direct path answers the upstream's
        requests as the SDK's session would, refusing the others."""
        self._own_roots = own_roots
        """The session's own answer to `roots/list` (a shared session's configured roots), if not relayed."""
        self.session = session
        """The SDK's session: the handshake, lists, pings and subscriptions go on it directly."""
        self.relays = relays
        self.watch = watch
        self._link = link
        self._direct: DirectHttp | None = None
        self.loss_counted = False
        """Set when the circuit breaker counted this session's loss: it counts one lost session once, however
        many calls were in flight on it (`consumers.upstream.Upstream.request`)."""

    def use_direct(self, protocol_version: str, on_notification: Callable[[str, JSONObject], None]) -> None:
        """Send requests on Triad's direct HTTP path from now on (a handshake-era streamable-HTTP session, after
        its handshake); `on_notification` gets what its replies carry that is not about their request."""
        if self._link is not None:
            self._direct = self._link.direct(protocol_version, on_notification, self._declared, self._own_roots)

    async def listening(self) -> None:
        """Return once the upstream's stream for messages outside requests was answered (at once if it has none)."""
        if self._link is not None:
            await self._link.listening.wait()

    @property
    def closed(self) -> bool:
        return self.watch.closed

    async def notify(self, notification: types.ClientNotification) -> None:
        await self.session.send_notification(notification)

    async def request(self, request: UpstreamRequest, on_progress: ProgressFn,
                      downstream: Downstream | None) -> JSONObject:
        if self._direct is not None:
            return await self._direct.request(request, on_progress, downstream)
        return await self.relays.progress.routed(
            on_progress, lambda token: self._rounds(request, token, downstream),
            lambda: downstream.cancellation if downstream is not None else None)

    async def _rounds(self, request: UpstreamRequest, token: str, downstream: Downstream | None) -> JSONObject:
        request = with_progress_token(request, token)
        result = await send_raw(self.session, request)
        for _ in range(MAX_INPUT_ROUNDS):
            if result.get("resultType") != "input_required" or downstream is None or downstream.modern:
                return result
            answers = await answer_input_requests(self.upstream, downstream, result.get("inputRequests"))
            request = with_params(request, {"inputResponses": answers, "requestState": result.get("requestState")})
            result = await send_raw(self.session, request)
        raise UpstreamError(self.upstream, f"upstream {self.upstream!r} asked for input more than "
                            f"{MAX_INPUT_ROUNDS} times in one {request.method}")


@asynccontextmanager
async def open_channel(name: str, config: UpstreamConfig, cwd: str | None, relays: InFlight,
                       on_message: MessageHandlerFnT, *, declare: Collection[str],
                       list_roots: ListRootsFnT | None = None, output: ChildOutput | None = None,
                       tls: TlsContexts | None = None,
                       on_notification: Callable[[str, JSONObject], None] | None = None,
                       auth: CredentialUse | None = None) -> AsyncIterator[SessionChannel]:
    """An upstream session before its handshake. `declare`: the client capabilities it declares (of "sampling",
    "elicitation", "roots"), each relayed through `relays`; `list_roots` answers `roots/list` instead of the
    relays. `on_message`: the upstream's notifications outside calls and transport errors; `on_notification`:
    its task status pushes (2025-11-25), which the SDK's session passes to no handler. `auth`: the OAuth
    credential to use, for an upstream with `auth` (`consumers.transports.open_transport`)."""
    own_roots = _own_roots(list_roots) if "roots" in declare and list_roots is not None else None
    if "roots" in declare and list_roots is None:
        list_roots = relays.on_list_roots
    async with open_transport(name, config, cwd, output, tls, auth) as (read, write, link):
        watch = EOFWatch(read, _intercept(relays, on_notification))
        async with ClientSession(watch, CallWrites(write, relays.progress), client_info=CLIENT_INFO,
                                 message_handler=on_message, logging_callback=relays.on_log,
                                 sampling_callback=relays.on_sampling if "sampling" in declare else None,
                                 elicitation_callback=relays.on_elicitation if "elicitation" in declare else None,
                                 list_roots_callback=list_roots if "roots" in declare else None) as session:
            yield SessionChannel(name, session, relays, watch, link, declare, own_roots)


def _own_roots(list_roots: ListRootsFnT) -> OwnRoots:
    async def answer() -> JSONObject:
        found = await list_roots(cast(ClientRequestContext, None))  # Triad's own answers read no context
        return {"error" if isinstance(found, types.ErrorData) else "result":
                found.model_dump(by_alias=True, mode="json", exclude_none=True)}
    return answer


TASK_STATUS = "notifications/tasks/status"


def _intercept(relays: InFlight, on_notification: Callable[[str, JSONObject], None] | None
               ) -> Callable[[Incoming], bool]:
    """What a session's read stream hands to Triad before the SDK sees it: progress of a call in flight, and task
    status pushes (to `on_notification`)."""

    def take(item: Incoming) -> bool:
        if relays.progress.deliver(item):
            return True
        message = getattr(item, "message", None)
        if on_notification is None or not isinstance(message, types.JSONRPCNotification) \
                or message.method != TASK_STATUS:
            return False
        on_notification(message.method, message.params if isinstance(message.params, dict) else {})
        return True

    return take
