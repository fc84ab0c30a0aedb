"""What every built-in hook's options share (`priority`), and the JSON size the size-minded hooks measure."""

from __future__ import annotations

import json

from pydantic import BaseModel, ConfigDict

from consumers import JSON


class HookOptions(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)
    priority: int = 0


def json_size(value: JSON) -> int:
    return len(json.dumps(value, separators=(",", ":"), default=str)) if value is not None else 0
