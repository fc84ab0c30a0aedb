"""One client request, whatever carried it, and the one runner that serves it.

Every transport turns a request into a `ClientRequest`: the SDK's server handlers (`exposers.server`, for
streamable HTTP, legacy SSE and stdio) and Triad's direct HTTP handling (`exposers.direct`, which only saves
transport work: parsing, framing, session lookup). `serve` is then the one place where a request meets the
gateway: the dispatcher's call path (view, policy, hooks, the upstream) with the request's relay as the way back
to its client; for a 2026-07-28 client, in `input_required` rounds when an upstream of the handshake era could
ask it something. What comes back is the raw result; each transport frames it (JSON, SSE, the SDK's envelope) and
renders errors with `exposers.server.error_data`.

    socket -> transport (SDK handler | direct path) -> ClientRequest -> serve -> Dispatcher -> upstream
           <- framing (JSON / SSE / SDK)          <- raw result   <-        <- hooks     <-

Who acts: `acting_identity` is the caller's identity as its session sees it (a session answers only the identity
that opened it, narrowed by each request's own run-level lists; a 2026-07-28 request stands alone), with the
provider its client's name implies.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field

from consumers import CURRENT_DOWNSTREAM, JSON, JSONObject
from exposers.input_rounds import InputRounds
from exposers.relay import Relay, envelope_capabilities
from gateway.calls import Dispatcher
from gateway.config import TriadConfig
from gateway.hooks import Session
from gateway.identity import Identity, credential_owner, narrowed, with_provider
from gateway.quotas import share_of
from gateway.tasks import METHODS as TASKS

Answer = Callable[[JSONObject], Awaitable[None]]
"""Answers the client's request now (an `input_required` round), while the call goes on."""

FORWARDED = frozenset({"tools/call", "resources/read", "prompts/get"})
"""The methods that run on an upstream with a relay back to the client (and so may take input rounds)."""
TASK_METHODS = TASKS
"""`tasks/*`: they run on the upstream that holds the task, with the relay back to the client (never in rounds)."""


@dataclass(frozen=True, slots=True)
class ClientRequest:
    """What the gateway needs of one request: method, params, who sends it, its session's hook state, and the
    relay back to its client (which knows the era, the declared capabilities and the log level)."""

    method: str
    params: Mapping[str, JSON]
    identity: Identity
    relay: Relay
    session: Session = field(default_factory=Session)

    @property
    def wants_progress(self) -> bool:
        meta = self.params.get("_meta")
        return isinstance(meta, Mapping) and meta.get("progressToken") is not None


def acting_identity(config: TriadConfig, caller: Identity, session: Identity | None,
                    client_name: str | None, tasks: bool = False) -> Identity:
    """Who a request acts as: its session's identity narrowed by the request's own run-level lists (`narrowed`
    refuses a caller that is not the session's principal), or the caller alone where there is no session; `tasks`:
    its client takes tasks (`exposers.relay.takes_tasks`)."""
    acting = with_provider(config, narrowed(session, caller) if session is not None else caller, client_name)
    return dataclasses.replace(acting, tasks=True) if tasks else acting


def caller_session(config: TriadConfig, session: Session, identity: Identity, params: Mapping[str, JSON] | None
                   ) -> Session:
    """A 2026-07-28 request's session (its own, with no way back) knows who sends it, its share and what it
    declared: an upstream session of its own (`sessions: per_client`) is bound to those (`consumers`)."""
    if session.back is None:
        if session.user is None:
            session.user = credential_owner(identity)
            session.share = share_of(config, identity)
        if session.declared is None:
            session.declared = envelope_capabilities(params)
    return session


async def serve(dispatcher: Dispatcher, rounds: InputRounds | None, request: ClientRequest,
                answer_first: Answer | None = None) -> JSONObject | None:
    """Run `request` and return its raw result. A 2026-07-28 client whose request an upstream of the handshake
    era could question runs in input rounds: with `answer_first` (a transport that owns its reply) a first
    question is answered through it and None is returned (the result goes to the client's retry)."""
    if request.method not in FORWARDED | TASK_METHODS:
        raise ValueError(f"{request.method} is not a forwarded method")
    caller_session(dispatcher.config, request.session, request.identity, request.params)
    dispatcher.metrics.call_log.attribute(request.session, request.identity.client_id)
    with dispatcher.quotas.hold("calls_in_flight", request.identity, dispatcher.config):
        return await _run(dispatcher, rounds, request, answer_first)


async def _run(dispatcher: Dispatcher, rounds: InputRounds | None, request: ClientRequest,
               answer_first: Answer | None) -> JSONObject | None:
    if request.relay.modern and "task" in request.params:  # 2026-07-28 ignores the 2025-11-25 `task` param
        request = dataclasses.replace(request, params={k: v for k, v in request.params.items() if k != "task"})

    async def forward(relay: Relay) -> JSONObject:
        params, identity, session = request.params, request.identity, request.session
        if request.method == "tools/call":
            return await dispatcher.call_tool(identity, params, relay.progress if request.wants_progress else None,
                                              session, "2026-07-28" if request.relay.modern else "2025-11-25")
        if request.method == "resources/read":
            return await dispatcher.read_resource(identity, params, session)
        if request.method in TASK_METHODS:
            return await dispatcher.tasks.request(identity, session, request.method, params,
                                                  "2026-07-28" if request.relay.modern else "2025-11-25")
        return await dispatcher.get_prompt(identity, params, session)

    if rounds is not None and request.method in FORWARDED and request.relay.modern \
            and (not dispatcher.all_modern or dispatcher.asks_approval):
        if answer_first is None:
            return await rounds.call(request.relay, request.method, request.params, request.identity, forward)
        return await rounds.call_here(request.relay, request.method, request.params, request.identity, forward,
                                      answer_first)
    token = CURRENT_DOWNSTREAM.set(request.relay)
    try:
        return await forward(request.relay)
    finally:
        CURRENT_DOWNSTREAM.reset(token)
