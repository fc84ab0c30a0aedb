"""The `redact` built-in: every string of a result at any depth (keys, `_meta`, prompt descriptions included, base64
payloads excepted), the upstream's errors, and the log and progress messages relayed during a call."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import mcp_types as types
import pytest
from mcp.shared.exceptions import MCPError

from consumers import CURRENT_DOWNSTREAM
from gateway.errors import UpstreamRefused
from gateway.hooks._builtin import Redact
from gateway.hooks._chain import CallContext, HookChain, HookEntry, Message, Session
from tests.conftest import Proc, marker, start_fixture, start_triad, stdio_upstream, write_config
from tests.servers.fixture_upstream import PNG_1PX, WAV_BYTES
from tests.test_gateway_e2e import call
from tests.test_policy_e2e import session_as

pytestmark = pytest.mark.anyio

SECRET = "sk-" + "A" * 24
"""An OpenAI-style key: one of redact's default patterns."""


def redact_chain(hook: Any = None) -> HookChain:
    hook = hook or Redact()
    return HookChain([HookEntry("redact", hook, hook.priority, 0)])


def context(kind: str = "tool") -> CallContext:
    return CallContext(kind, "client", Session("s1"), "fx__tool", "fx", "tool", {})  # type: ignore[arg-type]


async def through(result: dict[str, Any], kind: str = "tool") -> dict[str, Any]:
    async def send(_ctx: CallContext) -> dict[str, Any]:
        return result
    return await redact_chain().run(context(kind), send)


async def test_data_and_blob_keys_are_masked_anywhere_but_in_base64_payloads() -> None:
    result = await through({
        "content": [{"type": "image", "data": PNG_1PX, "mimeType": "image/png"},
                    {"type": "audio", "data": WAV_BYTES, "mimeType": "audio/wav"},
                    {"type": "resource", "resource": {"uri": "x://b", "blob": WAV_BYTES}},
                    {"type": "resource", "resource": {"uri": "x://t", "text": SECRET}}],
        "structuredContent": {"data": SECRET, "blob": SECRET, "deep": [{"data": {"token": SECRET}}],
                              "image": {"type": "text", "data": SECRET}, "blob_without_uri": {"blob": SECRET}},
    })
    assert [block.get("data") for block in result["content"][:2]] == [PNG_1PX, WAV_BYTES]
    assert result["content"][2]["resource"]["blob"] == WAV_BYTES
    assert result["content"][3]["resource"]["text"] == "[REDACTED]"
    assert result["structuredContent"] == {
        "data": "[REDACTED]", "blob": "[REDACTED]", "deep": [{"data": {"token": "[REDACTED]"}}],
        "image": {"type": "text", "data": "[REDACTED]"}, "blob_without_uri": {"blob": "[REDACTED]"}}


async def test_dictionary_keys_and_the_results_meta_are_masked() -> None:
    result = await through({"content": [], "structuredContent": {SECRET: 1, f"Bearer {SECRET}": 2, "kept": 3},
                            "_meta": {"trace": f"key={SECRET}", SECRET: True}})
    assert result["structuredContent"] == {"[REDACTED]": 1, "[REDACTED]~": 2, "kept": 3}
    assert result["_meta"] == {"trace": "key=[REDACTED]", "[REDACTED]": True}


async def test_prompt_description_and_messages_are_masked() -> None:
    result = await through({"description": f"Uses {SECRET}", "messages": [
        {"role": "user", "content": {"type": "text", "text": SECRET}},
        {"role": "user", "content": {"type": "resource", "resource": {"uri": "x://r", "text": SECRET}}}]}, "prompt")
    assert result["description"] == "Uses [REDACTED]"
    assert [m["content"].get("text") or m["content"]["resource"]["text"] for m in result["messages"]] == [
        "[REDACTED]", "[REDACTED]"]


async def test_an_upstreams_error_message_and_data_are_masked() -> None:
    async def send(_ctx: CallContext) -> dict[str, Any]:
        raise UpstreamRefused("fx", f"bad key {SECRET}", code=-32002, data={"key": SECRET})

    with pytest.raises(UpstreamRefused) as raised:
        await redact_chain().run(context(), send)
    assert (raised.value.message, str(raised.value), raised.value.data, raised.value.code) == (
        "bad key [REDACTED]", "bad key [REDACTED]", {"key": "[REDACTED]"}, -32002)


class Downstream:
    modern = False
    log_level = "debug"
    capabilities = None

    def __init__(self) -> None:
        self.logs: list[Any] = []

    async def log(self, params: types.LoggingMessageNotificationParams) -> None:
        self.logs.append((params.logger, params.data))

    async def ask(self, request: Any, result_type: Any) -> Any:
        raise AssertionError("not asked")


class Failing(Redact):
    async def on_message(self, ctx: CallContext, message: Message) -> dict[str, Any]:
        raise ValueError("broken hook")


@pytest.mark.parametrize(("hook", "expected_logs", "expected_progress"), [
    (Redact, [("[REDACTED]", {"[REDACTED]": "[REDACTED]"})], ["step [REDACTED]", None]),
    (Failing, [], [None]),  # withheld (fail closed): no log; the progress without a message still goes
])
async def test_relayed_logs_and_progress_pass_on_message(hook: type[Redact], expected_logs: list[Any],
                                                         expected_progress: list[str | None]) -> None:
    chain, downstream, ctx = redact_chain(hook()), Downstream(), context()
    progress: list[str | None] = []

    async def on_progress(params: dict[str, Any]) -> None:
        progress.append(params.get("message"))

    relay = chain.progress(ctx, on_progress)
    assert relay is not None

    async def send(_ctx: CallContext) -> dict[str, Any]:
        relayed = CURRENT_DOWNSTREAM.get()
        assert relayed is not None
        await relayed.log(types.LoggingMessageNotificationParams(level="info", logger=SECRET, data={SECRET: SECRET}))
        await relay({"progress": 1, "total": 2, "message": f"step {SECRET}"})
        await relay({"progress": 2, "total": 2})
        return {"content": []}

    token = CURRENT_DOWNSTREAM.set(downstream)
    try:
        await chain.run(ctx, send)
        assert CURRENT_DOWNSTREAM.get() is downstream  # the request's own downstream again once it is sent
    finally:
        CURRENT_DOWNSTREAM.reset(token)
    assert (downstream.logs, progress) == (expected_logs, expected_progress)


@pytest.mark.parametrize("transport", ["stdio", "http"])
async def test_redact_covers_logs_progress_errors_meta_and_prompts_through_triad(transport: str, procs: list[Proc],
                                                                                tmp_path: Path) -> None:
    """A real upstream whose name is a secret: its log messages and the echo's `_meta` carry it. Over stdio the
    upstream's messages come through the SDK's session; over HTTP through the direct path."""
    upstream = stdio_upstream("swordfish", "--subscribable") if transport == "stdio" else {
        "url": start_fixture(procs, "http", "swordfish", "--subscribable")}
    config = write_config(tmp_path, {"upstreams": {"fx": upstream},
                                     "naming": {"prefix": "always"},
                                     "hooks": [{"redact": {"patterns": ["swordfish", r"step \d", "greeting"]}}]})
    url = start_triad(procs, config, wait_ready=1)
    logs: list[Any] = []
    progress: list[str | None] = []

    async def on_log(params: types.LoggingMessageNotificationParams) -> None:
        logs.append(params.data)

    async def on_progress(value: float, total: float | None, message: str | None) -> None:
        progress.append(message)

    async with session_as(url, None, logging_callback=on_log) as session:
        logged = await call(session, "fx__log")
        assert logged["content"][0]["text"] == "logged"
        # the log messages come on the call's own stream, before its result
        assert logs == [f"{level} from {marker('[REDACTED]')}" for level in ("debug", "info", "warning", "error")]
        await session.call_tool("fx__progress", {"steps": 3}, progress_callback=on_progress)
        assert progress == ["[REDACTED]"] * 3
        echoed = await call(session, "fx__echo", {"text": "swordfish"})
        assert echoed["content"][0]["text"] == "[REDACTED]"
        assert "swordfish" not in str(echoed["_meta"]) and "[REDACTED]" in echoed["_meta"]["fixture/upstream"]
        with pytest.raises(MCPError) as raised:
            await session.read_resource("fixture://fx/nothing-swordfish")  # type: ignore[arg-type]
        assert raised.value.error.message == "Resource not found: fixture://nothing-[REDACTED]"
        with pytest.raises(MCPError) as raised:  # a completion's and a subscription's errors as well
            await session.complete(types.PromptReference(name="fx__greet"),
                                   {"name": "who", "value": "refuse swordfish"})
        assert raised.value.error.message == "no completions for refuse [REDACTED]"
        with pytest.raises(MCPError) as raised:
            await session.subscribe_resource("fixture://fx/refuse-swordfish")  # type: ignore[arg-type]
        assert raised.value.error.message == "cannot subscribe to fixture://refuse-[REDACTED]"
        prompt = await session.get_prompt("fx__greet", {"who": "swordfish"})
        assert prompt.description == "A [REDACTED]."
        assert prompt.messages[0].content.text == "Hello, [REDACTED]!"  # type: ignore[union-attr]
