"""The rules every HTTP request to an upstream follows, whichever client library sends it (the SDK's httpx2 for
the session and its GET stream, aiohttp for the direct path): defined once here, applied by both.

- Redirects are not followed (`redirect_refused` says so, naming the Location): an endpoint that redirects a POST
  is misconfigured, and following it would resend a request (and the session's headers, tokens included) to
  another address.
- Proxies come from the environment (`HTTP_PROXY`, `HTTPS_PROXY`, `NO_PROXY`), as operators expect of any client.
  httpx2 reads them itself; for aiohttp they are resolved once per upstream (`env_proxy`), because its own
  `trust_env` looks them (and `.netrc`) up again on every request: about 0.45 ms of CPU per call here.
"""

from __future__ import annotations

import urllib.parse
import urllib.request
from collections.abc import Mapping
from dataclasses import dataclass


@dataclass(frozen=True)
class HttpRules:
    follow_redirects: bool
    trust_env: bool


HTTP_RULES = HttpRules(follow_redirects=False, trust_env=True)


def env_proxy(url: str) -> str | None:
    """The proxy the environment names for `url` (None: go direct, or `NO_PROXY` exempts its host)."""
    if not HTTP_RULES.trust_env:
        return None
    parts = urllib.parse.urlsplit(url)
    if parts.hostname is None or urllib.request.proxy_bypass(parts.hostname):
        return None
    return urllib.request.getproxies().get(parts.scheme)


def redirect_refused(status: int, headers: Mapping[str, str]) -> str:
    """What a redirect of the upstream's endpoint says, on every path that meets one: that Triad follows none,
    where it points (without userinfo and query, which may carry a credential), and what to do."""
    location = headers.get("location")
    if not location:
        return f"the upstream answered HTTP {status}, a redirect without a Location; Triad follows no redirects"
    where = urllib.parse.urlsplit(location)
    shown = urllib.parse.urlunsplit((where.scheme, where.netloc.rpartition("@")[2], where.path, "", ""))
    return (f"the upstream answered HTTP {status}, a redirect to {shown}{' (query left out)' if where.query else ''}"
            "; Triad follows no redirects: if that is the intended server, set the upstream's url to it")
