"""Every private or loosely typed part of the MCP SDK the consumer side relies on, in one place (mcp 2.3.x).

Each function states one assumption; `tests/test_sdk_contract.py` checks each against the installed SDK and fails
naming the SDK version when one no longer holds.

- `send_raw`: `ClientSession.send_request` takes a pydantic `TypeAdapter` as its result type (typed as a model
  class only): Triad asks for the raw result dict, which a proxy passes on without re-validation.
- `wrap_stamp`: the SDK stamps each 2026-07-28 request's `_meta` envelope and headers in `ClientSession._stamp`
  (set by `discover()`), with no public hook for the caller's capabilities and `Mcp-Param-*` headers.
- `declare_as_client`: the capabilities a `ClientSession` declares are built by `ClientSession._build_capabilities`
  from which callbacks it has (elicitation always with both form and url modes), with no way to pass a client's
  own declaration through.
- `send_raw` of a `tools/call` as a task (2025-11-25), and of a list (`UNCHECKED`): `ClientSession.send_request`
  checks every result against the spec's result type of its method, and refuses the `CreateTaskResult` such a
  call is answered with, and a whole list for one odd item (a tool schema without `type`: Triad takes or repairs
  each item, `gateway.registry`); the request is stamped as `send_request` stamps it (`_stamp`) and sent with the
  session's dispatcher (`_dispatcher`).
- `ReadEnd` / `WriteEnd`: the SDK types a transport's streams with protocols of a private module
  (`mcp.shared._stream_protocols`); they are named here once.
- `CONTEXT_ATTRIBUTE`: the SDK's dispatcher reads the sender's contextvars from its read stream's `last_context`
  (how the current downstream crosses into callbacks over streamable HTTP); a wrapper must pass it through.
- `serialise_any_string`: every transport of the SDK, server and client side (stdio, legacy SSE, streamable HTTP),
  writes a message as `message.model_dump_json(by_alias=True, exclude_unset=True)`, which raises on a lone
  surrogate (valid JSON an upstream may send): the process (`triad stdio`) or the session (SSE) ended. The four
  JSON-RPC message classes get a `model_dump_json` that falls back to `consumers._json.dumps_text` for exactly
  that failure (pydantic's own serialiser stays the fast path). Installed once, when `consumers` is imported.
- `quiet_oauth_flow_errors`: the SDK's OAuth flow (`OAuthClientProvider._auth_flow`) logs every failure with its
  traceback (`logger.exception("OAuth flow error")` on `mcp.client.auth.oauth2`) before re-raising it; Triad
  reports the same failure once, as one line (`consumers.oauth`): that record is dropped. Installed with the above.
- `IssuerNamedProvider`: which of the authorization servers a resource's metadata advertises the flow uses is
  `OAuthClientProvider._select_authorization_server` (the first); what it returns becomes `auth_server_url`, from
  which the well-known URLs are built and against which the metadata's `issuer` is compared exactly
  (`_expected_issuer`), with no public hook for an operator's own spelling.
"""

from __future__ import annotations

import contextvars
import logging
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any, cast

import mcp_types as types
from mcp import ClientSession
from mcp.client.auth import OAuthClientProvider, OAuthFlowError
from mcp.client.auth.utils import issuers_match
from mcp.shared._stream_protocols import ReadStream, WriteStream
from mcp.shared.dispatcher import CallOptions, ProgressFnT
from mcp.shared.message import SessionMessage
from pydantic import BaseModel, TypeAdapter
from pydantic_core import PydanticSerializationError

from consumers._json import JSONObject, dumps_text

if TYPE_CHECKING:
    from consumers.relay import UpstreamRequest

RAW: TypeAdapter[JSONObject] = TypeAdapter(dict[str, Any])
"""A result as the upstream sent it: the wire dict."""

CONTEXT_ATTRIBUTE = "last_context"
UNCHECKED = frozenset({"tools/list", "resources/list", "resources/templates/list", "prompts/list"})
"""Lists whose results are taken as the upstream sent them: the SDK's check refuses a whole page for one item it
does not like, where Triad judges each item on its own."""

Incoming = SessionMessage | Exception
"""What a transport's read end yields: a message, or an error the transport hit."""
ReadEnd = ReadStream[Incoming]
"""A transport's read end, as the SDK's `ClientSession` takes it."""
WriteEnd = WriteStream[SessionMessage]
"""A transport's write end, as the SDK's `ClientSession` takes it."""

Stamp = Callable[[JSONObject, CallOptions], None]
"""`(request data, send options) -> None`: what `ClientSession._stamp` is."""


async def send_raw(session: ClientSession, request: UpstreamRequest,
                   progress: Callable[[float, float | None, str | None], Awaitable[None]] | None = None
                   ) -> JSONObject:
    """Send `request` on `session`; its result as a raw dict."""
    if request.method in UNCHECKED or (request.method == "tools/call"
                                       and getattr(request.params, "task", None) is not None):
        data = request.model_dump(by_alias=True, mode="json", exclude_none=True)
        options: CallOptions = {}
        session._stamp(data, options)
        answer: JSONObject = await session._dispatcher.send_raw_request(data["method"], data.get("params"),
                                                                           options)
        return answer
    on_progress = cast(ProgressFnT | None, progress)  # a plain callable of the Protocol's shape
    result: JSONObject = await session.send_request(request, RAW,  # type: ignore[type-var]
                                                        progress_callback=on_progress)
    return result


def wrap_stamp(session: ClientSession, wrap: Callable[[Stamp], Stamp]) -> None:
    """Replace the session's envelope stamp by `wrap(stamp)`."""
    session._stamp = wrap(session._stamp)


def declare_as_client(session: ClientSession, declared: JSONObject) -> None:
    """The session declares each capability it has a callback for as `declared` (a client's own declaration of
    sampling, elicitation or roots) spells it: an upstream then sees exactly what that client declared."""
    build = session._build_capabilities

    def exact(version: str) -> types.ClientCapabilities:
        built = build(version).model_dump(by_alias=True, mode="json", exclude_none=True)
        return types.ClientCapabilities.model_validate(
            {**built, **{name: value for name, value in declared.items() if name in built}}, by_name=False)

    session._build_capabilities = exact  # type: ignore[method-assign]


def sender_context(stream: object) -> contextvars.Context | None:
    """The sender's context a read stream last carried (None when it carries none)."""
    return getattr(stream, CONTEXT_ATTRIBUTE, None)


_MESSAGE_CLASSES = (types.JSONRPCRequest, types.JSONRPCNotification, types.JSONRPCResponse, types.JSONRPCError)
_DUMP_OPTIONS = ("include", "exclude", "by_alias", "exclude_unset", "exclude_defaults", "exclude_none")
"""The options of `model_dump_json` that `model_dump` shares (the SDK passes `by_alias` and `exclude_unset`)."""


def _model_dump_json(self: BaseModel, **options: Any) -> str:
    try:
        return BaseModel.model_dump_json(self, **options)
    except PydanticSerializationError:
        if options.get("indent") is not None:
            raise
        return dumps_text(self.model_dump(**{key: options[key] for key in _DUMP_OPTIONS if key in options}))


def serialise_any_string() -> None:
    """Give the JSON-RPC message classes the `model_dump_json` that writes lone surrogates as escapes (idempotent)."""
    for cls in _MESSAGE_CLASSES:
        cls.model_dump_json = _model_dump_json  # type: ignore[method-assign]


OAUTH_LOGGER = "mcp.client.auth.oauth2"
OAUTH_FLOW_ERROR = "OAuth flow error"


def _not_an_oauth_flow_error(record: logging.LogRecord) -> bool:
    return record.msg != OAUTH_FLOW_ERROR


def quiet_oauth_flow_errors() -> None:
    """Drop the SDK's traceback record of a failed OAuth flow (idempotent: the same filter is added once)."""
    logging.getLogger(OAUTH_LOGGER).addFilter(_not_an_oauth_flow_error)


class IssuerNamedProvider(OAuthClientProvider):
    """The SDK's OAuth client, with the issuer the operator names for the upstream (`auth.issuer`): the server the
    upstream advertises must be that one, spelt exactly so or differing only by a root's trailing slash (a Python
    SDK server renders `http://host:port` as `http://host:port/`); the metadata's `issuer` is then held to the
    operator's spelling. Without one, the SDK's strict comparison with the advertised spelling (RFC 8414 §3.3)."""

    issuer: str | None = None

    def _select_authorization_server(self, advertised: list[str]) -> str:
        chosen = super()._select_authorization_server(advertised)
        if self.issuer is None:
            return chosen
        if not issuers_match(chosen, self.issuer):
            raise OAuthFlowError(f"{ADVERTISED_ANOTHER}: {chosen} != {self.issuer}")
        return self.issuer


ADVERTISED_ANOTHER = "The resource advertises another authorization server than the issuer named"


serialise_any_string()
quiet_oauth_flow_errors()
