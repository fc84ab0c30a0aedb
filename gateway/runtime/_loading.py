"""Reading a config file: YAML with the line of every key, `${VAR}` interpolation, the schema
(`gateway.config`), then the checks that span keys and modules (hook specs, upstream names against the naming
rules, working directories, tokens). Every problem is reported at once, with its key path and line, and never with
the value of a `${VAR}`.

It sits above the models it checks (`gateway.config`, `gateway.hooks`, `gateway.registry`), so none of them imports
it: no cycle.
"""

from __future__ import annotations

import os
import re
import sys
from pathlib import Path

from pydantic import SecretStr, ValidationError

from consumers import read_regular
from gateway.config import (
    PYTHON_VARIABLE,
    LineMap,
    Loaded,
    TriadConfig,
    YamlProblem,
    describe_error,
    format_problem,
    hide_values,
    load_with_lines,
    variables_mask,
)
from gateway.errors import ConfigError
from gateway.hooks import HookConfigError, check_hook
from gateway.registry import sanitize_server_names

__all__ = ["decode_config", "load_config", "parse_config"]


def load_config(path: str | Path) -> TriadConfig:
    """Read, interpolate and validate a config file. Raises ConfigError listing every problem."""
    path = Path(path)
    try:
        content = read_regular(path)[0]
    except OSError as exc:
        raise ConfigError([f"{path}: cannot read ({exc.strerror})"]) from None
    return parse_config(decode_config(content, path), source=path)


_CONTROL = re.compile(rb"[\x00-\x08\x0b\x0c\x0e-\x1a\x1c-\x1f]")
"""Bytes YAML never allows in a file (tab, newlines and escape aside): a binary file, not a config."""
_UTF16_BOMS = (b"\xff\xfe", b"\xfe\xff")
_SAVE = "save it as UTF-8 (in most editors: Save with Encoding, UTF-8)"


def decode_config(content: bytes, path: Path) -> str:
    """The file's text. UTF-8, with or without a byte-order mark (Notepad writes one); anything else is one
    problem that says what the file is and how to fix it, never a decoding traceback."""
    if content.startswith((b"\xff\xfe\x00\x00", b"\x00\x00\xfe\xff")):
        raise ConfigError([f"{path}: the file is UTF-32 text; {_SAVE}"])
    if content.startswith(_UTF16_BOMS) or (len(content) > 1 and content.count(b"\x00") * 3 >= len(content)
                                           and (content[0] == 0 or content[1] == 0) and _is_utf16(content)):
        raise ConfigError([f"{path}: the file is UTF-16 text; {_SAVE}"])
    if (control := _CONTROL.search(content)) is not None:
        line = content[:control.start()].count(b"\n") + 1
        raise ConfigError([f"{path}: not a text file (control byte 0x{content[control.start()]:02x} on line {line}); "
                           "a config is YAML text in UTF-8"])
    try:
        return content.decode("utf-8").removeprefix("\ufeff")
    except UnicodeDecodeError as exc:
        line = content[:exc.start].count(b"\n") + 1
        column = exc.start - (content.rfind(b"\n", 0, exc.start) + 1) + 1
        raise ConfigError([f"{path}: not UTF-8 text (byte 0x{content[exc.start]:02x} on line {line}, column "
                           f"{column}; Latin-1 or Windows-1252, probably); {_SAVE}"]) from None


def _is_utf16(content: bytes) -> bool:
    try:
        content.decode("utf-16-le" if content[1] == 0 else "utf-16-be")
    except UnicodeDecodeError:
        return False
    return True


def parse_config(text: str, *, source: Path | None = None, environ: dict[str, str] | None = None) -> TriadConfig:
    environ = {PYTHON_VARIABLE: sys.executable, **(os.environ if environ is None else environ)}
    try:
        loaded = load_with_lines(text, environ)
    except YamlProblem as exc:
        raise ConfigError([format_problem(exc.path, exc.message, exc.line)]) from None
    try:
        config = _validate(loaded, source)
    except ConfigError as exc:
        mask = variables_mask(loaded.variables)
        raise ConfigError([hide_values(problem, mask) for problem in exc.problems]) from None
    config._variables = {name: SecretStr(value) for name, value in loaded.variables.items()}
    config._lines = loaded.lines
    return config


def _validate(loaded: Loaded, source: Path | None) -> TriadConfig:
    data, lines = loaded.data, loaded.lines
    if data is None:  # an editor's truncate-then-write caught half-way looks just like this
        raise ConfigError([format_problem((), "the file is empty (only whitespace or comments); a config with no "
                                              "settings is written `{}`", None)])
    messages = [format_problem(p.path, p.message, p.line) for p in loaded.problems]
    if not isinstance(data, dict):
        raise ConfigError([*messages, format_problem((), "the top level must be a mapping of keys (`upstreams:`, "
                                                     "`clients:`...), not a list or a value", lines.get(()))])
    if "mcpServers" in data:
        lines.update({("upstreams", *k[1:]): v for k, v in lines.items() if k[:1] == ("mcpServers",)})
    try:
        config = TriadConfig.model_validate({**data, "source": source})
    except ValidationError as exc:
        errors = exc.errors(include_input=False, include_url=False)
        messages += [describe_error(error, lines, TriadConfig) for error in errors]
        config = None
    messages += _semantic_problems(config, lines) if config is not None else []
    if messages:
        raise ConfigError(messages)
    assert config is not None
    return config


def _semantic_problems(config: TriadConfig, lines: LineMap) -> list[str]:
    """Checks that span several keys (pydantic validates one value at a time)."""
    problems = []
    if config.anonymous is not None and config.anonymous not in config.clients:
        known = f"clients: {', '.join(config.clients)}" if config.clients else "there are no clients"
        problems.append(format_problem(("anonymous",), f"no client named {config.anonymous!r} under clients "
                                       f"({known})", lines.get(("anonymous",))))
    for index, spec in enumerate(config.hooks):
        try:
            check_hook(spec.name, spec.options)
        except HookConfigError as exc:
            if exc.options is None:
                problems.append(format_problem(("hooks", index), str(exc), lines.get(("hooks", index))))
                continue
            short = ("hooks", index, spec.name)  # `- name: {options}`; else the long form's `options:`
            at = short if short in lines else ("hooks", index, "options")
            problems += [describe_error(error, lines, exc.options, at, "option") for error in exc.errors]
    enabled = len(config.enabled_upstreams())
    if "min_ready" in config.model_fields_set and config.min_ready > enabled:
        problems.append(format_problem(("min_ready",), f"is {config.min_ready}, but the config has {enabled} enabled "
                                       f"upstream(s), so it could never be met (it is not lowered for you): set "
                                       f"min_ready: {enabled} or lower, or add upstreams", lines.get(("min_ready",))))
    raw_seen: dict[str, str] = {}
    for name in config.upstreams:
        key = re.sub(r"[^A-Za-z0-9_-]", "-", name.strip()).lower()
        if key in raw_seen:
            problems.append(
                format_problem(
                    ("upstreams", name),
                    f"same name as upstream {raw_seen[key]!r} once sanitised for tool names ({key!r})",
                    lines.get(("upstreams", name)),
                )
            )
        raw_seen.setdefault(key, name)
    problems += _prefix_problems(config, lines)
    problems += [format_problem(("upstreams", name), "the name contains ':', which separates an upstream from its "
                                "tool in pins and state (`upstream:tool`): upstream 'p:read' with tool 'doc' and "
                                "upstream 'p' with tool 'read:doc' would be one; rename it",
                                lines.get(("upstreams", name)))
                 for name in config.upstreams if ":" in name]
    if config.search.ranker != "bm25":
        from gateway.search import load_ranker  # numpy and a model: loaded by `check` unless the ranker is `bm25`

        try:
            load_ranker(config.search.ranker)
        except Exception as exc:
            problems.append(format_problem(("search", "ranker"), f"cannot load ranker {config.search.ranker!r}: "
                                           f"{type(exc).__name__}: {exc}", lines.get(("search", "ranker"))))
    for name, upstream in config.enabled_upstreams().items():
        cwd = config.resolve_cwd(upstream)
        if cwd is not None and not Path(cwd).is_dir():  # spawning would name it as a missing command
            where = ("upstreams", name, "cwd")
            problems.append(format_problem(where, f"working directory not found: {cwd} (create it, or correct the "
                                           "path: a relative cwd is relative to the config file)", lines.get(where)))
    tokens: dict[str, str] = {}
    for client_id, client in config.clients.items():
        if client.token is None:
            continue
        secret = client.token.get_secret_value()
        if not secret:
            where = ("clients", client_id, "token")
            problems.append(format_problem(where, "token is empty", lines.get(where)))
        elif secret in tokens:
            problems.append(
                format_problem(
                    ("clients", client_id, "token"),
                    f"same token as client {tokens[secret]!r}: give each client a token of its own",
                    lines.get(("clients", client_id, "token")),
                )
            )
        tokens.setdefault(secret, client_id)
    return problems


def _prefix_problems(config: TriadConfig, lines: LineMap) -> list[str]:
    """Exposed names are `<upstream><separator><tool>`: no upstream's prefix may be read as (part of) another's,
    or a rule written for `fs__*` would also reach the tools of an upstream named `fs__evil` (or `fs_`)."""
    if config.naming.prefix == "never":
        return []
    separator = config.naming.separator
    problems = []
    heads: dict[str, str] = {}
    for name, part in sanitize_server_names(list(config.upstreams)).items():
        where = ("upstreams", name)
        head = (part + separator).lower()
        if separator.lower() in part.lower():
            problems.append(format_problem(where, f"the name contains the naming separator {separator!r}, so its "
                                           "tools would look like another upstream's; rename it or change "
                                           "naming.separator", lines.get(where)))
        elif clash := next((other for other, h in heads.items() if h.startswith(head) or head.startswith(h)), None):
            problems.append(format_problem(where, f"its tools' prefix {head!r} overlaps {heads[clash]!r} of "
                                           f"upstream {clash!r}, so a pattern for one also matches the other's "
                                           "tools; rename one of them", lines.get(where)))
        heads[name] = head
    return problems
