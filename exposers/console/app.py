"""The console's routes: sign-in, the read-only pages, and the actions (approve a pinned tool, answer a call that
waits for approval, sign out).

Pages are rendered on the server (Jinja2, autoescaped); `static/console.js` only re-fetches the page every few
seconds and swaps its `<main>` (no build step, no inline script: the Content-Security-Policy allows scripts and
styles from this origin only). Every response carries that policy, `no-store`, and refuses to be framed.

Ownership: `build_console` is called once by `exposers.http.build_app` when `console.enabled`; the app it returns
holds the console's sign-ins and the upstream state clock, and reads everything else from the dispatcher and the
reloader on each request.
"""

from __future__ import annotations

import datetime
from collections.abc import Awaitable, Callable
from pathlib import Path
from urllib.parse import parse_qs

import jinja2
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import RedirectResponse, Response
from starlette.routing import Mount, Route
from starlette.staticfiles import StaticFiles
from starlette.templating import Jinja2Templates
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from consumers import JSONObject
from exposers._throttle import AuthThrottle, source_key
from exposers.console import pages
from exposers.console.auth import (
    COOKIE,
    COOKIE_PATH,
    CSRF_FIELD,
    ConsoleSession,
    ConsoleSessions,
    csrf_ok,
    same_origin,
)
from gateway.calls import Dispatcher
from gateway.observe import Reloads
from gateway.state import PinStateUnreadable, SharedStateUnavailable

HERE = Path(__file__).parent
CONTENT_SECURITY_POLICY = ("default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self'; "
                           "connect-src 'self'; form-action 'self'; frame-ancestors 'none'; base-uri 'none'")
SECURITY_HEADERS = [
    (b"content-security-policy", CONTENT_SECURITY_POLICY.encode()),
    (b"x-frame-options", b"DENY"),
    (b"x-content-type-options", b"nosniff"),
    (b"referrer-policy", b"same-origin"),
    (b"cache-control", b"no-store"),
]
MAX_FORM_BYTES = 16 * 1024
"""A console form is a token or a tool name and a CSRF token; anything larger is refused unread."""

Handler = Callable[[Request, ConsoleSession], Awaitable[Response]]


class _SecurityHeaders:
    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        async def with_headers(message: Message) -> None:
            if message["type"] == "http.response.start":
                message["headers"] = [*message.get("headers", []), *SECURITY_HEADERS]
            await send(message)

        await self.app(scope, receive, with_headers)


def _when(value: float | None) -> str:
    if value is None:
        return ""
    return datetime.datetime.fromtimestamp(value).strftime("%Y-%m-%d %H:%M:%S")


def _templates() -> Jinja2Templates:
    env = jinja2.Environment(loader=jinja2.FileSystemLoader(HERE / "templates"), autoescape=True,
                             undefined=jinja2.StrictUndefined)
    env.filters["when"] = _when
    return Jinja2Templates(env=env)


def build_console(dispatcher: Dispatcher, reloader: Reloads | None, throttle: AuthThrottle) -> ASGIApp:
    """`throttle`: the listener's brake on failed authentications; a wrong sign-in token counts against its
    source, and a source over the limit gets 429 before its token is compared."""
    templates = _templates()
    sessions = ConsoleSessions(dispatcher.config.console.session_lifetime)
    clock = pages.StateClock(dispatcher)

    def render(request: Request, name: str, session: ConsoleSession | None, *, status_code: int = 200,
               **context: object) -> Response:
        return templates.TemplateResponse(request, name, {"session": session, "csrf_field": CSRF_FIELD,
                                                          "page": name.removesuffix(".html"), **context},
                                          status_code=status_code)

    def signed_in(handler: Handler, *, approvers: bool = False) -> Callable[[Request], Awaitable[Response]]:
        """`approvers`: a page an approver who is not an owner may use too (the approval queue)."""

        async def endpoint(request: Request) -> Response:
            session = sessions.lookup(dispatcher.config, request)
            if session is None:
                if request.method != "GET":
                    return refused(request, "sign in first")
                return RedirectResponse("/console/login", status_code=303)
            if not session.owner and not approvers:
                return refused(request, "only owners may use this page; approvers answer the approval queue")
            if request.method != "GET":
                form = await _form(request)
                if form is None:
                    return refused(request, "the form is too large")
                if not same_origin(request):
                    return refused(request, "this action came from another site")
                if not csrf_ok(session, form.get(CSRF_FIELD)):
                    return refused(request, "the form's CSRF token is missing or wrong")
                request.state.form = form
            return await handler(request, session)

        return endpoint

    def refused(request: Request, why: str) -> Response:
        return render(request, "refused.html", None, status_code=403, why=why)

    async def login(request: Request) -> Response:
        if request.method == "GET":
            return render(request, "login.html", None, error=None)
        source = source_key(request.scope)
        if (throttled := throttle.refusal((source,))) is not None:
            return throttled
        form = await _form(request)
        if form is None or not same_origin(request):
            return refused(request, "sign-in must come from the console's own page")
        token = form.get("token")
        found = sessions.sign_in(dispatcher.config, token) if isinstance(token, str) else None
        if found is None:
            throttle.failed("console_sign_in", source)
            return render(request, "login.html", None, status_code=401,
                          error="That is not the token of an owner client.")
        session_id, session = found
        response = RedirectResponse("/console/upstreams" if session.owner else "/console/approvals", status_code=303)
        response.set_cookie(COOKIE, session_id, max_age=int(sessions.lifetime), path=COOKIE_PATH, httponly=True,
                            samesite="strict", secure=request.url.scheme == "https")
        return response

    async def logout(request: Request, _session: ConsoleSession) -> Response:  # approvers sign out too
        sessions.sign_out(request)
        response = RedirectResponse("/console/login", status_code=303)
        response.delete_cookie(COOKIE, path=COOKIE_PATH, httponly=True, samesite="strict")
        return response

    async def home(request: Request) -> Response:
        return RedirectResponse("/console/upstreams", status_code=303)

    async def upstreams(request: Request, session: ConsoleSession) -> Response:
        return render(request, "upstreams.html", session, upstreams=pages.upstreams(dispatcher, clock))

    async def registry(request: Request, session: ConsoleSession) -> Response:
        client = request.query_params.get("client") or session.client_id
        try:
            plan = pages.plan(dispatcher, client)
        except KeyError:
            return render(request, "registry.html", session, status_code=404, clients=pages.client_ids(dispatcher),
                          client=client, plan=None, tools=pages.tools(dispatcher))
        return render(request, "registry.html", session, clients=pages.client_ids(dispatcher), client=client,
                      plan=plan, tools=pages.tools(dispatcher))

    async def explain(request: Request, session: ConsoleSession) -> Response:
        client = request.query_params.get("client") or session.client_id
        tool = request.query_params.get("tool", "")
        try:
            report = pages.explanation(dispatcher, client, tool)
        except KeyError:
            return refused(request, "no such client")
        return render(request, "explain.html", session, report=report)

    async def tool(request: Request, session: ConsoleSession) -> Response:
        found = pages.definition(dispatcher, request.query_params.get("name", ""))
        if found is None:
            return refused(request, "no such tool")
        return render(request, "tool.html", session, tool=found)

    async def calls(request: Request, session: ConsoleSession) -> Response:
        found = pages.calls(dispatcher)
        return render(request, "calls.html", session, in_flight=found["in_flight"], recent=found["recent"])

    async def reloads(request: Request, session: ConsoleSession) -> Response:
        return render(request, "reloads.html", session, **pages.reloads(dispatcher, reloader))

    def pins_unavailable(request: Request, session: ConsoleSession) -> Response:
        return render(request, "pins.html", session, status_code=503, configured=True, rows=[], approved=None,
                      unavailable=True)

    async def pins(request: Request, session: ConsoleSession) -> Response:
        try:
            configured, rows = await pages.pending_pins(dispatcher)
        except (SharedStateUnavailable, PinStateUnreadable):
            return pins_unavailable(request, session)
        return render(request, "pins.html", session, configured=configured, rows=rows,
                      approved=request.query_params.get("approved"), unavailable=False)

    async def approve(request: Request, session: ConsoleSession) -> Response:
        tool, digest = request.state.form.get("tool"), request.state.form.get("digest")
        try:
            why = await pages.approve(dispatcher, tool, digest) if isinstance(tool, str) and isinstance(
                digest, str) else "no tool or digest given"
        except (SharedStateUnavailable, PinStateUnreadable):
            return pins_unavailable(request, session)
        if why is not None:
            return refused(request, why)
        return RedirectResponse(f"/console/pins?approved={tool}", status_code=303)

    async def approvals(request: Request, session: ConsoleSession) -> Response:
        try:
            rows = await pages.approvals(dispatcher)
        except SharedStateUnavailable:
            return render(request, "approvals.html", session, status_code=503, rows=[], answered=None,
                          unavailable=True)
        return render(request, "approvals.html", session, rows=rows, answered=request.query_params.get("answered"),
                      unavailable=False)

    async def answer(request: Request, session: ConsoleSession) -> Response:
        form = request.state.form
        try:
            why = await pages.answer(dispatcher, session.client_id, form.get("id"), form.get("decision"),
                                     form.get("reason"))
        except SharedStateUnavailable:
            why = "the cluster's approval queue is in Redis, which is unreachable now; try again once it is back"
        if why is not None:
            return refused(request, why)
        return RedirectResponse(f"/console/approvals?answered={form.get('decision')}", status_code=303)

    app = Starlette(routes=[
        Route("/", home),
        Route("/login", login, methods=["GET", "POST"]),
        Route("/logout", signed_in(logout, approvers=True), methods=["POST"]),
        Route("/upstreams", signed_in(upstreams)),
        Route("/registry", signed_in(registry)),
        Route("/explain", signed_in(explain)),
        Route("/tool", signed_in(tool)),
        Route("/calls", signed_in(calls)),
        Route("/reloads", signed_in(reloads)),
        Route("/pins", signed_in(pins)),
        Route("/pins/approve", signed_in(approve), methods=["POST"]),
        Route("/approvals", signed_in(approvals, approvers=True)),
        Route("/approvals/answer", signed_in(answer, approvers=True), methods=["POST"]),
        Mount("/static", app=StaticFiles(directory=HERE / "static")),
    ])
    return _SecurityHeaders(app)


async def _form(request: Request) -> JSONObject | None:
    """The urlencoded form of a POST, or None when it is larger than `MAX_FORM_BYTES`."""
    length = request.headers.get("content-length")
    if length is not None and (not length.isdigit() or int(length) > MAX_FORM_BYTES):
        return None
    body = b""
    async for chunk in request.stream():
        body += chunk
        if len(body) > MAX_FORM_BYTES:
            return None
    return {key: values[0] for key, values in parse_qs(body.decode(errors="replace")).items()}
