"""The two names for raw JSON in a signature; the only place `Any` stands for a wire value.

Defined here because `consumers` is the lowest package that every other one (but `policy`) may import; the
`consumers` face exports both. `policy`, which imports nothing of the others, keeps its own `policy/_json.py`.
"""

from typing import Any, TypeAlias

JSON: TypeAlias = Any
"""A value decoded from JSON (object, array, string, number, bool or null), narrowed where it is read."""

JSONObject: TypeAlias = dict[str, JSON]
"""A JSON-RPC object as it crossed the wire (params, a result, a notification), passed through, never re-validated."""
