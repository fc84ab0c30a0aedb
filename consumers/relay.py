"""The seam between an upstream's server->client traffic and the downstream request that caused it.

The exposer sets `CURRENT_DOWNSTREAM` around each downstream request it forwards (the one ContextVar Triad has).
An upstream's log notifications and its sampling, elicitation and roots requests are relayed to that downstream:
over streamable HTTP the SDK carries the ContextVar into the callback (the upstream answers on the request's own
stream); over stdio and SSE it does not, so the upstream's single call in flight is used, and with several in
flight a request is refused with a clear error rather than sent to the wrong client.
"""

from __future__ import annotations

from contextvars import ContextVar
from typing import Any, Protocol

import mcp_types as types


class Downstream(Protocol):
    async def log(self, params: types.LoggingMessageNotificationParams) -> None: ...

    async def ask(self, request: Any, result_type: Any) -> Any:
        """Send a server->client request to the downstream client; its result, or an `ErrorData`."""
        ...


CURRENT_DOWNSTREAM: ContextVar[Downstream | None] = ContextVar("triad_current_downstream", default=None)
