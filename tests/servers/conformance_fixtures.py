"""What the conformance suite's fixtures say: tools, resources, prompts, the multi-round-trip questions and the
texts they answer with (served by `conformance_upstream.py`)."""

from __future__ import annotations

import json
from typing import Any

NAME = "triad-conformance-fixture"
PNG = "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mP8z8DwHwAFBQIAX8jx0gAAAABJRU5ErkJggg=="
WAV = "UklGRiYAAABXQVZFZm10IBAAAAABAAEAQB8AAAB9AAACABAAZGF0YQIAAAA="
WATCHED = "test://watched-resource"
JSON_SCHEMA_2020_12: dict[str, Any] = {
    "$schema": "https://json-schema.org/draft/2020-12/schema",
    "type": "object",
    "$defs": {"address": {"$anchor": "addressDef", "type": "object",
                          "properties": {"street": {"type": "string"}, "city": {"type": "string"}}}},
    "properties": {"name": {"type": "string"}, "address": {"$ref": "#/$defs/address"},
                   "contactMethod": {"type": "string", "enum": ["phone", "email"]},
                   "phone": {"type": "string"}, "email": {"type": "string"}},
    "allOf": [{"anyOf": [{"required": ["phone"]}, {"required": ["email"]}]}],
    "if": {"properties": {"contactMethod": {"const": "phone"}}, "required": ["contactMethod"]},
    "then": {"required": ["phone"]},
    "else": {"required": ["email"]},
    "additionalProperties": False,
}
DEFAULTS_SCHEMA: dict[str, Any] = {"type": "object", "required": [], "properties": {
    "name": {"type": "string", "description": "User name", "default": "John Doe"},
    "age": {"type": "integer", "description": "User age", "default": 30},
    "score": {"type": "number", "description": "User score", "default": 95.5},
    "status": {"type": "string", "description": "User status", "enum": ["active", "inactive", "pending"],
               "default": "active"},
    "verified": {"type": "boolean", "description": "Verification status", "default": True}}}
ENUMS_SCHEMA: dict[str, Any] = {"type": "object", "required": ["untitledSingle"], "properties": {
    "untitledSingle": {"type": "string", "enum": ["option1", "option2", "option3"]},
    "titledSingle": {"type": "string", "oneOf": [{"const": "value1", "title": "First Option"},
                                                 {"const": "value2", "title": "Second Option"},
                                                 {"const": "value3", "title": "Third Option"}]},
    "legacyEnum": {"type": "string", "enum": ["opt1", "opt2", "opt3"],
                   "enumNames": ["Option One", "Option Two", "Option Three"]},
    "untitledMulti": {"type": "array", "minItems": 1, "maxItems": 3,
                      "items": {"type": "string", "enum": ["option1", "option2", "option3"]}},
    "titledMulti": {"type": "array", "minItems": 1, "maxItems": 3,
                    "items": {"anyOf": [{"const": "value1", "title": "First Choice"},
                                        {"const": "value2", "title": "Second Choice"},
                                        {"const": "value3", "title": "Third Choice"}]}}}}


def text(value: str) -> dict[str, Any]:
    return {"content": [{"type": "text", "text": value}]}


def tool(name: str, description: str, properties: dict[str, Any] | None = None,
         required: tuple[str, ...] = ()) -> dict[str, Any]:
    schema: dict[str, Any] = {"type": "object", "properties": properties or {}}
    if required:
        schema["required"] = list(required)
    return {"name": name, "description": description, "inputSchema": schema}


def elicit(message: str, properties: dict[str, Any], required: tuple[str, ...] = ()) -> dict[str, Any]:
    return {"method": "elicitation/create", "params": {"mode": "form", "message": message, "requestedSchema": {
        "type": "object", "properties": properties, "required": list(required)}}}


def sample(prompt: str, max_tokens: int = 100) -> dict[str, Any]:
    return {"method": "sampling/createMessage", "params": {
        "messages": [{"role": "user", "content": {"type": "text", "text": prompt}}], "maxTokens": max_tokens}}


ROOTS = {"method": "roots/list"}


def input_required(requests: dict[str, dict[str, Any]], state: dict[str, Any] | None = None) -> dict[str, Any]:
    result: dict[str, Any] = {"resultType": "input_required", "inputRequests": requests}
    if state is not None:
        result["requestState"] = json.dumps(state)
    return result


NAME_QUESTION = elicit("What is your name?", {"name": {"type": "string"}}, ("name",))
CONFIRM = elicit("Please confirm", {"ok": {"type": "boolean"}}, ("ok",))
ROUNDS: dict[str, list[dict[str, dict[str, Any]]]] = {
    "test_input_required_result_elicitation": [{"user_name": NAME_QUESTION}],
    "test_input_required_result_sampling": [{"sample_request": sample("What is the capital of France?")}],
    "test_input_required_result_list_roots": [{"roots_request": ROOTS}],
    "test_input_required_result_request_state": [{"confirm": CONFIRM}],
    "test_input_required_result_multiple_inputs": [{"user_name": NAME_QUESTION, "greeting": sample(
        "Generate a greeting", 50), "client_roots": ROOTS}],
    "test_input_required_result_multi_round": [
        {"step1": elicit("Step 1: What is your name?", {"name": {"type": "string"}}, ("name",))},
        {"step2": elicit("Step 2: What is your favorite color?", {"color": {"type": "string"}}, ("color",))}],
    "test_input_required_result_tampered_state": [{"confirm": CONFIRM}],
}
"""The multi-round-trip fixtures: the questions of each round, by the key the answer comes back under."""
STATEFUL = {"test_input_required_result_request_state", "test_input_required_result_multiple_inputs",
            "test_input_required_result_multi_round", "test_input_required_result_tampered_state"}


def finish(name: str, answers: dict[str, Any]) -> str:
    """The final text of a multi-round-trip fixture, from the answers."""
    if name == "test_input_required_result_elicitation":
        return f"Hello, {(answers['user_name'].get('content') or {}).get('name')}!"
    if name == "test_input_required_result_sampling":
        return f"Sampling result: {(answers['sample_request'].get('content') or {}).get('text', 'no response')}"
    if name == "test_input_required_result_list_roots":
        return f"Found {len(answers['roots_request'].get('roots') or [])} root(s)"
    return {"test_input_required_result_request_state": "state-ok: requestState validated",
            "test_input_required_result_multiple_inputs": "Multiple inputs completed",
            "test_input_required_result_multi_round": "Multi-round complete",
            "test_input_required_result_tampered_state": "integrity-ok: state verified",
            "test_streaming_elicitation": "confirmed",
            }.get(name, f"capabilities-ok: received {','.join(sorted(answers))}")


TOOLS = [
    tool("test_simple_text", "Tests simple text content response"),
    tool("test_image_content", "Tests image content response"),
    tool("test_audio_content", "Tests audio content response"),
    tool("test_embedded_resource", "Tests embedded resource content response"),
    tool("test_multiple_content_types", "Tests response with multiple content types (text, image, resource)"),
    tool("test_tool_with_logging", "Tests tool that emits log messages during execution"),
    tool("test_tool_with_progress", "Tests tool that reports progress notifications"),
    tool("test_error_handling", "Tests error response handling"),
    tool("test_sampling", "Tests server-initiated sampling (LLM completion request)",
         {"prompt": {"type": "string", "description": "The prompt to send to the LLM"}}, ("prompt",)),
    tool("test_elicitation", "Tests server-initiated elicitation (user input request)",
         {"message": {"type": "string", "description": "The message to show the user"}}, ("message",)),
    tool("test_elicitation_sep1034_defaults", "Tests elicitation with default values per SEP-1034"),
    tool("test_elicitation_sep1330_enums", "Tests elicitation with enum schema improvements per SEP-1330"),
    {"name": "json_schema_2020_12_tool", "description": "Tool with JSON Schema 2020-12 features",
     "inputSchema": JSON_SCHEMA_2020_12},
    {"name": "test_custom_header_tool", "description": "Mirrors arguments into Mcp-Param headers (SEP-2243)",
     "inputSchema": {"type": "object", "required": ["region"], "properties": {
         "region": {"type": "string", "x-mcp-header": "Region"},
         "priority": {"type": "integer", "x-mcp-header": "Priority"},
         "verbose": {"type": "boolean", "x-mcp-header": "Verbose"}}}},
    tool("test_missing_capability", "Requires the sampling capability the client must declare (SEP-2575)"),
    tool("test_streaming_elicitation", "Asks for input in-band, never with an independent request (SEP-2575)"),
    tool("test_logging_tool", "Logs only when the request opted in with a log level (SEP-2575)"),
    tool("test_trigger_tool_change", "Adds a tool and announces the change"),
    tool("test_trigger_prompt_change", "Adds a prompt and announces the change"),
    tool("test_trigger_resource_update", "Announces an update of test://watched-resource"),
    tool("test_input_required_result_elicitation", "Asks for the caller's name (SEP-2322)"),
    tool("test_input_required_result_sampling", "Asks for an LLM completion (SEP-2322)"),
    tool("test_input_required_result_list_roots", "Asks for the client's roots (SEP-2322)"),
    tool("test_input_required_result_request_state", "Round-trips requestState (SEP-2322)"),
    tool("test_input_required_result_multiple_inputs", "Asks for three inputs at once (SEP-2322)"),
    tool("test_input_required_result_multi_round", "Asks in two rounds (SEP-2322)"),
    tool("test_input_required_result_tampered_state", "Rejects a tampered requestState (SEP-2322)"),
    tool("test_input_required_result_capabilities", "Asks only for what the client declared (SEP-2322)"),
]
RESOURCES = [
    {"uri": "test://static-text", "name": "static-text", "title": "Static Text Resource",
     "description": "A static text resource for testing", "mimeType": "text/plain"},
    {"uri": "test://static-binary", "name": "static-binary", "title": "Static Binary Resource",
     "description": "A static binary resource for testing", "mimeType": "image/png"},
    {"uri": WATCHED, "name": "watched-resource", "title": "Watched Resource",
     "description": "A resource that can be subscribed to", "mimeType": "text/plain"},
]
TEMPLATES = [{"uriTemplate": "test://template/{id}/data", "name": "template", "title": "Resource Template",
              "description": "A resource template with parameter substitution", "mimeType": "application/json"}]
PROMPTS = [
    {"name": "test_simple_prompt", "title": "Simple Test Prompt", "description": "A simple prompt without arguments"},
    {"name": "test_prompt_with_arguments", "title": "Prompt With Arguments",
     "description": "A prompt with required arguments",
     "arguments": [{"name": "arg1", "description": "First argument", "required": True},
                   {"name": "arg2", "description": "Second argument", "required": True}]},
    {"name": "test_prompt_with_embedded_resource", "title": "Prompt With Embedded Resource",
     "description": "A prompt that includes an embedded resource",
     "arguments": [{"name": "resourceUri", "description": "URI of the resource to embed", "required": True}]},
    {"name": "test_prompt_with_image", "title": "Prompt With Image", "description": "A prompt with image content"},
    {"name": "test_input_required_result_prompt", "title": "Input Required Prompt",
     "description": "A prompt that asks for context first (SEP-2322)"},
]
