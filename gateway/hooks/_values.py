"""What hooks see and return: the downstream session (`Session`), one request (`CallContext`), what a before-hook
may answer (`Arguments`, `Block`), what an after-hook sees (`Outcome`) and what an `on_message` hook sees
(`Message`). Plain values; the chain (`gateway.hooks`) and the hook protocols sit above them.
"""

from __future__ import annotations

import logging
import secrets
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from typing import Literal

import anyio
import mcp_types as types

from consumers import JSON, Downstream, JSONObject, Share
from gateway.registry import ListedKind

logger = logging.getLogger("triad.hooks")

Kind = Literal["tool", "resource", "prompt"]
MessageKind = Literal["log", "progress", "error", "completion", "request"]
_REQUEST_KEPT = frozenset({"mode", "task", "elicitationId"})
"""What routes a relayed request rather than saying something: its elicitation mode, task and id."""
_RELAYED_REQUESTS = (types.CreateMessageRequestParams, types.ElicitRequestFormParams, types.ElicitRequestURLParams)
MESSAGE_FIELDS: Mapping[MessageKind, tuple[str, ...]] = {
    "log": ("data", "logger"), "progress": ("message",), "error": ("message", "data"),
    "completion": ("completion", "_meta"),
    # every field the spec gives a sampling or elicitation request, from the SDK's models: a new one is covered
    "request": tuple(sorted({str(f.alias or n) for m in _RELAYED_REQUESTS for n, f in m.model_fields.items()}
                            - _REQUEST_KEPT)),
}
"""What an `on_message` hook may replace in each kind of message's params: a log or progress message, an upstream's
error, a completion's result, and a sampling or elicitation request an upstream sends its client."""
LISTED_NAMES: Mapping[ListedKind, str] = {"tool": "name", "resource": "uri", "template": "uriTemplate",
                                          "prompt": "name"}
"""The identifier of each kind of catalog entry: what a client calls, reads or gets it by, which no `on_listed`
hook may change (the registry routes by it)."""
CLOSE_TIMEOUT = 5.0
"""How long the clean-up of an ended session (its per-client upstream sessions) may take."""


@dataclass(eq=False)
class Session:
    """One downstream client session: its hook state and lock (hooks run under it; the upstream call never does),
    the way back to its client outside any request (`back`, for per-client upstream sessions), and what to clean
    up when it ends. The exposer that owns the session calls `close()` once, when it ends (`consumers.ClientOrigin`).
    A request without a session (2026-07-28) gets a fresh one with no `back`."""

    id: str | None = None
    key: str = field(default_factory=lambda: secrets.token_hex(20))
    """What names the session in shared tables (`gateway.tasks.TaskBook`): derived from the transport's session id
    where there is one (`exposers.server.hook_session`, as `gateway.cluster` keys its session records), else
    random; never the session id itself, which is a bearer secret."""
    state: dict[str, object] = field(default_factory=dict)
    """What hooks keep for the session (a plugin's own objects as well as JSON)."""
    lock: anyio.Lock = field(default_factory=anyio.Lock)
    back: Downstream | None = None
    user: str | None = None
    """Who the session belongs to, as the key of its upstream credentials (`auth: per_user`), once its first
    request fixed its identity (`gateway.identity.credential_owner`)."""
    declared: JSONObject | None = None
    """A 2026-07-28 request's capabilities, from its envelope (its session has no way back to ask)."""
    share: Share | None = None
    """Its identity's fair share of per-client upstreams (`gateway.quotas.share_of`), set with `user`."""
    _closers: list[Callable[[], Awaitable[None]]] = field(default_factory=list)

    def on_close(self, callback: Callable[[], Awaitable[None]]) -> None:
        self._closers.append(callback)

    async def close(self) -> None:
        closers, self._closers = self._closers, []
        with anyio.move_on_after(CLOSE_TIMEOUT, shield=True):
            for closer in closers:
                try:
                    await closer()
                except Exception:  # one failed clean-up must not skip the others
                    logger.exception("cleaning up after a client session failed")


@dataclass
class CallContext:
    """What hooks see of one request. `arguments` are what the executor will send (after rewrites)."""

    kind: Kind
    client_id: str
    session: Session
    name: str
    upstream: str
    raw_name: str
    arguments: JSONObject
    annotations: Mapping[str, JSON] = field(default_factory=dict)
    input_schema: Mapping[str, JSON] | None = None
    definition: Mapping[str, JSON] | None = None
    """The tool's definition as the upstream sent it (description, schemas, annotations)."""
    timeout: float | None = None
    """A deadline for the upstream call that a hook may set (reset by progress, capped by `max_time`)."""
    max_time: float | None = None
    subject: str | None = None
    """The OAuth subject (`sub`) of the caller's access token; None for a caller without one."""



@dataclass(frozen=True)
class Arguments:
    values: Mapping[str, JSON]
    replace: bool = False


@dataclass(frozen=True)
class Block:
    reason: str
    hook: str = ""
    """The name of the hook that blocked (the chain fills it in)."""


@dataclass(frozen=True)
class Outcome:
    """What after-hooks see: the raw result (None if the call failed), the error text, and the duration."""

    result: JSONObject | None
    error: str | None
    duration: float
    blocked: bool = False


@dataclass(frozen=True)
class Message:
    """What an upstream says to a client besides a call's result, in wire form: a log message
    (`notifications/message` params: level, logger, data), a progress message (progress, total, message), its
    error (code, message, data), a completion's result (completion, `_meta`), or a sampling or elicitation request
    it sends the client (that request's params)."""

    kind: MessageKind
    params: Mapping[str, JSON]
