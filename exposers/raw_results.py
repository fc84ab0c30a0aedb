"""Results sent as Triad has them: the SDK's server still checks each one, but no longer retypes or trims it.

The SDK's server validates every result against the negotiated version's schema and dumps the model again (mcp
2.3, `ServerRunner._serialize`): numbers take the model's types (`annotations.priority: 1` becomes `1.0`), and
fields the schema does not name are dropped (a tool's or a content item's unknown keys, a result's own). A proxy
must pass on what the upstream said. So the handlers Triad gives the SDK keep each result they return here
(`keep`), and the server's middleware, once the SDK has checked and shaped it, sends the kept result instead
(`restore`) with only what the shaping adds for the version: on 2026-07-28 `resultType`, cache hints and the
`serverInfo` stamp; before 2026-07-28, no `resultType` (a field of 2026-07-28). A result the SDK refuses is
still refused. The direct HTTP path's list pages take the same shape (`exposers.direct`).

Ownership: one `RawResults` per server (`exposers.server.build_server`); a result is held from its handler's
return until the middleware around that handler takes it back, keyed by the request's own `ServerSession`.
"""

from __future__ import annotations

from mcp.server import ServerRequestContext
from mcp.server.context import HandlerResult
from mcp_types.version import MODERN_PROTOCOL_VERSIONS

from consumers import JSONObject


def unsieved(raw: JSONObject, shaped: JSONObject, version: str) -> JSONObject:
    """`raw` with what the SDK's shaping (`shaped`) added to it for `version`."""
    out = {**{key: value for key, value in shaped.items() if key not in raw}, **raw}
    raw_meta, shaped_meta = raw.get("_meta"), shaped.get("_meta")
    if isinstance(raw_meta, dict) and isinstance(shaped_meta, dict):
        out["_meta"] = {**shaped_meta, **raw_meta}
    if version not in MODERN_PROTOCOL_VERSIONS:
        out.pop("resultType", None)
    return out


class RawResults:
    def __init__(self) -> None:
        self._held: dict[int, JSONObject] = {}

    def keep(self, ctx: ServerRequestContext, result: JSONObject) -> JSONObject:
        """Hold a handler's result for its request; returned for the SDK to check and shape."""
        self._held[id(ctx.session)] = result
        return result

    def restore(self, ctx: ServerRequestContext, shaped: HandlerResult) -> HandlerResult:
        """The held result of the request, in place of the SDK's shaped one (which it replaces key for key)."""
        raw = self._held.pop(id(ctx.session), None)
        if raw is None or not isinstance(shaped, dict):
            return shaped
        return unsieved(raw, shaped, ctx.protocol_version)

    def drop(self, ctx: ServerRequestContext) -> None:
        """The request failed: nothing of it stays held."""
        self._held.pop(id(ctx.session), None)
