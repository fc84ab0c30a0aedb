"""Whether an idle upstream connection is still there: an HTTP upstream that went away leaves no trace on an
idle session, so the upstream's owner task asks now and then (`ping`; discovery in 2026-07-28, which has none)."""

from __future__ import annotations

import logging

import anyio
from mcp import ClientSession

from consumers._errors import describe_failure
from consumers.errors import UpstreamUnavailable

logger = logging.getLogger("triad.upstream")


async def probe(name: str, session: ClientSession, modern_version: str | None, limit: float) -> None:
    """Return when the upstream answers; raise `UpstreamUnavailable` when the connection is not usable. A probe
    that fails gives the connection up at once; one that goes unanswered for `limit` seconds gets one more try
    (busy is not gone)."""
    for attempt in (1, 2):
        try:
            with anyio.fail_after(limit):
                if modern_version is not None:
                    await session.send_discover(modern_version)
                else:
                    await session.send_ping()
            return
        except TimeoutError:
            if attempt == 2:
                raise UpstreamUnavailable(name, f"did not answer two pings within {limit:g}s") from None
            logger.info("upstream %s: no answer to a ping within %gs; trying once more", name, limit)
        except Exception as exc:  # any other failure means the connection is not usable
            raise UpstreamUnavailable(name, f"did not answer ping ({describe_failure(exc)})") from None
