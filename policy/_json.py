"""Raw JSON in a signature, as `consumers._json` names it (policy imports nothing of the other packages)."""

from typing import Any, TypeAlias

JSON: TypeAlias = Any
"""A value decoded from JSON (here: an upstream's tool annotations), narrowed where it is read."""

JSONObject: TypeAlias = dict[str, JSON]
"""A JSON object as it crossed the wire, passed through, never re-validated."""
