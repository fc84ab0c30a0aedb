"""Exposed names: `<upstream><sep><tool>` for tools and prompts, namespaced URIs for resources.

Rules (reference section 11.2, OpenClaw `agent-bundle-mcp-names.ts`):
- sanitise: trim, every character outside `[A-Za-z0-9_-]` becomes `-`; an empty upstream part becomes `mcp`, an
  empty tool part `tool`; the leading part of the exposed name gets `mcp-` / `tool-` if it does not start with an
  ASCII letter (LLM providers reject names that start otherwise);
- the upstream part is at most 30 characters, the whole name at most `naming.max_length` (64 by default, up to
  the spec's 128): the tool part is cut to fit;
- upstream parts that clash case-insensitively get `-2`, `-3`… in declaration order; a tool whose raw name is
  exactly its name's form gets it (`assign_names`); tool names that clash case-insensitively (with each other or
  with reserved core/plugin names) get `-2`, `-3`… on the tool part, in one total order of raw names.

Everything here is a pure function of (config order, upstream names, raw names, names given before). The exact
names depend on the catalog alone, so a rule written on one means the same tool on a first start and on every
replica; the names given before (kept by `gateway.state`) only keep the other names stable across reloads and
restarts. `NameMap` reverses it in O(1).
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

from gateway.config import NamingConfig

MAX_UPSTREAM_PART = 30
_UNSAFE = re.compile(r"[^A-Za-z0-9_-]")
RENAMED = " => "
"""A tool renamed in config (`tools.overrides.<raw>.name`) is named, and kept in the name ledger, under the key
`<raw> => <new name>`: its exposed name is made from the new name, stays with it across reloads and restarts, and
the name the tool had before stays reserved for it (as any absent tool's), so no other tool takes either."""


def renamed_key(raw: str, name: str) -> str:
    return f"{raw}{RENAMED}{name}"


def naming_text(key: str) -> str:
    """The text an exposed name is made from: the new name of a renamed tool's key, else the raw name."""
    return key.rpartition(RENAMED)[2] if RENAMED in key else key


def sanitize(text: str, empty: str) -> str:
    cleaned = _UNSAFE.sub("-", text.strip())
    return cleaned or empty


def _lead_with_letter(part: str, prefix: str) -> str:
    return part if part[:1].isascii() and part[:1].isalpha() else f"{prefix}-{part}"


def prefix_active(naming: NamingConfig, upstream_count: int) -> bool:
    """`conditional` prefixes only when several upstreams are configured (enabled), so names stay stable
    whichever of them happen to be connected."""
    if naming.prefix == "always":
        return True
    if naming.prefix == "never":
        return False
    return upstream_count > 1


def sanitize_server_names(names: Sequence[str]) -> dict[str, str]:
    """Upstream name -> its safe part, in declaration order, clashes suffixed `-2`, `-3`…"""
    out: dict[str, str] = {}
    taken: set[str] = set()
    for name in names:
        base = _lead_with_letter(sanitize(name, "mcp"), "mcp")[:MAX_UPSTREAM_PART]
        candidate, n = base, 1
        while candidate.lower() in taken:
            n += 1
            suffix = f"-{n}"
            candidate = base[: MAX_UPSTREAM_PART - len(suffix)] + suffix
        taken.add(candidate.lower())
        out[name] = candidate
    return out


@dataclass(frozen=True)
class NameMap:
    """exposed name <-> (upstream, raw name), both directions O(1)."""

    forward: Mapping[tuple[str, str], str]
    reverse: Mapping[str, tuple[str, str]]

    def exposed(self, upstream: str, raw: str) -> str:
        return self.forward[(upstream, raw)]

    def resolve(self, exposed: str) -> tuple[str, str] | None:
        return self.reverse.get(exposed)


def assign_names(
    catalog: Mapping[str, Sequence[str]],
    naming: NamingConfig,
    *,
    server_parts: Mapping[str, str],
    prefixed: bool,
    reserved: Iterable[str] = (),
    pinned: Mapping[tuple[str, str], str] | None = None,
) -> NameMap:
    """Name every (upstream, raw name) in `catalog` (a renamed tool's raw name is its `renamed_key`). `reserved`
    names (core, plugins) are never reused.

    The names are a function of the catalog first, so that they mean the same tool on every replica and on a
    first start, whatever came first:
    1. a tool whose raw name is exactly its name's form (`delete_file` -> `fs__delete_file`: nothing sanitised,
       prefixed or cut) gets that name; exact names that differ only by case (`Delete_File`) go to the first in
       `_rank` (the fewest capitals, then code points), and the others are named as in 3;
    2. `pinned` (the name ledger) keeps names stable as tools come and go: a tool keeps the name it had, and the
       pinned name of a tool that is absent now (its upstream never listed, or the tool gone for a while) goes to
       no other tool, unless step 1 gave that name (case-insensitively) to a tool: history never outranks an
       exact match. A pinned name the current naming settings would not produce is ignored;
    3. every other tool, in `_rank` order, gets its first free name: plain, then `-2`, `-3`…"""
    taken = {name.lower() for name in reserved}
    sep = naming.separator
    forward: dict[tuple[str, str], str] = {}
    reverse: dict[str, tuple[str, str]] = {}

    def shape(upstream: str, key: str) -> tuple[str, str, int]:
        raw = naming_text(key)
        if prefixed:
            head, tool = server_parts[upstream] + sep, sanitize(raw, "tool")
        else:
            head, tool = "", _lead_with_letter(sanitize(raw, "tool"), "tool")
        return head, tool, max(1, naming.max_length - len(head))

    def give(key: tuple[str, str], name: str) -> None:
        taken.add(name.lower())
        forward[key] = name
        reverse[name] = key

    def rank(key: tuple[str, str]) -> tuple[int, str, str, str, str]:
        text = naming_text(key[1])
        return sum(c.isupper() for c in text), text, key[1], server_parts[key[0]], key[0]

    wanted = sorted({(upstream, raw) for upstream, names in catalog.items() for raw in names}, key=rank)
    for key in wanted:
        head, tool, budget = shape(*key)
        if tool == naming_text(key[1]) and len(tool) <= budget and (head + tool).lower() not in taken:
            give(key, head + tool)
    held: list[tuple[tuple[str, str], str]] = []
    for key, name in sorted((pinned or {}).items()):
        if (key[0] in server_parts and key not in forward and name.lower() not in taken
                and _fits(name, *shape(*key))):
            taken.add(name.lower())
            held.append((key, name))
    present = set(wanted)
    for key, name in held:
        if key in present:
            give(key, name)
    for key in wanted:
        if key not in forward:
            head, tool, budget = shape(*key)
            n = 1
            while (candidate := _candidate(head, tool, budget, n)).lower() in taken:
                n += 1
            give(key, candidate)
    return NameMap(forward, reverse)


def _candidate(head: str, tool: str, budget: int, n: int) -> str:
    """The n-th name for a tool: the first one plain, then `-2`, `-3`… on the tool part (cut to fit)."""
    if n == 1:
        return head + tool[:budget]
    suffix = f"-{n}"
    return head + tool[: max(1, budget - len(suffix))] + suffix


_SUFFIX = re.compile(r"-([1-9][0-9]{0,5})$")


def _fits(name: str, head: str, tool: str, budget: int) -> bool:
    """Whether `name` is one the current settings would give this tool (its first name or a suffixed one)."""
    if name == _candidate(head, tool, budget, 1):
        return True
    match = _SUFFIX.search(name)
    return match is not None and int(match.group(1)) >= 2 and name == _candidate(head, tool, budget,
                                                                                  int(match.group(1)))


_SCHEME = re.compile(r"^([A-Za-z][A-Za-z0-9+.-]*):(//)?")


def expose_uri(uri: str, server_part: str) -> str:
    """Insert the upstream part after the scheme: `test://a/b` -> `test://srv/a/b`, `urn:x` -> `urn:srv/x`.

    The `://` form stays `://`, so the reverse is unambiguous. A URI without a scheme gets `triad:srv/`.
    Works for URI templates too (`test://t/{id}` -> `test://srv/t/{id}`).
    """
    match = _SCHEME.match(uri)
    if match is None:
        return f"triad:{server_part}/{uri}"
    return f"{match.group(0)}{server_part}/{uri[match.end():]}"


def parse_exposed_uri(uri: str) -> tuple[str, str] | None:
    """The inverse of `expose_uri`: (server part, raw URI), or None if `uri` is not in that form."""
    match = _SCHEME.match(uri)
    if match is None:
        return None
    rest = uri[match.end():]
    server_part, slash, raw_rest = rest.partition("/")
    if not slash or not server_part:
        return None
    if match.group(1) == "triad" and not match.group(2):
        return server_part, raw_rest
    return server_part, f"{match.group(0)}{raw_rest}"
