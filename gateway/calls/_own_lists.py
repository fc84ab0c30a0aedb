"""What a downstream session's own upstream sessions list (`sessions: per_client`): the narrowing of its views.

A plain function of the pool and the session, used by the dispatcher's lists and by every request that must see
what the caller's own sessions list (prompts, completions, the core tools).
"""

from __future__ import annotations

import logging

import anyio

from consumers import OwnLists, Upstream, UpstreamPool
from gateway.errors import UpstreamError
from gateway.hooks import Session
from gateway.registry import SERVING, SessionLists

logger = logging.getLogger("triad.dispatch")


async def own_lists(pool: UpstreamPool, session: Session | None) -> SessionLists:
    """What a session's own upstream sessions list, of each serving `per_client` upstream: where an upstream
    lists tools by its client's capabilities (or keeps session resources), the client sees what its own
    session lists. Known lists cost nothing; an upstream that has no session of this client's yet, nor one
    that declared the same capabilities, gets one now (all such upstreams at once)."""
    if session is None:
        return ()
    found: dict[str, OwnLists | None] = {}
    missing: list[Upstream] = []
    for name, upstream in pool.upstreams.items():
        if not upstream.per_client or upstream.state.value not in SERVING:
            continue
        try:  # a 2026-07-28 caller's own session is its stand-in's (`consumers`)
            own = upstream.own_session(session)
        except UpstreamError as exc:  # too many of this caller's: that upstream is hidden from it (fail closed)
            found[name] = None
            logger.info("upstream %s: no session for this client: %s", upstream.name, exc.message)
            continue
        if own is not None:
            if (known := upstream.known_lists(session)) is not None:
                found[name] = known
            else:
                missing.append(upstream)

    async def open_session(upstream: Upstream) -> None:
        try:
            found[upstream.name] = await upstream.own_lists(session)
        except UpstreamError as exc:  # its tools are hidden from this client until it opens: fail closed
            found[upstream.name] = None
            logger.info("upstream %s: no session for this client, so none of its tools are listed to it: %s",
                        upstream.name, exc.message)

    if missing:
        async with anyio.create_task_group() as tg:
            for upstream in missing:
                tg.start_soon(open_session, upstream)
    return tuple(sorted(found.items(), key=lambda item: item[0]))
