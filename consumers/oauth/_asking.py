"""How a person is asked to authorize Triad at an upstream: the `Asker` that shows them the authorization URL, and
for `auth: per_user` the user's own client, by URL-mode elicitation (`link_asker`)."""

from __future__ import annotations

import secrets
from collections.abc import Awaitable, Callable

import mcp_types as types

from consumers.relay import Downstream

Asker = Callable[[str], Awaitable[None]]
"""Shows an authorization URL to a person (`triad login` prints it; the daemon runs `auth.browser`)."""


def link_asker(downstream: Downstream | None) -> Asker | None:
    """For `auth: per_user`: the user's own client shows them the authorization link (URL-mode elicitation), if
    it declared it can; None otherwise."""
    elicitation = ((downstream.capabilities or {}).get("elicitation") if downstream is not None else None) or {}
    if downstream is None or "url" not in elicitation:
        return None

    async def ask(url: str) -> None:
        assert downstream is not None
        answer = await downstream.ask(types.ElicitRequest(params=types.ElicitRequestURLParams(
            message="An upstream server asks you to authorize Triad to act for you there.", url=url,
            elicitation_id=secrets.token_urlsafe(12))), types.ElicitResult)
        if isinstance(answer, types.ErrorData) or answer.action != "accept":
            raise Declined

    return ask


class Declined(Exception):
    """The user's client did not accept to open the authorization link."""
