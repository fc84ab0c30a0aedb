"""JSON with comments and trailing commas (JSONC), as VS Code, Cursor and Gemini CLI write their settings files.

`loads_jsonc` blanks out `//` and `/* */` comments and drops a comma before `}` or `]`, outside strings, then
hands the text to `consumers.loads` (bounded nesting). Newlines are kept, so a parse error still names the right line.
"""

from __future__ import annotations

import json

from consumers import JSON, loads


def loads_jsonc(text: str) -> JSON:
    """Parse JSONC; raises `json.JSONDecodeError` as `consumers.loads` does (an unclosed comment included)."""
    return loads(_strip(text.removeprefix("\ufeff")))


def _strip(text: str) -> str:
    out: list[str] = []
    pending_comma: int | None = None  # index in `out` of a comma that a closing bracket would make trailing
    i, n = 0, len(text)
    while i < n:
        char = text[i]
        if char == '"':
            end = _string_end(text, i)
            out.append(text[i:end])
            pending_comma = None
            i = end
        elif text.startswith("//", i):
            end = text.find("\n", i)
            end = n if end < 0 else end
            out.append(" " * (end - i))
            i = end
        elif text.startswith("/*", i):
            end = text.find("*/", i + 2)
            if end < 0:
                raise json.JSONDecodeError("unclosed /* comment", text, i)
            out.append("".join(c if c == "\n" else " " for c in text[i:end + 2]))
            i = end + 2
        else:
            if char in "}]" and pending_comma is not None:
                out[pending_comma] = " "
            if char == ",":
                pending_comma = len(out)
            elif not char.isspace():
                pending_comma = None
            out.append(char)
            i += 1
    return "".join(out)


def _string_end(text: str, start: int) -> int:
    """The index just past the string that opens at `start` (or the end of the text, for json to report)."""
    i = start + 1
    while i < len(text):
        if text[i] == "\\":
            i += 2
        elif text[i] == '"':
            return i + 1
        else:
            i += 1
    return len(text)
