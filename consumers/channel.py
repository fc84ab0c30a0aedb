"""One upstream session as the call path sees it: a channel that sends one request and returns its raw result.

Two implementations, one per way Triad talks to a live session:
- `SdkChannel`: the SDK's `ClientSession`. Progress comes by a token of Triad's own, routed off the session's read
  stream (`consumers._progress`), so it keeps every field and number type the upstream sent; a 2026-07-28
  upstream's `input_required` rounds are answered by asking a handshake-era client (a 2026-07-28 client gets the
  result and retries itself).
- `consumers.http_hop.HttpHop`: Triad's direct HTTP path on a handshake-era streamable HTTP session the SDK
  opened (one POST, its reply read as JSON or SSE).

Both follow the same HTTP rules (`consumers._http_rules`). The upstream's own requests and notifications during a
request reach the request's downstream (`consumers.relay`); those outside requests go to the session's owner task.
"""

from __future__ import annotations

from typing import Any, Protocol

from mcp import ClientSession

from consumers._sdk import send_raw
from consumers.errors import UpstreamError
from consumers.relay import Downstream, InFlight, ProgressFn, answer_input_requests, with_params, with_progress_token

MAX_INPUT_ROUNDS = 10
"""A bound on `input_required` rounds Triad answers for a handshake-era client, in case an upstream asks forever."""


class Channel(Protocol):
    async def request(self, request: Any, on_progress: ProgressFn, downstream: Downstream | None) -> dict[str, Any]:
        """Send `request`, report its progress to `on_progress`, put the upstream's questions to `downstream`;
        the raw result (a JSON-RPC error raises the SDK's `MCPError`)."""
        ...


class SdkChannel:
    def __init__(self, upstream: str, session: ClientSession, relays: InFlight) -> None:
        self._upstream = upstream
        self._session = session
        self._relays = relays

    async def request(self, request: Any, on_progress: ProgressFn, downstream: Downstream | None) -> dict[str, Any]:
        return await self._relays.progress.routed(
            on_progress, lambda token: self._rounds(request, token, downstream),
            lambda: downstream.cancel_reason if downstream is not None else None)

    async def _rounds(self, request: Any, token: str, downstream: Downstream | None) -> dict[str, Any]:
        request = with_progress_token(request, token)
        result = await send_raw(self._session, request)
        for _ in range(MAX_INPUT_ROUNDS):
            if result.get("resultType") != "input_required" or downstream is None or downstream.modern:
                return result
            answers = await answer_input_requests(self._upstream, downstream, result.get("inputRequests"))
            request = with_params(request, {"inputResponses": answers, "requestState": result.get("requestState")})
            result = await send_raw(self._session, request)
        raise UpstreamError(self._upstream, f"upstream {self._upstream!r} asked for input more than "
                            f"{MAX_INPUT_ROUNDS} times in one {request.method}")
