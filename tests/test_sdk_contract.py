"""The assumptions `exposers/_sdk.py` makes about the installed MCP SDK's internals, one test each.

When one fails, the SDK changed under Triad: the message names the installed SDK version and the assumption, and
`exposers/_sdk.py` is the one place to adapt.
"""

from __future__ import annotations

import logging
from typing import Any

import anyio
import pytest
from mcp.server import Server
from mcp.server.connection import Connection
from mcp.server.session import ServerSession
from mcp.server.streamable_http import StreamableHTTPServerTransport
from mcp.server.streamable_http_manager import StreamableHTTPSessionManager

from exposers import _sdk


def expect(condition: bool, assumption: str) -> None:
    assert condition, f"mcp {_sdk.sdk_version()} no longer holds an assumption of exposers/_sdk.py: {assumption}"


def test_the_installed_sdk_is_in_the_supported_range() -> None:
    _sdk.check_sdk_version()
    for outside in ("2.4.0", "2.2.9", "1.26.0", "3.0.0"):
        with pytest.raises(ImportError, match=rf"mcp >=2\.3,<2\.4 .* installed: mcp {outside}"):
            _sdk.check_sdk_version(outside)


def test_a_server_session_keeps_its_connection_as_connection() -> None:
    connection = Connection.for_loop(outbound=None, session_id="abc")  # type: ignore[arg-type]
    session = ServerSession(None, connection)  # type: ignore[arg-type]

    class Ctx:
        pass

    ctx: Any = Ctx()
    ctx.session = session
    expect(_sdk.connection_of(ctx) is connection, "ServerSession._connection is the request's Connection")
    expect(isinstance(connection.state, dict) and connection.session_id == "abc",
           "Connection has a `state` dict and its `session_id`")


def test_the_session_manager_finds_transports_by_session_id() -> None:
    manager = StreamableHTTPSessionManager(app=Server("contract"))
    expect(manager._server_instances == {}, "StreamableHTTPSessionManager._server_instances maps id -> transport")
    transport = StreamableHTTPServerTransport(mcp_session_id="s1", idle_timeout=7.0)
    manager._server_instances["s1"] = transport
    expect(_sdk.session_transport(manager, "s1") is transport, "a live transport is found by its session id")
    expect(_sdk.session_transport(manager, "s2") is None, "an unknown id finds nothing")
    expect(_sdk.live_transports(manager) == [transport], "every live transport is listed (a drain ends their streams)")
    expect(callable(getattr(transport, "close_standalone_sse_stream", None)),
           "a transport ends its standalone GET stream with close_standalone_sse_stream()")


def test_a_request_held_on_the_direct_path_suspends_the_idle_countdown() -> None:
    transport = StreamableHTTPServerTransport(mcp_session_id="s1", idle_timeout=7.0)
    expect(transport._idle_timeout == 7.0, "the transport keeps its idle timeout as `_idle_timeout`")
    expect(transport._requests_in_flight == 0, "the transport counts requests in flight in `_requests_in_flight`")
    expect(hasattr(transport, "idle_scope"), "the transport's idle countdown is its `idle_scope`")

    async def run() -> None:
        transport.idle_scope = anyio.CancelScope()
        with _sdk.held(transport):
            expect(transport._requests_in_flight == 1 and transport.idle_scope.deadline == float("inf"),
                   "a held request counts as in flight and suspends the countdown")
        expect(transport._requests_in_flight == 0 and transport.idle_scope.deadline < float("inf"),
               "releasing the last request restarts the countdown")

    anyio.run(run)


def test_the_sdk_preinstalls_a_tracing_middleware_that_can_be_dropped() -> None:
    server = Server("contract")
    expect(any(isinstance(m, _sdk.OpenTelemetryMiddleware) for m in server.middleware),
           "Server.middleware starts with mcp.server._otel.OpenTelemetryMiddleware")
    _sdk.drop_idle_tracing(server)
    expect(not any(isinstance(m, _sdk.OpenTelemetryMiddleware) for m in server.middleware),
           "the tracing middleware is gone once dropped")


def test_session_ids_in_the_sdks_log_lines_are_replaced_by_labels(caplog: pytest.LogCaptureFixture) -> None:
    import mcp.server.sse
    import mcp.server.streamable_http
    import mcp.server.streamable_http_manager

    names = {module.logger.name for module in (mcp.server.sse, mcp.server.streamable_http,
                                               mcp.server.streamable_http_manager)}
    expect(names == set(_sdk.SESSION_LOGGERS), "the SDK's session modules log under their module names")
    _sdk.hide_session_ids(lambda raw: f"label-{len(raw)}")
    secret = "0123456789abcdef0123456789abcdef"
    with caplog.at_level(logging.INFO, logger="mcp.server.streamable_http_manager"):
        mcp.server.streamable_http_manager.logger.info("Rejected request with unknown or expired session ID: %s",
                                                       secret)
        mcp.server.streamable_http_manager.logger.warning(
            "Rejecting request for session %s: credential does not match the one that created the session", secret)
    assert secret not in caplog.text and "label-32" in caplog.text
    expect("credential does not match" not in caplog.text, "the per-request mismatch line starts as MISMATCH_LINES")


def test_a_legacy_sse_session_is_bound_to_its_opener_in_session_owners() -> None:
    from uuid import uuid4

    from mcp.server.auth.middleware.bearer_auth import AuthenticatedUser, authorization_context
    from mcp.server.auth.provider import AccessToken
    from mcp.server.sse import SseServerTransport

    transport = SseServerTransport("/messages/")
    session_id = uuid4()
    owner = authorization_context(AuthenticatedUser(AccessToken(token="", client_id="a", scopes=[])))
    transport._session_owners[session_id] = owner
    expect(_sdk.sse_session_owner(transport, session_id) == owner, "SSE sessions' owners are in _session_owners")
    expect(_sdk.sse_session_owner(transport, uuid4()) is None, "an unknown SSE session has no owner")


# -- consumer side (`consumers/_sdk.py`) ---------------------------------------------------------------------------


def expect_consumer(condition: bool, assumption: str) -> None:
    assert condition, f"mcp {_sdk.sdk_version()} no longer holds an assumption of consumers/_sdk.py: {assumption}"


def test_send_request_takes_a_type_adapter_for_raw_results() -> None:
    import inspect

    from mcp import ClientSession

    annotation = str(inspect.signature(ClientSession.send_request).parameters["result_type"].annotation)
    expect_consumer("TypeAdapter" in annotation, "ClientSession.send_request accepts a pydantic TypeAdapter")


def test_a_client_session_stamps_requests_through_a_replaceable_stamp() -> None:
    from mcp import ClientSession

    from consumers import _sdk as consumer_sdk

    send, receive = anyio.create_memory_object_stream[Any](1)
    session = ClientSession(receive, send)
    original = session._stamp
    expect_consumer(callable(original), "ClientSession._stamp is the envelope stamp, set before connecting")
    seen: list[Any] = []
    consumer_sdk.wrap_stamp(session, lambda stamp: seen.append(stamp) or stamp)
    expect_consumer(seen == [original] and session._stamp is original, "wrap_stamp hands over the current stamp")
    send.close()
    receive.close()


def test_a_call_as_a_task_goes_out_through_the_sessions_stamp_and_dispatcher() -> None:
    """`consumers._sdk.send_raw` of a 2025-11-25 `tools/call` as a task skips `send_request`'s result check (which
    refuses a `CreateTaskResult`) and still stamps and sends as `send_request` does."""
    import inspect

    from mcp import ClientSession
    from mcp_types import methods

    send, receive = anyio.create_memory_object_stream[Any](1)
    session = ClientSession(receive, send)
    expect_consumer(callable(getattr(session._dispatcher, "send_raw_request", None)),
                    "ClientSession._dispatcher.send_raw_request sends a request and returns its raw result")
    source = inspect.getsource(ClientSession.send_request)
    expect_consumer("self._stamp(data, opts)" in source and "validate_server_result" in source,
                    "send_request stamps with _stamp, then checks the result against its method's result type")
    with pytest.raises(ValueError):  # the check the direct send avoids: a CreateTaskResult is no CallToolResult
        methods.validate_server_result("tools/call", "2025-11-25", {"task": {
            "taskId": "t", "status": "working", "createdAt": "x", "lastUpdatedAt": "x", "ttl": 1}})
    send.close()
    receive.close()


def test_the_dispatcher_reads_the_senders_context_from_its_read_stream() -> None:
    import inspect

    import mcp.shared.jsonrpc_dispatcher

    from consumers import _sdk as consumer_sdk

    source = inspect.getsource(mcp.shared.jsonrpc_dispatcher)
    expect_consumer(f'"{consumer_sdk.CONTEXT_ATTRIBUTE}"' in source,
                    "the JSON-RPC dispatcher reads `last_context` from its read stream")


def test_a_server_session_keeps_its_requests_channel_as_request_outbound() -> None:
    from mcp.shared.dispatcher import DispatchContext

    connection = Connection.for_loop(outbound=None, session_id="abc")  # type: ignore[arg-type]
    channel = object()
    session = ServerSession(channel, connection)  # type: ignore[arg-type]

    class Ctx:
        pass

    ctx: Any = Ctx()
    ctx.session = session
    expect(_sdk.request_channel(ctx) is channel, "ServerSession._request_outbound is the request's DispatchContext")
    expect(callable(getattr(DispatchContext, "notify", None)), "a DispatchContext sends raw params with notify()")


@pytest.mark.anyio
async def test_a_client_session_passes_a_callers_progress_token_through() -> None:
    """`consumers._progress`: a call carries Triad's own token when it gives the SDK no progress callback, and
    what the session writes is a `SessionMessage` dataclass (its reason rewritten with `dataclasses.replace`)."""
    import dataclasses

    import mcp_types as types
    from mcp import ClientSession

    from consumers._sdk import send_raw

    to_session, session_reads = anyio.create_memory_object_stream[Any](8)
    session_writes, from_session = anyio.create_memory_object_stream[Any](8)
    async with ClientSession(session_reads, session_writes) as session, anyio.create_task_group() as tg:
        request = types.PingRequest(params=types.RequestParams.model_validate({"_meta": {"progressToken": "mine"}},
                                                                              by_name=False))
        tg.start_soon(send_raw, session, request)
        with anyio.fail_after(5):
            written = await from_session.receive()
        expect_consumer(dataclasses.is_dataclass(written), "the session writes SessionMessage dataclasses")
        expect_consumer(written.message.params["_meta"]["progressToken"] == "mine",
                        "a caller's progressToken passes through when no progress callback is given")
        tg.cancel_scope.cancel()
    to_session.close()


def test_a_client_session_builds_the_capabilities_it_declares_in_one_replaceable_method() -> None:
    import inspect

    from mcp import ClientSession

    from consumers import _sdk as consumer_sdk

    async def unused(*_args: Any) -> Any:
        raise AssertionError("not called")

    expect_consumer("self._build_capabilities(" in inspect.getsource(ClientSession),
                    "ClientSession declares the capabilities ClientSession._build_capabilities builds")
    send, receive = anyio.create_memory_object_stream[Any](1)
    session = ClientSession(receive, send, elicitation_callback=unused)
    consumer_sdk.declare_as_client(session, {"elicitation": {"form": {}}, "sampling": {}})
    declared = session._build_capabilities("2025-11-25").model_dump(by_alias=True, mode="json", exclude_none=True)
    expect_consumer(declared.get("elicitation") == {"form": {}} and "sampling" not in declared,
                    "declare_as_client declares a client's own spelling of what the session has a callback for")
    send.close()
    receive.close()


def test_the_oauth_flow_logs_its_failures_in_one_record_that_triad_drops(caplog: pytest.LogCaptureFixture) -> None:
    import inspect

    from mcp.client.auth import oauth2

    from consumers import _sdk as consumer_sdk

    expect_consumer(oauth2.logger.name == consumer_sdk.OAUTH_LOGGER
                    and f'logger.exception("{consumer_sdk.OAUTH_FLOW_ERROR}")'
                    in inspect.getsource(oauth2.OAuthClientProvider._auth_flow),
                    "the OAuth flow logs a failure as one `OAuth flow error` record on mcp.client.auth.oauth2")
    with caplog.at_level(logging.DEBUG, logger=consumer_sdk.OAUTH_LOGGER):
        try:
            raise ValueError("a failure")
        except ValueError:
            oauth2.logger.exception(consumer_sdk.OAUTH_FLOW_ERROR)
        oauth2.logger.warning("Token refresh failed: 400")
    assert [record.getMessage() for record in caplog.records] == ["Token refresh failed: 400"]


def test_the_oauth_flow_takes_its_authorization_server_from_one_replaceable_method() -> None:
    import inspect

    from mcp.client.auth import oauth2

    source = inspect.getsource(oauth2.OAuthClientProvider._auth_flow)
    expect_consumer("self.context.auth_server_url = self._select_authorization_server(" in source
                    and "validate_metadata_issuer(asm, expected_issuer)" in source
                    and "return self.context.auth_server_url or" in inspect.getsource(
                        oauth2.OAuthClientProvider._expected_issuer),
                    "the advertised server the flow uses comes from _select_authorization_server, and the "
                    "metadata's issuer is compared with it (_expected_issuer)")
    expect_consumer(str(oauth2.OAuthFlowError("x")) == "x", "OAuthFlowError's message is the text it was given")
