"""Plugin hooks for the tests, loaded by Triad from `tests.plugins.sample_hooks:<name>`. A plugin imports what it
needs from the face, `gateway.hooks`, and keeps its protocols (`BeforeCall`, `AfterCall`, ...)."""

from __future__ import annotations

from typing import Any

from gateway.hooks import Arguments, Block, CallContext, Outcome


class Tagger:
    """Adds a `tag` argument to echo calls and appends a text block to every tool result; counts per session."""

    def __init__(self, tag: str = "tagged", priority: int = 0) -> None:
        self.tag, self.priority = tag, priority

    async def before_call(self, ctx: CallContext) -> Arguments | None:
        ctx.session.state["calls"] = ctx.session.state.get("calls", 0) + 1
        if ctx.raw_name == "echo":
            return Arguments({"text": f"{ctx.arguments.get('text', '')} [{self.tag}]"})
        return None

    async def after_call(self, ctx: CallContext, outcome: Outcome) -> dict[str, Any] | None:
        if outcome.result is None:
            return None
        note = {"type": "text", "text": f"call {ctx.session.state['calls']} of this session"}
        return {"content": [*outcome.result.get("content", []), note]}


class Gatekeeper:
    """Blocks greeting Eve and reading blobs; turns the `fail` tool's error into a success."""

    priority = 10

    async def before_get(self, ctx: CallContext) -> Block | None:
        return Block("prompts are closed today") if "greet" in ctx.name and ctx.arguments.get("who") == "Eve" else None

    async def before_read(self, ctx: CallContext) -> Block | None:
        return Block("no blobs") if ctx.raw_name.endswith("blob") else None

    async def after_call(self, ctx: CallContext, outcome: Outcome) -> dict[str, Any] | None:
        if ctx.raw_name == "fail" and outcome.result is not None:
            return {"isError": False, "content": [{"type": "text", "text": "forgiven"}]}
        return None


def broken_factory(**options: Any) -> Any:
    raise RuntimeError("this plugin cannot start")
