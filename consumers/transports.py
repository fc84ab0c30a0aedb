"""Opening one upstream transport from its config: stdio child, streamable HTTP, or legacy SSE.

`open_transport` is an async context manager yielding the SDK's `(read, write)` streams, and for streamable HTTP
the `HttpLink` the direct path uses (`consumers._direct_http`); the upstream's owner task enters and exits
it. A stdio child runs in a process group of its own, ended whole on close (`consumers.child_process`); its
stderr is read line by line into Triad's log, tagged with the upstream's name, and its last lines and exit code
into the upstream's `ChildOutput`.
"""

from __future__ import annotations

import logging
import ssl
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from typing import TYPE_CHECKING, TypeVar

import anyio
import httpx2
import mcp_types as types
from mcp.client.sse import sse_client
from mcp.client.streamable_http import streamable_http_client
from mcp.shared._httpx_utils import McpHttpClientFactory

from consumers._errors import UNAVAILABLE_DATA_KEY, UNAVAILABLE_STATUSES
from consumers._http_rules import HTTP_RULES
from consumers._json import loads
from consumers._sdk import ReadEnd, WriteEnd
from consumers._spans import sdk_trace_headers
from consumers.child_process import ChildOutput, open_child
from consumers.config import UpstreamConfig, UpstreamTlsConfig
from consumers.errors import UpstreamUnavailable
from consumers.oauth import CredentialUse, UpstreamOAuth

if TYPE_CHECKING:
    from consumers._direct_http import HttpLink

logger = logging.getLogger("triad.upstream")

TlsContexts = Callable[[str, UpstreamTlsConfig | None], ssl.SSLContext]
"""Where an upstream's connections get the TLS context of its `tls` settings: (upstream name, settings) -> context
(`TlsContext`)."""
_T = TypeVar("_T")

HTTP_CONNECT_TIMEOUT = 10.0
SSE_READ_TIMEOUT = 300.0
"""How long an SSE stream may stay silent before the transport gives up; calls have their own deadline."""


@asynccontextmanager
async def open_transport(name: str, config: UpstreamConfig, cwd: str | None, output: ChildOutput | None = None,
                         tls: TlsContexts | None = None, auth: CredentialUse | None = None
                         ) -> AsyncIterator[tuple[ReadEnd, WriteEnd, HttpLink | None]]:
    """`output`: where a stdio child's last stderr lines and exit code are kept (the upstream's state). `tls`:
    where the TLS context of the upstream's `tls` settings is made once and shared (`TlsContext`; making one loads
    the CA bundle: tens of milliseconds of CPU, which a per-client session would otherwise pay at every opening);
    the SDK's httpx2 client and the direct path's aiohttp session both use it. `auth`: for an upstream
    with `auth`, which credential to use (default: Triad's own, made for this connection alone)."""
    kind = config.kind
    if kind == "stdio":
        assert config.command is not None
        env = {key: value.get_secret_value() for key, value in config.env.items()}
        async with open_child(config.command, config.args, env, cwd, output or ChildOutput(name),
                              config.sandboxed) as (read, write):
            yield read, write, None
        return
    headers = {key: value.get_secret_value() for key, value in config.headers.items()}
    assert config.url is not None
    context = (tls or TlsContext())(name, config.tls)
    if kind == "sse":
        async with sse_client(config.url, headers=headers, timeout=HTTP_CONNECT_TIMEOUT,
                              sse_read_timeout=SSE_READ_TIMEOUT,
                              httpx_client_factory=_verifying_client(context)) as (read, write):
            yield read, write, None
        return
    # Imported here: aiohttp (about 9 MB) is loaded only when some upstream speaks streamable HTTP.
    from consumers._direct_http import open_link

    timeout = httpx2.Timeout(HTTP_CONNECT_TIMEOUT, read=max(config.timeout, SSE_READ_TIMEOUT))
    transport = _DrainingTransport(httpx2.AsyncHTTPTransport(verify=context))
    oauth = None
    if config.auth is not None:
        use = auth or CredentialUse()
        oauth = use.credentials.get(config.url, config.auth, use.user, use.ask) if use.credentials is not None \
            else UpstreamOAuth(name, config.url, config.auth, use.ask, use.user)
    async with (
        open_link(config.url, headers, HTTP_CONNECT_TIMEOUT, context, oauth) as link,
        httpx2.AsyncClient(headers=headers, timeout=timeout, follow_redirects=HTTP_RULES.follow_redirects,
                           trust_env=HTTP_RULES.trust_env, transport=transport,
                           auth=oauth.http_auth if oauth is not None else None) as http,
        streamable_http_client(config.url, http_client=http) as (read, write),
    ):
        transport.link = link
        yield read, write, link


def ssl_context(upstream: str, settings: UpstreamTlsConfig | None) -> ssl.SSLContext:
    """The one TLS context of an upstream's connections, for both of its clients (httpx2 for the SDK's session,
    aiohttp for the direct path): verification on, against `ca_bundle` (unset: what httpx2 trusts by default, the
    system's store or `SSL_CERT_FILE`/`SSL_CERT_DIR`), with Triad's client certificate where one is configured.
    A file that cannot be read or parsed is an `UpstreamUnavailable` naming the setting, never its contents."""
    if settings is None or settings.ca_bundle is None:
        context = httpx2.create_ssl_context()
    else:
        cafile = settings.ca_bundle
        context = _loaded(upstream, "ca_bundle", cafile, lambda: ssl.create_default_context(cafile=cafile))
    if settings is not None and settings.client_cert is not None:
        cert, key = settings.client_cert, settings.client_key
        _loaded(upstream, "client_cert", cert, lambda: context.load_cert_chain(cert, key))
    return context


def _loaded(upstream: str, setting: str, path: str, load: Callable[[], _T]) -> _T:
    try:
        return load()
    except OSError as exc:  # ssl.SSLError is one
        reason = (exc.reason if isinstance(exc, ssl.SSLError) else None) or exc.strerror or type(exc).__name__
        raise UpstreamUnavailable(upstream, f"upstream {upstream!r}: tls.{setting} {path!r} cannot be used: "
                                  f"{reason}") from None


MAX_TLS_CONTEXTS = 64
"""Distinct `tls` settings whose contexts a `TlsContext` keeps (a reload may bring new ones); beyond, it starts over."""


class TlsContext:
    """TLS contexts by an upstream's `tls` settings, each made at its first use (loading a CA bundle costs tens of
    milliseconds of CPU) and shared after: by an upstream's sessions, or by all of a pool's upstreams."""

    def __init__(self) -> None:
        self._contexts: dict[UpstreamTlsConfig | None, ssl.SSLContext] = {}

    def __call__(self, upstream: str, settings: UpstreamTlsConfig | None = None) -> ssl.SSLContext:
        context = self._contexts.get(settings)
        if context is None:
            if len(self._contexts) >= MAX_TLS_CONTEXTS:
                self._contexts.clear()
            context = self._contexts[settings] = ssl_context(upstream, settings)
        return context


def _verifying_client(context: ssl.SSLContext) -> McpHttpClientFactory:
    """The SDK's SSE client, as `create_mcp_http_client` makes it, verifying with `context`."""

    def create(headers: dict[str, str] | None = None, timeout: httpx2.Timeout | None = None,
               auth: httpx2.Auth | None = None) -> httpx2.AsyncClient:
        return httpx2.AsyncClient(headers=headers, auth=auth, verify=context, event_hooks={"request": [_trace_headers]},
                                  timeout=timeout or httpx2.Timeout(HTTP_CONNECT_TIMEOUT, read=SSE_READ_TIMEOUT))

    return create


async def _trace_headers(request: httpx2.Request) -> None:
    """The W3C trace headers of a message the SDK posts (`consumers._spans.sdk_trace_headers`)."""
    if request.method == "POST":
        try:
            body = request.content
        except httpx2.RequestNotRead:  # a streamed body: never one of the SDK's messages
            return
        sdk_trace_headers(body, request.headers)


DRAIN_LIMIT = 0.05
"""Seconds a closed response may take to reach its end before the connection is dropped instead of reused."""


class _DrainingTransport(httpx2.AsyncBaseTransport):
    """SDK workaround (mcp 2.3.0, `StreamableHTTPTransport._handle_sse_response`): the client closes each POST's
    SSE response as soon as the result event arrives, a moment before the server ends the stream, so httpx2 drops
    the connection and every call opens a new one. Reading the (already finished) rest of the body on close lets
    the connection go back to the pool; a stream that does not end within `DRAIN_LIMIT` is dropped as before."""

    def __init__(self, inner: httpx2.AsyncBaseTransport) -> None:
        self._inner = inner
        self.link: HttpLink | None = None
        """Told the session id the upstream assigns (the SDK keeps it to itself)."""

    async def handle_async_request(self, request: httpx2.Request) -> httpx2.Response:
        await _trace_headers(request)
        response = await self._inner.handle_async_request(request)
        if request.method == "POST" and response.status_code in UNAVAILABLE_STATUSES:
            return await _unavailable(request, response)
        if self.link is not None and (session_id := response.headers.get("mcp-session-id")):
            self.link.session_id = session_id
        if self.link is not None and request.method == "GET":
            self.link.listening.set()
        if isinstance(response.stream, httpx2.AsyncByteStream):
            response.stream = _DrainOnClose(response.stream)
        return response

    async def aclose(self) -> None:
        await self._inner.aclose()


MAX_UNAVAILABLE_BODY = 4096
"""Bytes of a 502, 503 or 504 reply Triad reads to find the upstream's own JSON-RPC error in it; a longer body is
not one (the rest is never read: the connection is dropped)."""


async def _unavailable(request: httpx2.Request, response: httpx2.Response) -> httpx2.Response:
    """A 502, 503 or 504 without a JSON-RPC error of the upstream's own becomes one that names the status (in its
    `data`), for `consumers._errors.call_failure` to count as a connection failure: the SDK would otherwise say
    only "Server returned an error response", as for any other status. Whatever answers on the upstream's URL
    (a proxy, a captive portal) may send an endless body: at most `MAX_UNAVAILABLE_BODY` bytes are read."""
    body = await _body_start(response)
    try:
        if body is not None and isinstance(loads(body).get("error"), dict):
            return httpx2.Response(response.status_code, headers=response.headers, content=body,
                                   request=request)
    except (ValueError, AttributeError):
        pass
    error = {"code": types.INTERNAL_ERROR, "message": f"HTTP {response.status_code}",
             "data": {UNAVAILABLE_DATA_KEY: response.status_code}}
    return httpx2.Response(response.status_code, json={"jsonrpc": "2.0", "id": None, "error": error},
                           request=request)


async def _body_start(response: httpx2.Response) -> bytes | None:
    """The body of `response` if it ends within `MAX_UNAVAILABLE_BODY` bytes, else None; also None for a compressed
    one (its decoding would need a bound of its own; a JSON-RPC error is small). The response is closed either way."""
    if response.headers.get("content-encoding", "identity").strip().lower() != "identity":
        await response.aclose()
        return None
    body = bytearray()
    try:
        async for chunk in response.aiter_raw():
            body += chunk
            if len(body) > MAX_UNAVAILABLE_BODY:
                return None
    finally:
        await response.aclose()
    return bytes(body)


class _DrainOnClose(httpx2.AsyncByteStream):
    def __init__(self, inner: httpx2.AsyncByteStream) -> None:
        self._inner = inner
        self._ended = False

    async def __aiter__(self) -> AsyncIterator[bytes]:
        async for chunk in self._inner:
            yield chunk
        self._ended = True

    async def aclose(self) -> None:
        if not self._ended:  # a stream read to its end has nothing left (reading again would wait for nothing)
            with anyio.move_on_after(DRAIN_LIMIT):
                async for _ in self._inner:
                    pass
        await self._inner.aclose()
