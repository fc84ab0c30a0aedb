"""With `cluster:`, `/mcp` requests that belong to another replica are forwarded to it.

The load balancer routes a handshake-era session's requests by its `Mcp-Session-Id` (deploy/haproxy.cfg: a stick
table on that header), and spreads 2026-07-28 requests over every replica. Two kinds of request can still land on a
replica that cannot serve them, and are forwarded here to the replica that can, as they came (headers, token,
body) with the answer streamed back:

- the retry of an `input_required` round: its call is parked on the replica that asked, whose id is sealed into
  the `requestState` (`exposers.input_rounds.round_owner`);
- a 2026-07-28 `tasks/*` request: the task is in the book of the replica that adopted it, whose id is sealed into
  Triad's task id (`gateway.tasks.task_owner`);
- a request on a handshake-era session another replica owns (the load balancer lost its table, or a new
  balancer took over): forwarded only when the cluster's record says the caller opened that session and its
  replica is alive (`gateway.cluster.Cluster.session_owner`);
- a person's browser bringing back a per-user authorization (`/oauth/callback/<upstream>`, `callbacks`): the
  replica that waits for it is named in its `state` (`consumers.oauth`).

Anything else, and any forward whose owner cannot be reached, is served here as on one replica: an unknown session
is 404 (the client opens a new one), a round's state no replica holds is "Invalid or expired requestState". A
forwarded request carries `X-Triad-Forwarded` and is never forwarded again.
"""

from __future__ import annotations

import logging
from collections.abc import Callable

import anyio
import httpx2
from starlette.requests import Request
from starlette.types import ASGIApp, Receive, Scope, Send

from consumers.oauth import state_owner
from exposers._wire import ParseError, parse_json, read_body, replay
from exposers.input_rounds import STATE_PREFIX, round_owner
from exposers.server import IDENTITY_SCOPE_KEY
from gateway.cluster import Cluster
from gateway.identity import Identity
from gateway.tasks import METHODS, TASK_PREFIX, task_owner

logger = logging.getLogger("triad.cluster")

FORWARDED_HEADER = b"x-triad-forwarded"
HOP_BY_HOP = frozenset({b"host", b"connection", b"keep-alive", b"transfer-encoding", b"te", b"trailer", b"upgrade",
                        b"proxy-authorization", b"proxy-connection", b"content-length"})
CONNECT_TIMEOUT = 2.0
MARKERS = (STATE_PREFIX.encode(), TASK_PREFIX.encode())


class ClusterRouter:
    """ASGI middleware in front of `/mcp`, behind authentication (the caller's identity is in the scope)."""

    def __init__(self, app: ASGIApp, cluster: Cluster, is_local: Callable[[str], bool], max_body: int) -> None:
        self.app = app
        self._cluster = cluster
        self._is_local = is_local
        self._max_body = max_body
        self._client = httpx2.AsyncClient(timeout=httpx2.Timeout(CONNECT_TIMEOUT, read=None), trust_env=False)

    async def aclose(self) -> None:
        await self._client.aclose()

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        headers = dict(scope["headers"]) if scope["type"] == "http" else {}
        if not headers or FORWARDED_HEADER in headers:
            await self.app(scope, receive, send)
            return
        session_id = headers.get(b"mcp-session-id", b"").decode(errors="replace")
        identity = scope.get(IDENTITY_SCOPE_KEY)
        if session_id:
            if self._is_local(session_id) or not isinstance(identity, Identity):
                await self.app(scope, receive, send)
                return
            address = await self._cluster.session_owner(session_id, identity)
            if address is None:
                await self.app(scope, receive, send)
                return
            await self._forward_or_serve(scope, receive, send, lambda _body: address)
            return
        if scope["method"] != "POST":
            await self.app(scope, receive, send)
            return
        await self._forward_or_serve(scope, receive, send, self._owner_address)

    def callbacks(self, app: ASGIApp) -> ASGIApp:
        """`app` (the authorization callback route), with an answer another replica waits for forwarded there."""

        async def route(scope: Scope, receive: Receive, send: Send) -> None:
            owner = state_owner(Request(scope).query_params.get("state") or "")
            address = self._cluster.replicas.address_of(owner) \
                if owner is not None and owner != self._cluster.replica_id else None
            if address is None or FORWARDED_HEADER in dict(scope["headers"]):
                await app(scope, receive, send)
                return
            await self._forward_or_serve(scope, receive, send, lambda _body: address, app)

        return route

    def _owner_address(self, body: bytes) -> str | None:
        """The address of the replica that holds the round or task the request names; None: this one."""
        if not any(marker in body for marker in MARKERS):
            return None
        try:
            message = parse_json(body)
        except ParseError:  # served here, where the same parser answers it with a parse error
            return None
        params = message.get("params") if isinstance(message, dict) else None
        if not isinstance(params, dict):
            return None
        owner = round_owner(params.get("requestState")) or \
            (task_owner(params.get("taskId")) if message.get("method") in METHODS else None)
        if owner is None or owner == self._cluster.replica_id:
            return None
        address: str | None = self._cluster.replicas.address_of(owner)
        return address

    async def _forward_or_serve(self, scope: Scope, receive: Receive, send: Send,
                                address_of: Callable[[bytes], str | None], serve: ASGIApp | None = None) -> None:
        """Read the body; forward the request to `address_of(body)`, or serve it here with `serve` (default: the
        `/mcp` app) when None, a body over the limit, or an owner that cannot be reached."""
        serve = serve or self.app
        read = await read_body(receive, self._max_body) if scope["method"] == "POST" else (b"", False)
        if read is None:  # the client went away
            return
        body, more = read
        address = address_of(body) if not more else None
        if address is None:
            await serve(scope, replay(body, more, receive), send)
            return
        headers = [(k, v) for k, v in scope["headers"] if k not in HOP_BY_HOP]
        headers.append((FORWARDED_HEADER, self._cluster.replica_id.encode()))
        query = scope.get("query_string", b"").decode()
        url = f"{address}{scope['path']}" + (f"?{query}" if query else "")
        request = self._client.build_request(scope["method"], url, headers=headers, content=body)
        logger.debug("cluster: forwarded a request to replica at %s", address)
        try:
            response = await self._client.send(request, stream=True)
        except httpx2.TransportError as exc:  # the owner is gone: answered here, as on one replica
            logger.info("cluster: could not forward to %s (%s); served here", address, type(exc).__name__)
            await serve(scope, replay(body, False, receive), send)
            return
        try:
            await send({"type": "http.response.start", "status": response.status_code,
                        "headers": [(k.lower(), v) for k, v in response.headers.raw
                                    if k.lower() not in HOP_BY_HOP or k.lower() == b"content-length"]})
            async with anyio.create_task_group() as tg:
                tg.start_soon(_cancel_on_disconnect, receive, tg.cancel_scope)
                async for chunk in response.aiter_raw():
                    await send({"type": "http.response.body", "body": chunk, "more_body": True})
                tg.cancel_scope.cancel()
            await send({"type": "http.response.body", "body": b"", "more_body": False})
        except httpx2.TransportError:  # the owner went away mid-answer: the client's connection ends here too
            logger.info("cluster: replica at %s went away while answering a forwarded request", address)
        finally:
            with anyio.CancelScope(shield=True):
                await response.aclose()


async def _cancel_on_disconnect(receive: Receive, scope: anyio.CancelScope) -> None:
    while (await receive())["type"] != "http.disconnect":
        pass
    scope.cancel()
