"""The DNS-rebinding check of a loopback listener: `Host` and `Origin` parsed strictly and compared exactly.

The SDK's `TransportSecuritySettings` matches `127.0.0.1:*` as a prefix, so it also lets in forms no browser sends
(`127.0.0.1:80@evil`, `localhost:1 x`, a port with letters). Here a value is parsed to its shape and accepted only
when it is exactly an allowed loopback form:

- `Host` = host [":" port] (RFC 9110 §7.2, RFC 3986 §3.2.2-3.2.3), host one of `LOOPBACK_NAMES`, port 1 to 5 digits
  up to 65535; nothing else (no userinfo, path, trailing dot, space, percent-encoding, other case or IPv6 spelling);
- `Origin` = "http://" host [":" port] (RFC 6454 §7), the same host and port rules, no path, no trailing slash;
  absent is fine (a client that is not a browser), `null` is not.

One `Host` field and at most one `Origin` field (several are refused). `LoopbackGuard` runs in front of every
route, `/mcp` included; the SDK's own check (kept on, behind it) then never sees a value it would judge otherwise.
The public OAuth metadata documents (`exposers.auth.public_document`) are readable from any `Origin` (CORS:
they carry nothing a rebinding page could steal); their `Host` is checked like every other route's.
"""

from __future__ import annotations

import re

from mcp.server.transport_security import TransportSecuritySettings
from starlette.responses import Response
from starlette.types import ASGIApp, Receive, Scope, Send

from exposers.auth import public_document
from gateway.config import is_loopback

LOOPBACK_NAMES = ("127.0.0.1", "localhost", "[::1]")
"""What a browser on this machine writes for the loopback listener (it lowercases names and compresses IPv6)."""
_PORT = re.compile(r"[0-9]{1,5}")


def loopback_host(value: str) -> bool:
    """`value` is `host[:port]` with an allowed loopback host and a port of digits only."""
    for name in LOOPBACK_NAMES:
        if value == name:
            return True
        if value.startswith(name + ":"):
            port = value[len(name) + 1:]
            return _PORT.fullmatch(port) is not None and int(port) <= 65535
    return False


def loopback_origin(value: str) -> bool:
    """`value` is `http://host[:port]` with a loopback `host[:port]` as `loopback_host` takes it."""
    scheme, sep, rest = value.partition("://")
    return scheme == "http" and sep == "://" and loopback_host(rest)


def security_settings(host: str) -> TransportSecuritySettings | None:
    """The SDK's settings for a loopback listener (kept as a second line behind `LoopbackGuard`); None off it."""
    if not is_loopback(host):
        return None
    return TransportSecuritySettings(
        enable_dns_rebinding_protection=True,
        allowed_hosts=[*LOOPBACK_NAMES, *(f"{name}:*" for name in LOOPBACK_NAMES)],
        allowed_origins=[f"http://{name}:*" for name in LOOPBACK_NAMES],
    )


def refusal(headers: list[tuple[bytes, bytes]], any_origin: bool = False) -> Response | None:
    """421 for a `Host` that is not a loopback form, 403 for such an `Origin` (unless `any_origin`); None when both
    are fine."""
    # RFC 9110 §5.5: surrounding whitespace is not part of a field value (httptools keeps it).
    hosts = [value.strip(b" \t") for key, value in headers if key.lower() == b"host"]
    origins = [value.strip(b" \t") for key, value in headers if key.lower() == b"origin"]
    if len(hosts) != 1 or not loopback_host(hosts[0].decode("latin-1")):
        return Response("Invalid Host header", status_code=421)
    if any_origin:
        return None
    if len(origins) > 1 or (origins and not loopback_origin(origins[0].decode("latin-1"))):
        return Response("Invalid Origin header", status_code=403)
    return None


class LoopbackGuard:
    """`refusal` in front of `app` on a loopback listener; off loopback it passes everything through."""

    def __init__(self, app: ASGIApp, host: str) -> None:
        self.app = app
        self._on = is_loopback(host)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if self._on and scope["type"] == "http" \
                and (refused := refusal(scope["headers"], public_document(scope["path"]))) is not None:
            await refused(scope, receive, send)
            return
        await self.app(scope, receive, send)
