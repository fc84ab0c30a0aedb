"""Provider schema profiles: the input schemas a client sees, normalised for its LLM family (reference section 9).

- `anthropic`: untouched (full JSON Schema 2020-12 is accepted).
- `openai`: the root is made an object, then a strict-compatible tidy-up: objects get `type`, `properties`,
  `required: []` and `additionalProperties: false` where absent. Unions stay.
- `google`: the root is made an object (top-level unions flattened), then Gemini's scrub: unsupported keywords
  removed, `const` -> `enum`, local `$ref`s inlined (a cycle becomes `{}`), unions collapsed, `null` dropped
  from type lists, `required` limited to existing properties.
- `xai`: the root is made an object, then length and count keywords are stripped.

Only what the client sees changes; arguments go to the upstream as the client sent them. Pure functions.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping
from typing import Literal

from consumers import JSON, JSONObject

Profile = Literal["anthropic", "openai", "google", "xai"]
PROFILES: tuple[str, ...] = ("anthropic", "openai", "google", "xai")

GEMINI_REMOVED = frozenset({
    "patternProperties", "additionalProperties", "$schema", "$id", "$ref", "$defs", "definitions", "examples",
    "minLength", "maxLength", "minimum", "maximum", "multipleOf", "pattern", "format",
    "minItems", "maxItems", "uniqueItems", "minProperties", "maxProperties", "not",
})
XAI_REMOVED = frozenset({"minLength", "maxLength", "minItems", "maxItems", "minContains", "maxContains"})
METADATA = ("description", "title", "default")
_OPENAI_MAPS = ("$defs", "definitions", "dependentSchemas", "patternProperties", "properties")
_OPENAI_NESTED = ("additionalProperties", "allOf", "anyOf", "contains", "else", "if", "items", "not", "oneOf",
                  "prefixItems", "propertyNames", "then", "unevaluatedItems", "unevaluatedProperties")


def normalize(schema: Mapping[str, JSON], profile: str | None) -> JSONObject:
    if profile not in ("openai", "google", "xai"):
        return dict(schema)
    if "allOf" in schema and "anyOf" not in schema and "oneOf" not in schema:
        return dict(schema)  # a top-level allOf is left as it is, with no provider cleaning (reference 9.1)
    root = normalize_root(copy.deepcopy(dict(schema)))
    cleaned: JSONObject
    if profile == "openai":
        cleaned = _openai(root, is_root=True)
    elif profile == "google":
        cleaned = clean_for_gemini(root)
    else:
        cleaned = _strip(root, XAI_REMOVED)
    return cleaned


def normalize_root(schema: JSONObject) -> JSONObject:
    if not schema:
        return {"type": "object", "properties": {}}
    for key in ("anyOf", "oneOf"):
        if isinstance(schema.get(key), list):
            return _flatten_union(schema, schema[key])
    if "type" not in schema and ("properties" in schema or "required" in schema):
        schema["type"] = "object"
    if "type" in schema and "properties" not in schema:
        schema["properties"] = {}
    return schema


def _flatten_union(root: JSONObject, variants: list[JSON]) -> JSONObject:
    objects = [v for v in variants if isinstance(v, dict) and isinstance(v.get("properties"), dict)]
    properties: JSONObject = {}
    for variant in objects:
        for name, prop in variant["properties"].items():
            if name not in properties:
                properties[name] = copy.deepcopy(prop)
                continue
            properties[name] = _merge_property(properties[name], prop)
    required = root.get("required") or sorted(set.intersection(*(set(v.get("required") or ()) for v in objects))
                                              if objects else set())
    out: JSONObject = {"type": "object", "properties": properties}
    if required:
        out["required"] = list(required)
    out["additionalProperties"] = root.get("additionalProperties", True)
    for key in ("title", "description"):
        if key in root:
            out[key] = root[key]
    return out


def _merge_property(first: JSON, second: JSON) -> JSON:
    values = _literals(first) + _literals(second)
    if not values or not isinstance(first, dict):
        return first
    merged: JSONObject = {"enum": list(dict.fromkeys(values))}
    for source in (first, second):
        for key in METADATA:
            if key in source and key not in merged and isinstance(source, dict):
                merged[key] = source[key]
    kinds = {_json_type(v) for v in merged["enum"]}
    if len(kinds) == 1:
        merged["type"] = kinds.pop()
    return merged


def _literals(node: JSON) -> list[JSON]:
    if not isinstance(node, dict):
        return []
    if "const" in node:
        return [node["const"]]
    return list(node["enum"]) if isinstance(node.get("enum"), list) else []


def _json_type(value: JSON) -> str:
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, int | float):
        return "number"
    if isinstance(value, str):
        return "string"
    return "null" if value is None else "object" if isinstance(value, dict) else "array"


def _openai(node: JSON, is_root: bool = False) -> JSON:
    if not isinstance(node, dict):
        return node
    if is_root and not node:
        return {"type": "object", "properties": {}, "required": [], "additionalProperties": False}
    node = dict(node)
    if ("properties" in node or "required" in node) and "type" not in node:
        node["type"] = "object"
    if node.get("type") == "object" and "properties" not in node:
        node["properties"] = {}
    if node.get("type") == "object" and node.get("properties") == {}:
        node.setdefault("required", [])
        node.setdefault("additionalProperties", False)
    for key in _OPENAI_MAPS:
        if isinstance(node.get(key), dict):
            node[key] = {name: _openai(sub) for name, sub in node[key].items()}
    for key in _OPENAI_NESTED:
        if isinstance(node.get(key), list):
            node[key] = [_openai(sub) for sub in node[key]]
        elif isinstance(node.get(key), dict):
            node[key] = _openai(node[key])
    return node


def _strip(node: JSON, removed: frozenset[str]) -> JSON:
    if isinstance(node, list):
        return [_strip(item, removed) for item in node]
    if not isinstance(node, dict):
        return node
    out = {k: v for k, v in node.items() if k not in removed}
    if isinstance(out.get("properties"), dict):
        out["properties"] = {name: _strip(sub, removed) for name, sub in out["properties"].items()}
    for key in ("items", "anyOf", "oneOf", "allOf"):
        if key in out:
            out[key] = _strip(out[key], removed)
    return out


def clean_for_gemini(schema: JSONObject) -> JSONObject:
    defs = {**(schema.get("definitions") or {}), **(schema.get("$defs") or {})}
    cleaned: JSONObject = _gemini(schema, defs, ())
    return cleaned


def _gemini(node: JSON, defs: Mapping[str, JSON], resolving: tuple[str, ...]) -> JSON:
    if isinstance(node, list):
        return [_gemini(item, defs, resolving) for item in node]
    if not isinstance(node, dict):
        return node
    metadata = {k: node[k] for k in METADATA if k in node}
    ref = node.get("$ref")
    if isinstance(ref, str):
        name = _local_ref(ref)
        if name is None or name not in defs:
            return dict(metadata)
        if name in resolving:
            return {}  # a cycle
        return {**_gemini(defs[name], defs, (*resolving, name)), **metadata}
    for key in ("anyOf", "oneOf"):
        if isinstance(node.get(key), list):
            return _collapse_union(node, [_gemini(v, defs, resolving) for v in node[key]], metadata)
    out: JSONObject = {}
    for key, value in node.items():
        if key in GEMINI_REMOVED:
            continue
        if key == "const":
            out["enum"] = [value]
        elif key == "properties":
            out["properties"] = {n: _gemini(s, defs, resolving) for n, s in (value or {}).items()}
        elif key in ("items", "allOf"):
            out[key] = _gemini(value, defs, resolving)
        elif key == "type" and isinstance(value, list):
            kinds = [t for t in value if t != "null"]
            out["type"] = kinds[0] if len(kinds) == 1 else kinds
        else:
            out[key] = value
    if isinstance(out.get("required"), list):
        existing = out.get("properties") or {}
        out["required"] = [r for r in out["required"] if r in existing]
        if not out["required"] or (out.get("type") == "object" and not existing):
            del out["required"]
    return out


def _collapse_union(node: JSONObject, variants: list[JSON], metadata: JSONObject) -> JSONObject:
    kept = [v for v in variants if not (isinstance(v, dict) and (v.get("type") == "null" or v.get("enum") == [None]))]
    literals = [v for v in kept if isinstance(v, dict) and isinstance(v.get("enum"), list) and len(v["enum"]) == 1]
    types = {v.get("type") for v in kept if isinstance(v, dict)}
    if kept and len(literals) == len(kept) and len(types) == 1 and None not in types:
        return {"type": types.pop(), "enum": [v["enum"][0] for v in literals], **metadata}
    if len(kept) == 1:
        return {**kept[0], **metadata}
    objects = [v for v in kept if isinstance(v, dict) and v.get("type") == "object"]
    if len(objects) == 1:
        return {**objects[0], **metadata}
    if len(types) == 1 and None not in types:
        return {"type": types.pop(), **metadata}
    first = kept[0] if kept and isinstance(kept[0], dict) else {}
    return {**({"type": first["type"]} if "type" in first else {}), **metadata}


def _local_ref(ref: str) -> str | None:
    for prefix in ("#/$defs/", "#/definitions/"):
        if ref.startswith(prefix):
            return ref[len(prefix):].replace("~1", "/").replace("~0", "~")
    return None
