"""Opening one upstream session, the same way for the upstream's shared session (`consumers.upstream`) and for a
client's own (`consumers.per_client`): the transport and the SDK's session (`consumers.channel.open_channel`), the
client capabilities it declares, the handshake, the first listing and the direct path's switch-on, all within the
upstream's `connect_timeout`.

Ownership: the session's owner task enters `open_session`, serves the session it yields
(`consumers._session_loop.serve_session`) and leaves it, which closes the session: anyio requires the task that
entered the transport and the `ClientSession` to exit them. What is opened and listed is the owner's to keep: the
catalog for the shared session, the client's own lists for a client's.
"""

from __future__ import annotations

import logging
import math
from collections.abc import AsyncIterator, Awaitable, Callable, Collection, Mapping
from contextlib import asynccontextmanager
from dataclasses import dataclass
from typing import Generic, TypeVar

import anyio
import mcp_types as types
from mcp import ClientSession
from mcp.client.session import ClientRequestContext, ListRootsFnT, MessageHandlerFnT
from mcp.shared.exceptions import MCPError
from mcp_types.version import MODERN_PROTOCOL_VERSIONS

from consumers._json import JSON, JSONObject
from consumers._sdk import declare_as_client
from consumers.channel import SessionChannel, open_channel
from consumers.child_process import ChildOutput
from consumers.config import UpstreamConfig
from consumers.errors import UpstreamTimeout
from consumers.oauth import CredentialUse
from consumers.relay import InFlight
from consumers.transports import TlsContexts

logger = logging.getLogger("triad.upstream")

Lists = TypeVar("Lists")
Handshake = types.InitializeResult | types.DiscoverResult
"""What the upstream answered to `initialize` (or, on a 2026-07-28 upstream, to `server/discover`)."""


@dataclass(frozen=True)
class Declaration:
    """The client capabilities a session declares (of "sampling", "elicitation", "roots"), each relayed through
    the session's `InFlight`; `list_roots` answers `roots/list` instead of the relays. `spelling`: each capability
    as a client declared it to Triad (its own session declares exactly that); None: as the SDK builds it."""

    names: Collection[str]
    list_roots: ListRootsFnT | None = None
    spelling: JSONObject | None = None

    @classmethod
    def shared(cls, config: UpstreamConfig) -> Declaration:
        """What a shared session declares, and how it answers `roots/list`. It declares roots only with `roots:`
        configured; with `per_client` the catalog session declares them too (its roots are the configured ones, or
        none): it lists what a client that has roots would see, and each client's own session narrows that to what
        it lists for that client. Its roots are the upstream's own `roots:`, never a client's."""
        roots = types.ListRootsResult.model_validate({"roots": [{"uri": uri} for uri in config.roots or ()]})

        async def configured_roots(context: ClientRequestContext) -> types.ListRootsResult | types.ErrorData:
            return roots

        declares_roots = config.roots is not None or config.session_mode == "per_client"
        return cls(("sampling", "elicitation") + (("roots",) if declares_roots else ()), configured_roots)

    @classmethod
    def of_client(cls, capabilities: JSONObject) -> Declaration:
        """A client's own session: it declares what that client declared, spelt as the client spelt it."""
        return cls(tuple(capabilities), spelling=capabilities)


@dataclass(frozen=True)
class OpenSession(Generic[Lists]):
    """A session that finished opening: its channel, the handshake's answer, and its first listing."""

    channel: SessionChannel
    handshake: Handshake
    lists: Lists
    started: float
    """When opening began (`anyio.current_time()`), for the log line that says it is open."""


def offered(handshake: Handshake) -> Mapping[str, JSON]:
    """The server capabilities the upstream offered in its handshake."""
    return handshake.capabilities.model_dump(exclude_none=True)


@asynccontextmanager
async def open_session(name: str, config: UpstreamConfig, cwd: str | None, declaration: Declaration,
                       first_listing: Callable[[SessionChannel, Handshake], Awaitable[Lists]], *,
                       relays: InFlight, on_message: MessageHandlerFnT,
                       on_notification: Callable[[str, JSONObject], None], auth: CredentialUse,
                       tls: TlsContexts | None = None, output: ChildOutput | None = None,
                       discover: Callable[[ClientSession], None] | None = None,
                       opening: anyio.CancelScope | None = None) -> AsyncIterator[OpenSession[Lists]]:
    """Open a session, shake hands, list what the upstream offers on it (`first_listing`), switch the direct path
    on (a handshake-era session; `consumers.channel.SessionChannel.use_direct`), and yield it; an `UpstreamTimeout`
    when that takes longer than `connect_timeout`. Once open, only requests have deadlines.

    `on_message`: the upstream's notifications outside calls and transport errors; `on_notification`: its task
    status pushes, and what direct-path replies carry that is not about their request. `discover`: try
    `server/discover` first (`protocol: auto`), and where the upstream answers it, call `discover(session)`.
    `opening`: the cancel scope opening runs in, given by an owner that may grant it more time (a person
    authorizing, `auth: per_user`)."""
    started = anyio.current_time()
    scope = opening if opening is not None else anyio.CancelScope()
    scope.deadline = started + config.connect_timeout
    with scope:
        async with open_channel(name, config, cwd, relays, on_message, declare=declaration.names,
                                list_roots=declaration.list_roots, output=output, tls=tls,
                                on_notification=on_notification, auth=auth) as channel:
            if declaration.spelling is not None:
                declare_as_client(channel.session, declaration.spelling)
            handshake = await _shake_hands(name, channel.session, discover)
            lists = await first_listing(channel, handshake)
            version = channel.session.protocol_version or ""
            if version not in MODERN_PROTOCOL_VERSIONS:
                channel.use_direct(version, on_notification)
            scope.deadline = math.inf  # open: from here on only requests have deadlines
            yield OpenSession(channel, handshake, lists, started)
    if scope.cancelled_caught:
        raise UpstreamTimeout(name, f"did not finish initialize and listing within {config.connect_timeout:g}s")


async def _shake_hands(name: str, session: ClientSession, discover: Callable[[ClientSession], None] | None
                       ) -> Handshake:
    """`initialize`; or, given `discover`, `server/discover` first, and `initialize` where it is refused."""
    if discover is not None:
        try:
            found = await session.discover()
        except MCPError as exc:
            logger.debug("upstream %s: server/discover refused (%s); using initialize", name, exc)
        else:
            discover(session)
            return found
    return await session.initialize()
