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

from contextvars import ContextVar
from typing import Any, Protocol

import mcp_types as types
from pydantic import ValidationError

from gateway.errors import UpstreamError

ASKS: dict[str, tuple[Any, Any]] = {
    "sampling/createMessage": (types.CreateMessageRequest, types.CreateMessageResult),
    "elicitation/create": (types.ElicitRequest, types.ElicitResult),
    "roots/list": (types.ListRootsRequest, types.ListRootsResult),
}
"""The server->client requests a gateway relays: method -> (request model, result model)."""


class Downstream(Protocol):
    modern: bool
    """The client speaks 2026-07-28: it takes `input_required` results, not server->client requests."""

    log_level: str | None
    """The lowest log level the client wants from this request (asked of a 2026-07-28 upstream per request)."""

    capabilities: dict[str, Any] | None
    """What the client declared it can do (sampling, elicitation, roots), when known."""

    async def log(self, params: types.LoggingMessageNotificationParams) -> None: ...

    async def ask(self, request: Any, result_type: Any) -> Any:
        """Send a server->client request to the downstream client; its result, or an `ErrorData`."""
        ...


CURRENT_DOWNSTREAM: ContextVar[Downstream | None] = ContextVar("triad_current_downstream", default=None)


async def answer_input_requests(upstream: str, downstream: Downstream,
                                requests: Any) -> dict[str, dict[str, Any]]:
    """Ask the downstream client each of an `input_required` result's requests; the answers by key."""
    if not isinstance(requests, dict) or not requests:
        raise UpstreamError(upstream, f"upstream {upstream!r} answered input_required without input requests")
    answers: dict[str, dict[str, Any]] = {}
    for key, request in requests.items():
        method = request.get("method") if isinstance(request, dict) else None
        if method not in ASKS:
            raise UpstreamError(upstream, f"upstream {upstream!r} asked for {method!r}, which Triad cannot relay")
        request_model, result_model = ASKS[method]
        try:
            parsed = request_model.model_validate(request, by_name=False)
        except ValidationError:
            raise UpstreamError(upstream, f"upstream {upstream!r} sent a malformed {method} input request") from None
        answer = await downstream.ask(parsed, result_model)
        if isinstance(answer, types.ErrorData):
            raise UpstreamError(upstream, f"the client did not answer {method} for upstream {upstream!r}: "
                                f"{answer.message}")
        answers[key] = answer.model_dump(by_alias=True, mode="json", exclude_none=True)
    return answers
