"""Server->client requests of a handshake-era upstream, put to a 2026-07-28 client as `input_required` rounds.

A 2026-07-28 client cannot be sent requests; it is answered `input_required` and retries with `inputResponses`.
An upstream of the handshake era asks mid-call instead (sampling, elicitation, roots) and waits for the answer.
So for a 2026-07-28 client the call runs as a *flight*: in a task of its own owned by `InputRounds.run()`
(`call`, for the SDK's handlers, which must return their result), or in the request's own task (`call_here`,
for Triad's own HTTP path, which owns its reply and answers it while the call goes on). When the upstream asks,
the client's request is answered `input_required` with a `requestState` naming the flight, and the flight waits,
parked, with the upstream's call still open. The client's retry carries the answer to the
waiting upstream request and then waits for the flight's next event: its result, or the upstream's next
question. A parked flight that is not resumed within `PARKED_TTL` is cancelled (the upstream call with it); a
state that names no parked flight of the same client and method gets the SDK's own "Invalid or expired
requestState" error.
"""

from __future__ import annotations

import logging
import secrets
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

import anyio
import mcp_types as types
from anyio.abc import TaskGroup
from mcp.shared.exceptions import MCPError

from consumers import CURRENT_DOWNSTREAM, JSON, Answer, JSONObject, undeclared
from exposers.relay import Relay
from gateway.identity import Identity, same_principal

logger = logging.getLogger("triad.exposer")

STATE_PREFIX = "triad-round:"
"""Marks a `requestState` Triad minted; any other state belongs to a 2026-07-28 upstream and passes through."""
PARKED_TTL = 300.0
"""How long a parked call waits for the client's retry before it is cancelled."""
MAX_PARKED = 1000
"""A bound on parked calls, so clients that never retry cannot grow memory without limit."""
INPUT_KEY = "input"


Forward = Callable[[Any], Awaitable[JSONObject]]
"""Runs the request with the given downstream (a flight's relay) and returns its result."""


@dataclass
class _Question:
    request: Any
    result_type: Any
    answered: anyio.Event = field(default_factory=anyio.Event)
    answer: Any = None


class _RoundRelay:
    """The downstream of a flight: logs and progress go to whichever request of the client is current (`current`,
    the relay of that request), and the upstream's questions become events of the flight."""

    modern = False  # the upstream's requests are asked here, never passed through as input_required

    def __init__(self, current: Relay, flight: _Flight, park: Callable[[_Flight, _Question], JSONObject]) -> None:
        self.current = current
        self._flight = flight
        self._park = park

    @property
    def capabilities(self) -> JSONObject | None:
        return self.current.capabilities

    @property
    def log_level(self) -> str | None:
        return self.current.log_level

    @property
    def cancellation(self) -> JSONObject | None:
        return self.current.cancellation

    async def log(self, params: types.LoggingMessageNotificationParams) -> None:
        await self.current.log(params)

    async def progress(self, params: JSONObject) -> None:
        await self.current.progress(params)

    async def ask(self, request: types.ServerRequest, result_type: type[Answer]) -> Answer | types.ErrorData:
        if (refused := undeclared(request, self.capabilities)) is not None:
            return refused
        question = _Question(request, result_type)
        if (answer := self._flight.answer_here) is not None:  # a flight in its request's own task: answer it now
            try:
                parked = self._park(self._flight, question)
            except MCPError as exc:
                return exc.error
            self._flight.answer_here = None
            await answer(parked)
        else:
            await self._flight.events.send(question)
        await question.answered.wait()
        got: Answer | types.ErrorData = question.answer  # validated as `result_type` where it is answered
        return got


@dataclass
class _Flight:
    owner: Identity
    method: str
    events: Any
    receive: Any
    scope: anyio.CancelScope = field(default_factory=anyio.CancelScope)
    expiry: anyio.CancelScope = field(default_factory=anyio.CancelScope)
    question: _Question | None = None
    relay: _RoundRelay | None = None
    outcome: Any = None
    answer_here: Callable[[JSONObject], Awaitable[None]] | None = None
    """For a flight run in its first request's task (`call_here`), until the first question: how to answer that
    request with the round."""


def round_owner(state: JSON) -> str | None:
    """The replica a round's `requestState` names (with `cluster:`, flights are parked on the replica that asked;
    `exposers.cluster_routes` forwards the retry there). None for a state without one."""
    if not isinstance(state, str) or not state.startswith(STATE_PREFIX):
        return None
    replica, dot, _token = state[len(STATE_PREFIX):].partition(".")
    return replica if dot else None


class InputRounds:
    def __init__(self, replica: str | None = None) -> None:
        self._replica = replica
        """With `cluster:`, this replica's id, sealed into the states of the rounds parked here."""
        self._task_group: TaskGroup | None = None
        self._parked: dict[str, _Flight] = {}

    async def run(self) -> None:
        """Own the flights' tasks; started once in the daemon's task group."""
        async with anyio.create_task_group() as tg:
            self._task_group = tg
            await anyio.sleep_forever()

    async def call(self, request: Relay, method: str, params: Mapping[str, JSON], owner: Identity,
                   forward: Forward) -> JSONObject:
        """Run `forward(relay)` for a 2026-07-28 client's request (`request` is its relay): its result, or an
        `input_required` round. The flight's relay follows the client's requests from round to round (logs and
        progress go to the current one)."""
        state = params.get("requestState")
        if isinstance(state, str) and state.startswith(STATE_PREFIX):
            return await self._resume(request, method, params, owner, state)
        if self._task_group is None:
            raise RuntimeError("InputRounds.run() is not running")
        flight = self._flight(request, method, owner)
        self._task_group.start_soon(self._fly, flight, forward)
        return await self._next(flight)

    async def call_here(self, request: Relay, method: str, params: Mapping[str, JSON], owner: Identity,
                        forward: Forward, answer: Callable[[JSONObject], Awaitable[None]]) -> JSONObject | None:
        """`call` for a caller that owns its reply (Triad's own HTTP path): the call runs in the caller's task, so
        a call that asks nothing costs no task of its own. A first question is answered on the caller's reply
        through `answer`, and the call goes on here; what comes next goes to the client's retry, as with `call`.
        Returns the result, or None when it went to a retry."""
        state = params.get("requestState")
        if isinstance(state, str) and state.startswith(STATE_PREFIX):
            return await self._resume(request, method, params, owner, state)
        flight = self._flight(request, method, owner)
        flight.answer_here = answer
        await self._fly(flight, forward)
        outcome: JSONObject | None = flight.outcome if flight.answer_here is not None else None
        return outcome

    def _flight(self, request: Relay, method: str, owner: Identity) -> _Flight:
        send, receive = anyio.create_memory_object_stream[Any](1)
        flight = _Flight(owner, method, send, receive)
        flight.relay = _RoundRelay(request, flight, self._park)
        return flight

    async def _fly(self, flight: _Flight, forward: Forward) -> None:
        assert flight.relay is not None
        token = CURRENT_DOWNSTREAM.set(flight.relay)
        try:
            with flight.scope:
                try:
                    outcome: Any = await forward(flight.relay)
                except Exception as exc:  # delivered to the client's current request, which raises it
                    if flight.answer_here is not None:
                        raise
                    outcome = exc
                if flight.answer_here is not None:
                    flight.outcome = outcome
                else:
                    await flight.events.send(outcome)
        finally:
            CURRENT_DOWNSTREAM.reset(token)
            flight.events.close()

    async def _next(self, flight: _Flight) -> JSONObject:
        """Wait for the flight's result or its next question; a client that goes away takes the flight along."""
        try:
            event = await flight.receive.receive()
        except BaseException:
            flight.scope.cancel()
            raise
        if isinstance(event, Exception):
            raise event
        if not isinstance(event, _Question):
            result: JSONObject = event
            return result
        try:
            return self._park(flight, event)
        except MCPError:
            flight.scope.cancel()
            raise

    def _park(self, flight: _Flight, question: _Question) -> JSONObject:
        """Park `flight` on `question` until the client's retry (or `PARKED_TTL`); the round that asks it."""
        if len(self._parked) >= MAX_PARKED:
            raise MCPError(types.INTERNAL_ERROR, f"Triad has {MAX_PARKED} calls waiting for input already; "
                           "answer or abandon those first")
        flight.question = question
        state = STATE_PREFIX + (f"{self._replica}." if self._replica else "") + secrets.token_urlsafe(24)
        self._parked[state] = flight
        flight.expiry = anyio.CancelScope()
        assert self._task_group is not None
        self._task_group.start_soon(self._expire, state, flight)
        return _round(question, state)

    async def _resume(self, request: Relay, method: str, params: Mapping[str, JSON], owner: Identity,
                      state: str) -> JSONObject:
        flight = self._parked.get(state)
        # `principal` is not part of an identity's equality: a round, like a session, is its subject's alone
        if flight is None or flight.owner != owner or not same_principal(flight.owner, owner) \
                or flight.method != method:
            raise MCPError(types.INVALID_PARAMS, "Invalid or expired requestState")
        question = flight.question
        assert question is not None and flight.relay is not None
        answer = (params.get("inputResponses") or {}).get(INPUT_KEY)
        if answer is None:  # asked again, same state: the client may still answer
            return _round(question, state)
        del self._parked[state]
        flight.expiry.cancel()
        try:
            question.answer = question.result_type.model_validate(answer, by_name=False)
        except ValueError:
            question.answer = types.ErrorData(code=types.INVALID_PARAMS, message=(
                f"the client's answer to {question.request.method} is not a valid result"))
        flight.relay.current = request  # from now on, logs and progress go to this request
        flight.question = None
        question.answered.set()
        return await self._next(flight)

    async def _expire(self, state: str, flight: _Flight) -> None:
        with flight.expiry:  # cancelled when the client's retry comes
            await anyio.sleep(PARKED_TTL)
        if self._parked.get(state) is flight:
            del self._parked[state]
            logger.info("a call waiting for a client's input was cancelled after %gs without a retry", PARKED_TTL)
            flight.scope.cancel()


def _round(question: _Question, state: str) -> JSONObject:
    """The `input_required` result that puts `question` to the client."""
    request = question.request.model_dump(by_alias=True, mode="json", exclude_none=True)
    return {"resultType": "input_required", "inputRequests": {INPUT_KEY: request}, "requestState": state}
