"""The seam between an upstream's server->client traffic and the downstream request that caused it.

The exposer sets `CURRENT_DOWNSTREAM` around each downstream request it forwards (the one ContextVar Triad has).
An upstream's log notifications and its sampling, elicitation and roots requests are relayed to that downstream:
over streamable HTTP the SDK carries the ContextVar into the callback (the upstream answers on the request's own
stream); over stdio and SSE it does not, so the upstream's single call in flight is used, and with several in
flight a request is refused with a clear error rather than sent to the wrong client.

A 2026-07-28 upstream asks in-band instead: its result is `input_required`, listing requests. For a downstream
of the handshake era, `answer_input_requests` puts each to the client as a server->client request and collects
the answers for the retry; a 2026-07-28 downstream gets the result itself and retries on its own.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from contextvars import ContextVar
from dataclasses import dataclass
from typing import Any, Protocol, TypedDict, TypeVar, runtime_checkable

import mcp_types as types
from mcp.client.session import ClientRequestContext
from pydantic import BaseModel, ValidationError

from consumers._json import JSON, JSONObject
from consumers._progress import ProgressRoutes
from consumers.errors import UpstreamError

logger = logging.getLogger("triad.upstream")

LOG_LEVELS = {"debug": logging.DEBUG, "info": logging.INFO, "notice": logging.INFO, "warning": logging.WARNING,
              "error": logging.ERROR, "critical": logging.CRITICAL, "alert": logging.CRITICAL,
              "emergency": logging.CRITICAL}
"""MCP log levels as Python's, for an upstream's log message that no client can be given."""
MAX_LOGGED = 500
"""An upstream's log message in Triad's own log is cut to this many characters."""

ProgressFn = Callable[[JSONObject], Awaitable[None]]
"""Told each progress notification of an upstream call: its params as the upstream sent them (`progress`, `total`,
`message`, `_meta`, any other field, each value of its own JSON type) without the upstream hop's `progressToken`."""

ASKS: dict[str, tuple[Any, Any]] = {
    "sampling/createMessage": (types.CreateMessageRequest, types.CreateMessageResult),
    "elicitation/create": (types.ElicitRequest, types.ElicitResult),
    "roots/list": (types.ListRootsRequest, types.ListRootsResult),
}
"""The server->client requests a gateway relays: method -> (request model, result model)."""


def undeclared(request: types.ServerRequest, capabilities: JSONObject | None) -> types.ErrorData | None:
    """The error an upstream gets for a request its client did not declare it takes (capability and, for
    elicitation, mode; sampling with tools needs `sampling.tools`), or None when the client may be asked: a client
    is never sent a request for a capability it did not declare (spec: servers MUST NOT), whatever the upstream
    assumed. An `elicitation: {}` declaration is form mode only (2025-11-25)."""
    declared = capabilities or {}
    method, params = request.method, request.params
    needed: JSONObject | None = None
    if method == "sampling/createMessage":
        tools = getattr(params, "tools", None) is not None or getattr(params, "tool_choice", None) is not None
        sampling = declared.get("sampling")
        if not isinstance(sampling, dict) or (tools and not isinstance(sampling.get("tools"), dict)):
            needed = {"sampling": {"tools": {}} if tools else {}}
    elif method == "elicitation/create":
        mode = getattr(params, "mode", None) or "form"
        elicitation = declared.get("elicitation")
        modes = ({key for key in ("form", "url") if isinstance(elicitation.get(key), dict)} or {"form"}) \
            if isinstance(elicitation, dict) else set()
        if mode not in modes:
            needed = {"elicitation": {mode: {}}}
    elif method == "roots/list" and not isinstance(declared.get("roots"), dict):
        needed = {"roots": {}}
    if needed is None:
        return None
    [(name, detail)] = needed.items()
    extent = f" for {next(iter(detail))} mode" if name == "elicitation" else " with tools" if detail else ""
    return types.ErrorData(code=types.MISSING_REQUIRED_CLIENT_CAPABILITY, message=(
        f"the client did not declare the {name} capability{extent}, so Triad does not send it {method}"),
        data={"requiredCapabilities": needed})


Answer = TypeVar("Answer", bound=BaseModel)
"""The result model a server->client request is answered with (`Downstream.ask`)."""


class Downstream(Protocol):
    @property
    def modern(self) -> bool:
        """The client speaks 2026-07-28: it takes `input_required` results, not server->client requests."""
        ...

    @property
    def log_level(self) -> str | None:
        """The lowest log level the client wants from this request (asked of a 2026-07-28 upstream per request)."""
        ...

    @property
    def capabilities(self) -> JSONObject | None:
        """What the client declared it can do (sampling, elicitation, roots), when known."""
        ...

    @property
    def cancellation(self) -> JSONObject | None:
        """What the client said when it cancelled the request (its `notifications/cancelled` params but the request
        id: `reason`, `_meta`, any other field; `cancellation_of`), known before the cancellation takes effect, so
        the upstream is told the same; None while it has not, or said nothing."""
        ...

    async def log(self, params: types.LoggingMessageNotificationParams) -> None: ...

    async def ask(self, request: types.ServerRequest, result_type: type[Answer]) -> Answer | types.ErrorData:
        """Send a server->client request to the downstream client; its result, or an `ErrorData`."""
        ...


class DownstreamWrapper:
    """A downstream in front of another (`inner`), which it is in all but what a subclass overrides: wrappers change
    what passes one way or the other (`log`, `ask`), never what the client is."""

    def __init__(self, inner: Downstream) -> None:
        self._inner = inner

    @property
    def modern(self) -> bool:
        return self._inner.modern

    @property
    def log_level(self) -> str | None:
        return self._inner.log_level

    @property
    def capabilities(self) -> JSONObject | None:
        return self._inner.capabilities

    @property
    def cancellation(self) -> JSONObject | None:
        return self._inner.cancellation

    async def log(self, params: types.LoggingMessageNotificationParams) -> None:
        await self._inner.log(params)

    async def ask(self, request: types.ServerRequest, result_type: type[Answer]) -> Answer | types.ErrorData:
        return await self._inner.ask(request, result_type)


def cancellation_of(params: JSON) -> JSONObject | None:
    """A client's `notifications/cancelled` params as the upstream's cancellation carries them on (`Downstream.
    cancellation`): all but the request id (the upstream's is another), a `reason` only when it is a string."""
    if not isinstance(params, dict):
        return None
    kept = {key: value for key, value in params.items() if key != "requestId"
            and (key != "reason" or isinstance(value, str))}
    return kept or None


@dataclass(frozen=True, slots=True)
class Share:
    """An identity's fair share of each `sessions: per_client` upstream (its `limits:`), as the consumers see it."""

    holder: str
    """The identity's class for metrics (`owner`, `client`, `anonymous`): bounded, never who it is."""
    upstream_slots: int
    """Upstream sessions the identity may hold on one upstream at once (its stand-ins' included)."""
    stand_ins: int
    """Capability declarations it may hold stand-in sessions for on one upstream (`consumers._stand_ins`)."""


class ClientOrigin(Protocol):
    """The downstream session a request comes from, as the consumers see it (`gateway.hooks.Session`): the way
    back to that client outside any request, and a hook for when the session ends. None for a request without a
    session (2026-07-28)."""

    @property
    def back(self) -> Downstream | None:
        """The session's own channel to its client (logs and requests outside any call); None when it has none."""
        ...

    def on_close(self, callback: Callable[[], Awaitable[None]]) -> None:
        """`callback()` runs once when the session ends (shielded, bounded)."""
        ...

    @property
    def user(self) -> str | None:
        """Whose upstream credentials the session's requests use (`auth: per_user`); None while unknown."""
        ...

    @property
    def declared(self) -> JSONObject | None:
        """What a session without a way back (a 2026-07-28 request) declared it can do, from its envelope."""
        ...

    @property
    def share(self) -> Share | None:
        """The fair share of the session's identity (set with `user`); None: only `max_sessions` bounds it."""
        ...


class RequestOptions(TypedDict, total=False):
    """The keyword options of `Upstream.request`, as the call path passes them on."""

    progress: ProgressFn | None
    retry_safe: bool
    call_limits: tuple[float | None, float | None]
    client: ClientOrigin | None


@runtime_checkable
class ListsChanged(Protocol):
    """A session's channel that can tell its client one of its lists changed (a per-client upstream session's own
    tools or resources, which no other client's lists show)."""

    async def lists_changed(self, family: str) -> None:
        """Send `notifications/<family>/list_changed` to the client."""
        ...


CURRENT_DOWNSTREAM: ContextVar[Downstream | None] = ContextVar("triad_current_downstream", default=None)


async def ask_wire(downstream: Downstream, request: JSON) -> JSONObject:
    """Put an upstream's request, in wire form, to the downstream client: `{"result": ...}` or `{"error": ...}`."""
    method = request.get("method") if isinstance(request, dict) else None
    if method not in ASKS:
        return {"error": {"code": types.METHOD_NOT_FOUND, "message": f"{method}: Triad does not relay it"}}
    request_model, result_model = ASKS[method]
    try:
        parsed = request_model.model_validate(request, by_name=False)
    except ValidationError:
        return {"error": {"code": types.INVALID_PARAMS, "message": f"malformed {method} request"}}
    refused = undeclared(parsed, downstream.capabilities)
    answer = refused if refused is not None else await downstream.ask(parsed, result_model)
    return {"error" if isinstance(answer, types.ErrorData) else "result":
            answer.model_dump(by_alias=True, mode="json", exclude_none=True)}


async def answer_input_requests(upstream: str, downstream: Downstream,
                                requests: JSON) -> dict[str, JSONObject]:
    """Ask the downstream client each of an `input_required` result's requests; the answers by key."""
    if not isinstance(requests, dict) or not requests:
        raise UpstreamError(upstream, f"upstream {upstream!r} answered input_required without input requests")
    answers: dict[str, JSONObject] = {}
    for key, request in requests.items():
        answer = await ask_wire(downstream, request)
        if "error" in answer:
            raise UpstreamError(upstream, f"upstream {upstream!r}'s input request {key!r} was not answered: "
                                f"{answer['error'].get('message')}")
        answers[key] = answer["result"]
    return answers


UpstreamRequest = types.Request[Any, Any]
"""Any request model Triad sends an upstream (`types.CallToolRequest`, `types.ReadResourceRequest`, ...)."""
R = TypeVar("R", bound=UpstreamRequest)


def with_params(request: R, update: JSONObject) -> R:
    """The request with wire-spelled params replaced (validated again, so the SDK serialises them as usual)."""
    params = request.params.model_dump(by_alias=True, mode="json", exclude_none=True) if request.params else {}
    return type(request).model_validate({"method": request.method, "params": {**params, **update}}, by_name=False)


def with_progress_token(request: R, token: str) -> R:
    """The request asking for progress under `token` (a copy: the caller's request is left as it is)."""
    params = request.params if request.params is not None else types.RequestParams()
    meta = {**(params.meta or {}), "progress_token": token}
    return request.model_copy(update={"params": params.model_copy(update={"meta": meta})})


class InFlight:
    """One upstream session's calls in flight and their downstreams, for the SDK session's callbacks: what the
    upstream sends during a call (logs; sampling, elicitation and roots requests) goes to the downstream that made
    it. A session shared by clients relays nothing it cannot attribute: with several calls in flight over a
    transport that does not say which one a message is about, a request is refused and a log goes to Triad's own
    log, as does a log outside any call. A client's own session (`back`: that client's channel) gives everything
    to its client: in a call, to the call's request; outside calls, to the session's channel."""

    def __init__(self, upstream: str, back: Downstream | None = None) -> None:
        self._upstream = upstream
        self._back = back
        self.calls: dict[int, Downstream] = {}
        """The downstream of each call in flight (the upstream's owner adds and removes them)."""
        self.progress = ProgressRoutes()
        """The progress tokens of the calls in flight on this session, as the session's read stream routes them."""

    def _downstream(self) -> Downstream | None:
        found = CURRENT_DOWNSTREAM.get()
        if found is not None:
            return found
        if self._back is not None:  # one client's session: its latest call, else its own channel
            return next(reversed(self.calls.values())) if self.calls else self._back
        if len(self.calls) == 1:
            [found] = self.calls.values()
        return found

    async def on_log(self, params: types.LoggingMessageNotificationParams) -> None:
        downstream = self._downstream()
        if downstream is not None:
            await downstream.log(params)
            return
        # Nobody to attribute it to: Triad's own log, never another client.
        logger.log(LOG_LEVELS.get(params.level, logging.INFO), "upstream %s logged (%s): %s", self._upstream,
                   params.logger or "-", str(params.data)[:MAX_LOGGED])

    async def _ask(self, request: types.ServerRequest, result_type: type[Answer]) -> Answer | types.ErrorData:
        downstream = self._downstream()
        if downstream is None:
            why = ("several calls are in flight on it, and its transport does not say which one this is for"
                   if self.calls else "no call of a client is in flight on it")
            return types.ErrorData(code=types.INVALID_REQUEST, message=(
                f"Triad cannot relay {request.method} from upstream {self._upstream!r}: {why}"))
        refused = undeclared(request, downstream.capabilities)
        return refused if refused is not None else await downstream.ask(request, result_type)

    async def on_sampling(self, context: ClientRequestContext, params: types.CreateMessageRequestParams
                          ) -> types.CreateMessageResult | types.ErrorData:
        answer: types.CreateMessageResult | types.ErrorData = await self._ask(
            types.CreateMessageRequest(params=params), types.CreateMessageResult)
        return answer

    async def on_elicitation(self, context: ClientRequestContext, params: types.ElicitRequestParams
                             ) -> types.ElicitResult | types.ErrorData:
        answer: types.ElicitResult | types.ErrorData = await self._ask(types.ElicitRequest(params=params),
                                                                       types.ElicitResult)
        return answer

    async def on_list_roots(self, context: ClientRequestContext) -> types.ListRootsResult | types.ErrorData:
        answer: types.ListRootsResult | types.ErrorData = await self._ask(types.ListRootsRequest(),
                                                                          types.ListRootsResult)
        return answer
