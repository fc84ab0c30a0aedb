"""Exposed names: `<upstream><sep><tool>` for tools and prompts, namespaced URIs for resources.

Rules (reference section 11.2, OpenClaw `agent-bundle-mcp-names.ts`):
- sanitise: trim, every character outside `[A-Za-z0-9_-]` becomes `-`; an empty upstream part becomes `mcp`, an
  empty tool part `tool`; the leading part of the exposed name gets `mcp-` / `tool-` if it does not start with an
  ASCII letter (LLM providers reject names that start otherwise);
- the upstream part is at most 30 characters, the whole name at most `naming.max_length` (64 by default, up to
  the spec's 128): the tool part is cut to fit;
- upstream parts that clash case-insensitively get `-2`, `-3`… in declaration order; tool names that clash
  case-insensitively (with each other or with reserved core/plugin names) get `-2`, `-3`… on the tool part,
  processing tools sorted by (upstream part, raw name, upstream name).

Everything here is a pure function of (config order, upstream names, raw names, names given before), so the
mapping is stable across reloads and restarts; the names given before are kept by `gateway.state`, so a
tool an upstream adds later cannot take a name another tool had. `NameMap` reverses it in O(1).
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

    `pinned` holds the names given before (the name ledger): a tool keeps its pinned name, and the pinned name of
    a tool that is absent now (its upstream down, or the tool gone for a while) is given to no other tool. So an
    upstream that adds `Delete_File` cannot take the name `delete_file` had, which a deny rule may be written on.
    A pinned name the current naming settings would not produce (another separator, prefix mode or length) is
    ignored."""
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

    wanted = {(upstream, raw) for upstream, names in catalog.items() for raw in names}
    held: list[tuple[tuple[str, str], str]] = []
    for key, name in sorted((pinned or {}).items()):
        if key[0] in server_parts and name.lower() not in taken and _fits(name, *shape(*key)):
            taken.add(name.lower())
            held.append((key, name))
    for key, name in held:
        if key in wanted:
            give(key, name)
    unnamed = sorted((server_parts[upstream], raw, upstream) for upstream, raw in wanted - forward.keys())
    for _part, raw, upstream in unnamed:
        head, tool, budget = shape(upstream, raw)
        n = 1
        while (candidate := _candidate(head, tool, budget, n)).lower() in taken:
            n += 1
        give((upstream, raw), candidate)
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
