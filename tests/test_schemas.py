"""Provider schema profiles on real schemas (server-everything's and the test upstream's) and hand-made ones."""

from __future__ import annotations

import copy
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from jsonschema import Draft202012Validator
from mcp import ClientSession, StdioServerParameters, stdio_client

from gateway.registry._schemas import GEMINI_REMOVED, XAI_REMOVED, normalize
from tests.conftest import NODE_DIR, Proc, node_bin, start_triad, stdio_upstream, write_config
from tests.servers.fixture_upstream import RICH_SCHEMA
from tests.test_gateway_e2e import call
from tests.test_policy_e2e import session_as

HANDMADE: list[dict[str, Any]] = [
    {},
    {"properties": {"a": {"type": "string"}}},
    {"anyOf": [{"type": "object", "properties": {"kind": {"const": "a"}, "x": {"type": "integer"}},
                "required": ["kind", "x"]},
               {"type": "object", "properties": {"kind": {"const": "b"}, "y": {"type": "string"}},
                "required": ["kind"]}], "description": "a union at the root"},
    {"type": "object", "$defs": {"node": {"type": "object", "properties": {"next": {"$ref": "#/$defs/node"}}}},
     "properties": {"list": {"$ref": "#/$defs/node"}, "bad": {"$ref": "#/$defs/missing", "title": "Bad"}}},
    {"type": "object", "properties": {"outer": {"type": "object", "properties": {
        "inner": {"type": "object", "properties": {"deep": {"type": "number", "minimum": 0}}}}}}},
    copy.deepcopy(RICH_SCHEMA),
]


def nodes(schema: Any) -> Iterator[dict[str, Any]]:
    if isinstance(schema, dict):
        yield schema
        for value in schema.values():
            yield from nodes(value)
    elif isinstance(schema, list):
        for item in schema:
            yield from nodes(item)


def everything_schemas() -> list[dict[str, Any]]:
    import anyio

    node_bin()
    server = str(NODE_DIR / "node_modules" / ".bin" / "mcp-server-everything")

    async def fetch() -> list[dict[str, Any]]:
        async with stdio_client(StdioServerParameters(command=server, args=["stdio"])) as (read, write), \
                ClientSession(read, write) as session:
            await session.initialize()
            return [t.input_schema for t in (await session.list_tools()).tools]

    return anyio.run(fetch)


@pytest.fixture(scope="module")
def schemas() -> list[dict[str, Any]]:
    return HANDMADE + everything_schemas()


def test_anthropic_sees_schemas_untouched(schemas: list[dict[str, Any]]) -> None:
    for schema in schemas:
        assert normalize(schema, "anthropic") == schema


def test_every_profile_gives_valid_json_schema(schemas: list[dict[str, Any]]) -> None:
    for schema in schemas:
        for profile in ("openai", "google", "xai"):
            Draft202012Validator.check_schema(normalize(schema, profile))


def test_google_profile_obeys_gemini_rules(schemas: list[dict[str, Any]]) -> None:
    for schema in schemas:
        result = normalize(schema, "google")
        assert result.get("type") == "object"
        for node in nodes(result):
            if "properties" in node and isinstance(node["properties"], dict) and node.get("type") == "object":
                assert set(node.get("required", [])) <= set(node["properties"])
            assert not (GEMINI_REMOVED & set(node) - {"properties"}) or _is_property_map(node), node
            assert "anyOf" not in node and "oneOf" not in node and "const" not in node
            assert not isinstance(node.get("type"), list) or "null" not in node["type"]


def _is_property_map(node: dict[str, Any]) -> bool:
    """A `properties` map may have a property *named* like a keyword; that is not a keyword."""
    return all(isinstance(v, dict) for v in node.values()) and "type" not in node


def test_google_profile_details() -> None:
    rich = normalize(RICH_SCHEMA, "google")
    props = rich["properties"]
    assert props["mode"] == {"enum": ["fast"]}
    assert props["level"] == {"type": "string", "enum": ["low", "high"]}
    assert props["home"] == {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"],
                             "description": "Where they live"}
    assert props["nickname"] == {"type": "string"}
    assert rich["required"] == ["mode"]  # a required name without a property is dropped
    cyclic = normalize(HANDMADE[3], "google")["properties"]
    assert cyclic["list"] == {"type": "object", "properties": {"next": {}}}
    assert cyclic["bad"] == {"title": "Bad"}


def test_openai_profile_is_strict_compatible(schemas: list[dict[str, Any]]) -> None:
    assert normalize({}, "openai") == {"type": "object", "properties": {}, "required": [],
                                       "additionalProperties": False}
    for schema in schemas:
        result = normalize(schema, "openai")
        assert result["type"] == "object" or "allOf" in result
        for node in nodes(result):
            if node.get("type") == "object":
                assert "properties" in node
                if node["properties"] == {}:
                    assert node["required"] == [] and node["additionalProperties"] is False


def test_xai_profile_strips_length_and_count_keywords(schemas: list[dict[str, Any]]) -> None:
    for schema in schemas:
        result = normalize(schema, "xai")
        for node in nodes(result.get("properties", {})):
            assert not (XAI_REMOVED & set(node)) or _is_property_map(node)


def test_root_union_is_flattened() -> None:
    flat = normalize(HANDMADE[2], "openai")
    assert flat["properties"]["kind"] == {"enum": ["a", "b"], "type": "string"}
    assert flat["required"] == ["kind"] and flat["description"] == "a union at the root"


@pytest.mark.anyio
async def test_clients_see_their_profile_and_arguments_pass_unchanged(procs: list[Proc], tmp_path: Path,
                                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TRIAD_TEST_G", "gemini-client-token")
    monkeypatch.setenv("TRIAD_TEST_A", "claude-client-token")
    config = write_config(tmp_path, {"upstreams": {"fx": stdio_upstream("profiles")}, "clients": {
        "gem": {"token": "${TRIAD_TEST_G}", "provider": "google"},
        "claude": {"token": "${TRIAD_TEST_A}", "provider": "anthropic"}}})
    url = start_triad(procs, config, wait_ready=1)
    async with session_as(url, "gemini-client-token") as gem, session_as(url, "claude-client-token") as claude:
        gem_schema = {t.name: t.input_schema for t in (await gem.list_tools()).tools}["rich"]
        claude_schema = {t.name: t.input_schema for t in (await claude.list_tools()).tools}["rich"]
        assert claude_schema == RICH_SCHEMA
        assert gem_schema == normalize(RICH_SCHEMA, "google") and "$defs" not in gem_schema
        arguments = {"mode": "fast", "home": {"city": "Oslo"}, "nickname": None}
        result = await call(gem, "rich", arguments)
        assert json.loads(result["content"][0]["text"]) == arguments
