"""The dispatcher's requests about resources: reads, completions (of a prompt's or a resource's arguments) and
subscriptions, and how an exposed URI finds the upstream that owns it.

Ownership: the dispatcher creates one `Resources` with the state of the moment (`Live`: views, registry, hooks),
the pool and the forwarder (the one place a request leaves for an upstream); it holds no state of its own.
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator, Mapping

import mcp_types as types

from consumers import JSON, JSONObject, Upstream, UpstreamPool
from gateway.calls._forwarder import Forwarder
from gateway.calls._live import Live
from gateway.calls._own_lists import own_lists
from gateway.errors import InvalidRequest, UnknownName, UpstreamError
from gateway.hooks import CallContext, Kind, Session
from gateway.identity import Identity, subject_of
from gateway.registry import ClientView, forwardable_meta, input_round, parse_exposed_uri

MAX_URI_CHARS = 8192
"""Characters in a resource URI a caller names (a read, a completion, a subscription): routing one may match it
against every resource template of every upstream, so its length is bounded before anything scans it."""


def subscribable(upstream: Upstream) -> bool:
    resources = upstream.catalog.capabilities.get("resources") if upstream.catalog is not None else None
    return isinstance(resources, dict) and resources.get("subscribe") is True


class Resources:
    """`resources/read`, `completion/complete`, `resources/subscribe` and `resources/unsubscribe`."""

    def __init__(self, live: Live, pool: UpstreamPool, forwarder: Forwarder) -> None:
        self._live = live
        self._pool = pool
        self._forwarder = forwarder

    async def read_resource(self, identity: Identity, params: Mapping[str, JSON],
                            session: Session | None = None) -> JSONObject:
        await self._live.settled()
        uri = params.get("uri")
        if not isinstance(uri, str):
            raise UnknownName(f"Unknown resource: {uri}")
        owner, raw = self._route_uri(self._live.request_view(identity, params), uri)
        request = types.ReadResourceRequest(params=types.ReadResourceRequestParams.model_validate(
            {"uri": raw, "_meta": forwardable_meta(params.get("_meta")), **input_round(params)}, by_name=False))

        async def send(_ctx: CallContext | None) -> JSONObject:
            result = await self._forwarder.forward(self._forwarder.upstream(owner), "resource", request,
                                                   retry_safe=True, client=session, caller=(identity.client_id, uri))
            if raw != uri and isinstance(result.get("contents"), list):
                # Contents name the URI the client asked for, so it can match them to its request.
                result["contents"] = [{**c, "uri": uri} if isinstance(c, dict) and c.get("uri") == raw else c
                                      for c in result["contents"]]
            return result

        if not self._live.hooks:
            return await send(None)
        ctx = CallContext("resource", identity.client_id, session or Session(), uri, owner, raw, {"uri": uri},
                          subject=subject_of(identity))
        return await self._live.hooks.run(ctx, send)

    async def complete(self, identity: Identity, params: Mapping[str, JSON],
                       session: Session | None = None) -> JSONObject:
        await self._live.settled()
        ref = params.get("ref")
        if not isinstance(ref, Mapping):
            raise UnknownName("Unknown completion reference")
        view = self._live.request_view(identity, params, await own_lists(self._pool, session))
        if ref.get("type") == "ref/prompt":
            entry = view.prompts.get(ref.get("name"))  # type: ignore[arg-type]
            if entry is None:
                raise UnknownName(f"Unknown prompt: {ref.get('name')}")
            owner, raw_ref = entry.upstream, {**ref, "name": entry.raw}
        else:
            uri = ref.get("uri")
            if not isinstance(uri, str):
                raise UnknownName(f"Unknown resource: {uri}")
            owner, raw_uri = self._route_uri(view, uri)
            raw_ref = {**ref, "uri": raw_uri}
        request = types.CompleteRequest(params=types.CompleteRequestParams.model_validate(
            {**params, "ref": raw_ref, "_meta": forwardable_meta(params.get("_meta"))}))
        kind: Kind = "prompt" if ref.get("type") == "ref/prompt" else "resource"
        name = str(ref.get("name") if kind == "prompt" else ref.get("uri"))
        ctx = CallContext(kind, identity.client_id, session or Session(), name, owner,
                          str(raw_ref.get("name") or raw_ref.get("uri")), {}, subject=subject_of(identity))
        async with self._errors_hooked(ctx):
            result = await self._forwarder.forward(self._forwarder.upstream(owner), "completion", request,
                                                   retry_safe=True, client=session)
        return await self._live.hooks.completion(ctx, result)

    async def subscribe(self, identity: Identity, params: Mapping[str, JSON], session: Session | None = None
                        ) -> tuple[str, str]:
        """Subscribe to a resource at its owner; (upstream, raw URI), for `unsubscribe` and for routing updates.
        With `sessions: per_client`, on the caller's own upstream session, as a direct connection's would be: the
        updates that session pushes are the caller's (an upstream that pushes per session pushes nothing on the
        shared one for it); otherwise on the shared session, once per URI however many subscribe."""
        uri = params.get("uri")
        if not isinstance(uri, str):
            raise UnknownName(f"Unknown resource: {uri}")
        owner, raw = self._route_uri(self._live.request_view(identity, params), uri)
        upstream = self._forwarder.upstream(owner)
        if not subscribable(upstream):
            raise InvalidRequest(f"resource {uri} cannot be subscribed to: its upstream does not offer "
                                 "resource subscriptions")
        async with self._errors_hooked(CallContext("resource", identity.client_id, session or Session(), uri, owner,
                                                   raw, {"uri": uri}, subject=subject_of(identity))):
            if session is not None and upstream.own_session(session) is not None:
                await self._forwarder.forward(upstream, "resource", types.SubscribeRequest(
                    params=types.SubscribeRequestParams(uri=raw)), client=session)
                upstream.own_subscribed(session, raw, True)
            else:
                await upstream.subscriptions.add(raw)
        return owner, raw

    @contextlib.asynccontextmanager
    async def _errors_hooked(self, ctx: CallContext) -> AsyncIterator[None]:
        """An upstream's error on a request outside the hook chain's calls, reads and gets (a completion, a
        subscription) passes the `on_message` hooks (`redact`) all the same before it reaches the client."""
        try:
            yield
        except UpstreamError as exc:
            await self._live.hooks.rewrite_error(ctx, exc)
            raise

    async def unsubscribe(self, owner: str, raw: str, session: Session | None = None, *, leaving: bool = False
                          ) -> None:
        """Release a subscription `subscribe` made for `session` (`leaving`: the session is ending, and its own
        upstream session with it: nothing to ask there)."""
        upstream = self._pool.get(owner)
        if upstream is None:
            return
        if session is None or upstream.own_session(session) is None:
            await upstream.subscriptions.remove(raw)
            return
        upstream.own_subscribed(session, raw, False)
        if not leaving:
            await self._forwarder.forward(upstream, "resource", types.UnsubscribeRequest(
                params=types.UnsubscribeRequestParams(uri=raw)), client=session)

    def _route_uri(self, view: ClientView, uri: str) -> tuple[str, str]:
        """(upstream, raw URI) for an exposed URI or URI template expansion; unknown looks like hidden."""
        if len(uri) > MAX_URI_CHARS:
            raise InvalidRequest(f"the resource URI has {len(uri)} characters; the limit is {MAX_URI_CHARS}")
        registry = self._live.registry
        visible = view.visible_upstreams
        if registry.uri_owners:
            parsed = parse_exposed_uri(uri)
            owner = registry.uri_owners.get(parsed[0]) if parsed else None
            if parsed is not None and owner in visible:
                return owner, parsed[1]
            raise UnknownName(f"Unknown resource: {uri}")
        entry = registry.resources.get(uri)
        if entry is not None and entry.upstream in visible:
            return entry.upstream, entry.raw
        for owner, template in self._live.current().templates():
            if owner in visible and template.match(uri) is not None:
                return owner, uri
        candidates = [name for name, up in self._pool.upstreams.items()
                      if name in visible and up.catalog is not None and "resources" in up.catalog.capabilities]
        if len(candidates) == 1:  # one upstream has resources: URIs it did not list are its own too
            return candidates[0], uri
        raise UnknownName(f"Unknown resource: {uri}")
