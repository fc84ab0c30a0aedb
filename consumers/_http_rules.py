"""The rules every HTTP request to an upstream follows, whichever client library sends it (the SDK's httpx2 for
the session and its GET stream, aiohttp for the direct HTTP hop): defined once here, applied by both.

- Redirects are not followed: a streamable HTTP endpoint that redirects a POST is misconfigured, and following it
  would resend a request (and the session's headers, tokens included) to another address.
- Proxies come from the environment (`HTTP_PROXY`, `HTTPS_PROXY`, `NO_PROXY`), as operators expect of any client.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class HttpRules:
    follow_redirects: bool
    trust_env: bool


HTTP_RULES = HttpRules(follow_redirects=False, trust_env=True)
