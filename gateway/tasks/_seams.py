"""What the task relay needs of the call path, as two small interfaces it is given at construction
(`gateway.calls` implements both): the way to the upstreams, and a read-only view of the state of the moment."""

from __future__ import annotations

from typing import Protocol, Unpack

from consumers import JSONObject, RequestOptions, Upstream, UpstreamRequest
from gateway.hooks import HookChain


class Forwarding(Protocol):
    def upstream(self, name: str) -> Upstream:
        """The upstream configured as `name` (`UpstreamUnavailable` if a reload removed it)."""
        ...

    async def forward(self, upstream: Upstream, kind: str, request: UpstreamRequest, *,
                      caller: tuple[str, str] = ("", ""), **options: Unpack[RequestOptions]) -> JSONObject:
        """The one place a request leaves for an upstream: the raw result."""
        ...


class Current(Protocol):
    """The config, hook chain and registry of the moment (a reload replaces them), read-only."""

    @property
    def hooks(self) -> HookChain: ...

    @property
    def page_size(self) -> int: ...

    def uri_part(self, upstream: str) -> str | None:
        """The part that namespaces `upstream`'s URIs in the registry of the moment (None: not namespaced)."""
        ...
