"""The loopback redirect an authorization code comes back on (RFC 8252 §7.3): `http://127.0.0.1:<port>/callback`,
listened on only while one authorization is waiting for it.

Opened by the OAuth flow's redirect step and closed by its callback step, both in the flow's own task.
"""

from __future__ import annotations

import anyio
from aiohttp import web
from mcp.client.auth import AuthorizationCodeResult

CALLBACK_PATH = "/callback"
PAGE = "<!doctype html><title>Triad</title><p>Triad received the authorization answer. You may close this page."


def redirect_uri(port: int) -> str:
    return f"http://127.0.0.1:{port}{CALLBACK_PATH}"


class LoopbackRedirect:
    """One authorization's redirect listener: `open()` binds it, `result()` waits for the redirect, `close()`."""

    def __init__(self, port: int) -> None:
        self.port = port
        self._received = anyio.Event()
        self._result: AuthorizationCodeResult | None = None
        self._runner: web.AppRunner | None = None

    async def open(self) -> None:
        app = web.Application()
        app.router.add_get(CALLBACK_PATH, self._callback)
        runner = web.AppRunner(app, access_log=None)  # the query carries the code: never logged
        await runner.setup()
        try:
            await web.TCPSite(runner, "127.0.0.1", self.port).start()
        except OSError as exc:
            await runner.cleanup()
            raise OSError(f"cannot listen on 127.0.0.1:{self.port} for the authorization redirect "
                          f"({exc.strerror}); set auth.redirect_port") from None
        self._runner = runner

    async def result(self) -> AuthorizationCodeResult:
        await self._received.wait()
        assert self._result is not None
        return self._result

    async def close(self) -> None:
        if self._runner is not None:
            runner, self._runner = self._runner, None
            with anyio.move_on_after(2, shield=True):
                await runner.cleanup()

    async def _callback(self, request: web.Request) -> web.Response:
        if self._received.is_set():
            return web.Response(status=409, text="this authorization was already answered")
        query = request.rel_url.query
        # An `error` answer has no code: the flow then fails with the SDK's "No authorization code received".
        self._result = AuthorizationCodeResult(code=query.get("code") or "", state=query.get("state"),
                                               iss=query.get("iss"))
        self._received.set()
        return web.Response(text=PAGE, content_type="text/html")
