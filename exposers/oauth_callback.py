"""`GET /oauth/callback/<upstream>`: where a person's browser brings back their own authorization at an upstream
(`auth: per_user`), so that a user on any machine can authorize, not only one on Triad's.

The authorization is the one waiting under the answer's `state` (`consumers.oauth`): unguessable, used
once, expiring, recorded with the user it was started for. A browser proves nothing more, but a request that
carries a bearer token must be that user's. Every refusal is a page that says why and changes nothing. The query
(code, state) is never logged: uvicorn's access log is off and nothing here logs it.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from html import escape

from starlette.requests import Request
from starlette.responses import HTMLResponse, Response
from starlette.routing import Route
from starlette.types import ASGIApp, Receive, Scope, Send

from consumers.oauth import CALLBACK_PREFIX, Answer, Redirects

__all__ = ["callback_route"]

Caller = Callable[[Request], Awaitable[str | None]]
"""The user (`gateway.identity.credential_owner`) a request's bearer token proves; None without one. Raises
`PermissionError` for a token that proves no one."""

_STATUS = {Answer.ACCEPTED: 200, Answer.UNKNOWN: 400, Answer.OTHER_UPSTREAM: 400, Answer.OTHER_IDENTITY: 403}


def callback_route(redirects: Redirects, caller: Caller,
                   wrap: Callable[[ASGIApp], ASGIApp] | None = None) -> Route:
    """`wrap`: with `cluster:`, forwards an answer another replica waits for (`ClusterRouter.callbacks`)."""

    async def callback(request: Request) -> Response:
        query = request.query_params
        try:
            user = await caller(request)
        except PermissionError:
            return _page(Answer.OTHER_IDENTITY)
        answer = redirects.answer(request.path_params["upstream"], query.get("state") or "", user,
                                  query.get("code") or "", query.get("iss"))
        return _page(answer)

    async def app(scope: Scope, receive: Receive, send: Send) -> None:
        await (await callback(Request(scope, receive, send)))(scope, receive, send)

    return Route(CALLBACK_PREFIX + "{upstream}", endpoint=_Asgi(wrap(app)) if wrap is not None else callback,
                 methods=["GET"])


class _Asgi:
    """An ASGI app as a route's endpoint (Starlette calls an endpoint that is a plain function with a Request)."""

    def __init__(self, app: ASGIApp) -> None:
        self._app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        await self._app(scope, receive, send)


def _page(answer: Answer) -> Response:
    body = f"<!doctype html><title>Triad</title><p>{escape(answer.value)}"
    return HTMLResponse(body, status_code=_STATUS[answer], headers={"Cache-Control": "no-store",
                                                                    "Referrer-Policy": "no-referrer"})
