"""Built-in hooks: audit, validate_arguments, rate_limit, timeout, max_result_size, redact, pin_definitions.

Each is a class whose keyword arguments are its options (validated by a pydantic model, so a typo in the config
is a config error naming the hook). Options are documented in the README.
"""

from __future__ import annotations

import itertools
import json
import logging
import re
from collections.abc import Callable, Mapping
from pathlib import Path

from jsonschema import Draft202012Validator
from jsonschema.exceptions import SchemaError
from pydantic import Field, field_validator

from consumers import JSON, JSONObject
from gateway.config import Duration
from gateway.hooks._audit import Audit
from gateway.hooks._linear_schema import LinearValidator, nonlinear_patterns
from gateway.hooks._options import HookOptions, json_size
from gateway.hooks._protocols import PathResolver
from gateway.hooks._values import LISTED_NAMES, MESSAGE_FIELDS, Block, CallContext, Message, Outcome
from gateway.registry import ListedKind
from gateway.state import Buckets, FilePins, LocalBuckets, Pins, PinStore, SharedState

logger = logging.getLogger("triad.hooks")

MAX_ARGUMENT_ERRORS = 20
"""Errors of one call's arguments that are reported (the arguments are the caller's: their errors are countless)."""


class ValidateArguments:
    """Checks tool arguments against the tool's inputSchema (JSON Schema 2020-12) before any upstream is called,
    in time linear in the arguments (`gateway.hooks._linear_schema`): a schema with a pattern that cannot be
    matched so blocks every call of its tool, with a message naming the pattern."""

    class Options(HookOptions):
        priority: int = 100

    def __init__(self, **options: JSON) -> None:
        self.priority = self.Options(**options).priority
        self._validators: dict[str, Draft202012Validator | list[str] | None] = {}

    async def before_call(self, ctx: CallContext) -> Block | None:
        schema = ctx.input_schema
        if not schema:
            return None
        key = json.dumps(schema, sort_keys=True, default=str)
        if key not in self._validators:
            try:
                Draft202012Validator.check_schema(schema)
                refused = nonlinear_patterns(schema)
                self._validators[key] = refused or LinearValidator(schema)
            except SchemaError:
                logger.warning("tool %s has an invalid inputSchema; arguments are not validated", ctx.name)
                self._validators[key] = None
        validator = self._validators[key]
        if validator is None:
            return None
        if isinstance(validator, list):
            shown = ", ".join(repr(pattern) for pattern in validator[:3])
            return Block(f"Arguments for tool {ctx.name} cannot be checked in linear time: its inputSchema has "
                         f"patterns with look-around or back-references ({shown}); the call is refused")
        found = list(itertools.islice(validator.iter_errors(ctx.arguments), MAX_ARGUMENT_ERRORS + 1))
        if not found:
            return None
        errors = sorted(found[:MAX_ARGUMENT_ERRORS], key=lambda e: [str(part) for part in e.absolute_path])
        lines = [f"- {'/'.join(map(str, e.absolute_path))[:200] or '(arguments)'}: {e.message[:300]}" for e in errors]
        more = ["- (more errors not shown)"] if len(found) > MAX_ARGUMENT_ERRORS else []
        return Block(f"Invalid arguments for tool {ctx.name}:\n" + "\n".join([*lines, *more]))


_RATE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*/\s*(s|m|h)\s*$")
_PER = {"s": 1.0, "m": 60.0, "h": 3600.0}


def parse_rate(text: str) -> tuple[float, float]:
    """`20/s` -> (capacity 20, 20 tokens per second); `100/m`, `1000/h` likewise."""
    match = _RATE.match(text)
    if match is None:
        raise ValueError(f"not a rate: {text!r} (use e.g. 20/s, 100/m, 1000/h)")
    count = float(match.group(1))
    return count, count / _PER[match.group(2)]


class RateLimit:
    """Token buckets per client, per tool or per upstream; over the limit, a tool error that says when to retry."""

    class Options(HookOptions):
        per_client: str | None = None
        per_tool: str | None = None
        per_upstream: str | None = None
        priority: int = 90

        @field_validator("per_client", "per_tool", "per_upstream")
        @classmethod
        def _rate(cls, value: str | None) -> str | None:
            if value is not None:
                parse_rate(value)
            return value

    def __init__(self, **options: JSON) -> None:
        self.options = self.Options(**options)
        self.priority = self.options.priority
        self._buckets: Buckets = LocalBuckets()

    def share(self, state: SharedState) -> None:
        """Count in buckets the replicas share (a limit of N holds for N calls in total)."""
        self._buckets = state.buckets()

    async def before_call(self, ctx: CallContext) -> Block | None:
        for scope, key, rate in (("client", ctx.client_id, self.options.per_client),
                                 ("tool", ctx.name, self.options.per_tool),
                                 ("upstream", ctx.upstream, self.options.per_upstream)):
            if rate is None:
                continue
            capacity, refill = parse_rate(rate)
            # the rate is part of the key: a reload that changes it starts a fresh bucket, as on one replica
            if (wait := await self._buckets.take(f"{scope}:{key}:{rate}", capacity, refill)) is not None:
                return Block(f"Rate limit exceeded for {scope} {key!r} ({rate}); retry in {wait:.2f}s")
        return None


class Timeout:
    """A per-tool or per-upstream call deadline, pushed back by upstream progress, with a hard cap (`max`)."""

    class Options(HookOptions):
        default: Duration | None = None
        tools: dict[str, Duration] = Field(default_factory=dict)
        upstreams: dict[str, Duration] = Field(default_factory=dict)
        max: Duration | None = None

    def __init__(self, **options: JSON) -> None:
        self.options = self.Options(**options)
        self.priority = self.options.priority

    async def before_call(self, ctx: CallContext) -> None:
        """`max` caps only the calls this hook times (a listed tool or upstream, or any call with `default`):
        another upstream's calls keep its own `timeout` and `max_call_time`."""
        o = self.options
        chosen = o.tools.get(ctx.name, o.upstreams.get(ctx.upstream, o.default))
        if chosen is None:
            return
        ctx.timeout = chosen
        if o.max is not None:
            ctx.max_time = o.max


class MaxResultSize:
    """Results over `bytes` (their JSON size) become a tool error, or with `truncate`, have their text cut."""

    class Options(HookOptions):
        bytes: int = Field(default=1_000_000, ge=64)
        truncate: bool = False

    def __init__(self, **options: JSON) -> None:
        self.options = self.Options(**options)
        self.priority = self.options.priority

    async def after_call(self, ctx: CallContext, outcome: Outcome) -> JSONObject | None:
        result = outcome.result
        size, limit = json_size(result), self.options.bytes
        if result is None or size <= limit:
            return None
        if not self.options.truncate:
            return {"content": [{"type": "text", "text": f"The result of {ctx.name} ({size} bytes) exceeds the "
                                 f"gateway's limit of {limit} bytes."}], "isError": True, "structuredContent": None}
        budget = max(limit - 200, 0)
        content = []
        for block in result.get("content") or []:
            if isinstance(block, dict) and block.get("type") == "text" and budget >= 0:
                text = block.get("text", "")
                content.append({**block, "text": text[:budget]})
                budget -= len(text)
            elif json_size(block) <= budget:
                content.append(block)
                budget -= json_size(block)
        content.append({"type": "text", "text": f"[truncated by Triad: {size} bytes, limit {limit}]"})
        return {"content": content, "structuredContent": None}


DEFAULT_SECRET_PATTERNS = (
    r"(?i)\bbearer\s+[a-z0-9._~+/=-]{8,}",
    r"-----BEGIN [A-Z ]*PRIVATE KEY-----[\s\S]*?-----END [A-Z ]*PRIVATE KEY-----",
    r"\b(?:AKIA|ASIA)[0-9A-Z]{16}\b",
    r"\bgh[pousr]_[A-Za-z0-9]{36,}\b",
    r"\bxox[abprs]-[A-Za-z0-9-]{10,}\b",
    r"\bAIza[0-9A-Za-z_-]{35}\b",
    r"\bsk-[A-Za-z0-9_-]{20,}\b",
)
"""Bearer tokens, private keys, AWS access keys, GitHub, Slack, Google API and OpenAI-style keys."""


BINARY_TYPES = ("image", "audio")
"""Content blocks whose `data` is base64: masking inside it would corrupt it, not hide a secret."""
REDACTED_FIELDS = ("content", "structuredContent", "contents", "messages", "description", "_meta")
"""Everything of a result that carries text: tool results, resource contents, prompt messages and description."""


def binary_payload(node: JSONObject, key: str) -> bool:
    """Base64 by shape, never by key name alone: the `data` of an image or audio content block, the `blob` of
    resource contents. A `data` or `blob` anywhere else (structured content, a log message) is text like any."""
    value = node.get(key)
    if not isinstance(value, str):
        return False
    if key == "data":
        return node.get("type") in BINARY_TYPES
    return key == "blob" and isinstance(node.get("uri"), str)


class Redact:
    """Masks secrets in everything an upstream says to a client: results (every string at any depth of content,
    structured content, resource contents, prompt messages and description, and `_meta`, dictionary keys included;
    base64 payloads excepted), the upstream's error messages, completions, relayed log and progress messages and
    sampling and elicitation requests, and its catalog (every string of each tool, resource, template and prompt).

    What a client calls, reads or gets by is kept as the upstream wrote it: a tool's and a prompt's name, a resource's
    URI and a template's, a prompt argument's name and the keys of an input schema (its argument names)."""

    class Options(HookOptions):
        patterns: tuple[str, ...] = ()
        defaults: bool = True
        replacement: str = "[REDACTED]"
        priority: int = -100

        @field_validator("patterns")
        @classmethod
        def _compile(cls, patterns: tuple[str, ...]) -> tuple[str, ...]:
            for pattern in patterns:
                re.compile(pattern)
            return patterns

    def __init__(self, **options: JSON) -> None:
        self.options = self.Options(**options)
        self.priority = self.options.priority
        patterns = [*(DEFAULT_SECRET_PATTERNS if self.options.defaults else ()), *self.options.patterns]
        self._regexes = [re.compile(p) for p in patterns]

    def _text(self, value: str) -> str:
        for regex in self._regexes:
            value = regex.sub(self.options.replacement, value)
        return value

    def _mask(self, value: JSON, keys: bool = True) -> JSON:
        """`keys`: dictionary keys too (not in an input schema, whose keys are argument names and keywords)."""
        if isinstance(value, str):
            return self._text(value)
        if isinstance(value, list):
            return [self._mask(v, keys) for v in value]
        if isinstance(value, dict):
            masked: JSONObject = {}
            for key, item in value.items():
                name = self._text(key) if isinstance(key, str) and keys else key
                while name in masked:  # two keys masked alike: both kept
                    name = f"{name}~"
                masked[name] = item if binary_payload(value, key) else self._mask(item, keys)
            return masked
        return value

    def mask(self, value: JSON) -> JSON:
        """`value` with every string in it masked (what an approval question shows of a call's arguments)."""
        return self._mask(value)

    def on_listed(self, kind: ListedKind, item: JSONObject) -> JSONObject:
        kept = LISTED_NAMES[kind]
        masked: JSONObject = {}
        for key, value in item.items():
            if key == kept:
                masked[key] = value
            elif key == "inputSchema":
                masked[key] = self._mask(value, keys=False)
            elif key == "arguments" and kind == "prompt" and isinstance(value, list):
                masked[key] = [{**m, "name": a["name"]} if isinstance(a, dict) and "name" in a
                               and isinstance(m := self._mask(a), dict) else self._mask(a) for a in value]
            else:
                masked[self._text(key)] = self._mask(value)
        return masked

    async def _after(self, ctx: CallContext, outcome: Outcome) -> JSONObject | None:
        if outcome.result is None:
            return None
        return {k: self._mask(outcome.result[k]) for k in REDACTED_FIELDS if k in outcome.result}

    after_call = after_read = after_get = _after

    async def on_message(self, ctx: CallContext, message: Message) -> JSONObject:
        return {k: self._mask(message.params[k]) for k in MESSAGE_FIELDS[message.kind] if k in message.params}


class PinDefinitions:
    """Remembers a hash of each tool's definition and blocks a tool whose definition changed since it was approved,
    until `triad approve` approves it again (protection against a tool silently rewritten after it was trusted)."""

    class Options(HookOptions):
        state: str = "triad-pins.json"
        trust_new: bool = True
        priority: int = 200

    def __init__(self, **options: JSON) -> None:
        self.options = self.Options(**options)
        self.priority = self.options.priority
        self.store = PinStore(Path(self.options.state))
        self.pins: Pins = FilePins(self.store)
        """Where approvals are kept: the state file, or with `cluster:` the cluster's (`share`)."""

    def locate(self, resolve: PathResolver) -> None:
        """The state file relative to the config file (the cluster's approvals keep the name as written)."""
        self.store = PinStore(Path(resolve(self.options.state)))
        self.pins = FilePins(self.store)

    def share(self, state: SharedState) -> None:
        """Keep approvals where every replica sees them (`triad approve` and the console write there too)."""
        self.pins = state.pins(self.options.state, self.store)

    async def before_call(self, ctx: CallContext) -> Block | None:
        if ctx.definition is None:
            return None
        verdict = await self.pins.check(ctx.upstream, ctx.raw_name, ctx.definition, self.options.trust_new)
        if verdict is None:
            return None
        return Block(f"Tool {ctx.name} is blocked: {verdict}. An operator must review it and run "
                     f"`triad approve -c <config> {ctx.name}`.")


BUILTIN_HOOKS: Mapping[str, Callable[..., object]] = {
    "audit": Audit,
    "validate_arguments": ValidateArguments,
    "rate_limit": RateLimit,
    "timeout": Timeout,
    "max_result_size": MaxResultSize,
    "redact": Redact,
    "pin_definitions": PinDefinitions,
}
