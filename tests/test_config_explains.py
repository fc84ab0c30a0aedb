"""Configs that explain themselves (issue 31, points 7-9): near-miss `${VAR}` spellings, files that are not UTF-8,
`hooks:` errors, `min_ready`, regex-looking policy patterns, and reloads that say what they changed. Each problem
names the key path and line and says what to write instead."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import anyio
import pytest
import yaml
from hypothesis import given, settings
from hypothesis import strategies as st

from gateway.cli import main
from gateway.errors import ConfigError
from gateway.runtime._loading import parse_config
from gateway.runtime._reload import _read
from tests.conftest import TRIAD, Proc, start_triad, stdio_upstream, write_config

NAMES = st.from_regex(r"[A-Z_][A-Z0-9_]{0,12}", fullmatch=True)
DEFAULTS = st.from_regex(r"[a-z0-9]{4,16}", fullmatch=True)

WHERE: list[tuple[str, tuple[str, ...]]] = [
    ("upstreams:\n  s:\n    command: srv\n    env: {TOKEN: \"@V@\"}\n", ("upstreams", "s", "env", "TOKEN")),
    ("upstreams:\n  s:\n    url: https://example.com/mcp\n    headers: {Authorization: \"Bearer @V@\"}\n",
     ("upstreams", "s", "headers", "Authorization")),
    ("upstreams:\n  s:\n    command: srv\n    args: [--key, \"@V@\"]\n", ("upstreams", "s", "args", "1")),
    ("clients:\n  ide:\n    token: \"@V@\"\n", ("clients", "ide", "token")),
]
"""Config strings a credential is read into: an env value, a header, an argument, a client token."""

NEAR_MISSES: list[tuple[str, str]] = [
    ("${%n:%d}", "write ${%n:-default}"),
    ("${%n-%d}", "write ${%n:-default}"),
    ("${%n:=%d}", "write ${%n:-default}"),
    ("${%n:?%d}", "${%n:-default}"),
    ("${%n", "write ${%n}"),
    ("${ %n }", "write ${%n}"),
    ("${env:%n}", "write ${%n}"),
    ("%d$%n", "write ${%n}"),
    ("$(%n)", "write ${%n}"),
]
"""Each near miss of a reference (`%n` the variable, `%d` text around or in it) and the fix its problem must give."""


@settings(max_examples=80, deadline=None)
@given(name=NAMES, default=DEFAULTS, shape=st.sampled_from(NEAR_MISSES), where=st.sampled_from(WHERE))
def test_a_near_miss_reference_is_a_problem_naming_the_spelling_meant(name: str, default: str,
                                                                      shape: tuple[str, str],
                                                                      where: tuple[str, tuple[str, ...]]) -> None:
    written, fix = shape[0].replace("%n", name).replace("%d", default), shape[1].replace("%n", name)
    template, path = where
    text = template.replace("@V@", written)
    with pytest.raises(ConfigError) as raised:
        parse_config(text, environ={name: "the-real-secret"})
    [problem] = [p for p in raised.value.problems if p.startswith(".".join(path) + ":")]
    line = next(i for i, x in enumerate(text.splitlines(), 1) if written in x)
    assert problem.endswith(f"(line {line})") and fix in problem, problem
    assert "the-real-secret" not in problem and (default not in problem or default in name), problem


@settings(max_examples=60, deadline=None)
@given(name=NAMES, default=DEFAULTS, literal=st.from_regex(r"[a-z0-9 /:.@%^-]{0,12}", fullmatch=True))
def test_real_references_and_the_dollar_escape_still_expand(name: str, default: str, literal: str) -> None:
    value = f"{literal}$${{{name}}}${{{name}}}${{NOT_SET_{name}:-{default}}}^a$"
    config = parse_config(f"upstreams:\n  s:\n    command: srv\n    env: {{V: \"{value}\"}}\n",
                          environ={name: "x"})
    assert config.upstreams["s"].env["V"].get_secret_value() == f"{literal}${{{name}}}x{default}^a$"


ENCODINGS: list[tuple[str, bytes, str]] = [
    ("latin-1", "upstreams: {s: {command: café}}\n".encode("latin-1"), "not UTF-8 text (byte 0xe9 on line 1"),
    ("windows-1252", "# \u201cquoted\u201d\nupstreams: {}\n".encode("cp1252"), "not UTF-8 text (byte 0x93 on line 1"),
    ("utf-16 with BOM", "upstreams: {}\n".encode("utf-16"), "the file is UTF-16 text; save it as UTF-8"),
    ("utf-16-be with BOM", b"\xfe\xff" + "upstreams: {}\n".encode("utf-16-be"), "the file is UTF-16 text"),
    ("utf-16 without BOM", "upstreams: {}\n".encode("utf-16-le"), "the file is UTF-16 text; save it as UTF-8"),
    ("utf-32", "upstreams: {}\n".encode("utf-32"), "the file is UTF-32 text; save it as UTF-8"),
    ("binary", b"\x7fELF\x02\x01\x01\x00\x00\x00\x00", "not a text file (control byte 0x02 on line 1)"),
    ("gzip", b"\x1f\x8b\x08\x00\xd2\x8f", "not a text file (control byte 0x1f on line 1)"),
]


@pytest.mark.parametrize(("content", "expected"), [(c, e) for _, c, e in ENCODINGS], ids=[i for i, _, _ in ENCODINGS])
def test_a_file_that_is_not_utf8_is_one_clear_problem(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                                      content: bytes, expected: str) -> None:
    path = tmp_path / "triad.yaml"
    path.write_bytes(content)
    assert main(["check", "-c", str(path)]) == 1
    err = capsys.readouterr().err
    assert f"  {path}: {expected}" in err and "Traceback" not in err and len(err.splitlines()) == 2, err
    with pytest.raises(ConfigError) as raised:  # the reloader reads the file the same way
        anyio.run(_read, path)
    assert [expected in p for p in raised.value.problems] == [True], raised.value.problems


def test_a_utf8_file_with_a_byte_order_mark_is_read(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "triad.yaml"
    path.write_bytes("\ufeffupstreams: {s: {command: café}}\n".encode())
    assert main(["check", "-c", str(path)]) == 0, capsys.readouterr().err


HOOK_SHAPES: list[tuple[str, str]] = [
    ("hooks: {audit: {path: a.jsonl}}", "hooks: must be a list (`- item` lines"),
    ("hooks:\n  - audit: {path: a.jsonl}\n    redact: {}", "hooks.0: one hook per list entry: start each of 'audit', "
                                                         "'redact' with its own `- ` (line 2)"),
    ("hooks:\n  - 42", "hooks.0: a hook is a name (`- audit`) or a name with options"),
    ("hooks:\n  - audit: 5", "hooks.0: the options of hook 'audit' must be a mapping"),
    ("hooks:\n  - timeout: {defualt: 30s}", "hooks.0.timeout.defualt: unknown option 'defualt' (did you mean "
                                            "'default'?) (line 2)"),
    ("hooks:\n  - timeout:\n      max: soon", "hooks.0.timeout.max: not a duration (use e.g. 30s, 500ms, 2m) (line 3)"),
    ("hooks:\n  - max_result_size: {bytes: lots}", "hooks.0.max_result_size.bytes: must be a whole number (line 2)"),
    ("hooks:\n  - redact: {patterns: x}", "hooks.0.redact.patterns: must be a list"),
    ("hooks:\n  - rate_limit: {per_client: fast}", "hooks.0.rate_limit.per_client: not a rate: 'fast' (use e.g. 20/s"),
    ("hooks:\n  - name: timeout\n    options: {max: soon}", "hooks.0.options.max: not a duration"),
    ("hooks:\n  - max_result_size: {truncate: sometimes}", "hooks.0.max_result_size.truncate: must be true or false"),
]


@pytest.mark.parametrize(("text", "expected"), HOOK_SHAPES)
def test_hook_problems_are_worded_like_other_config_problems(text: str, expected: str) -> None:
    with pytest.raises(ConfigError) as raised:
        parse_config(text + "\n")
    [problem] = raised.value.problems
    assert problem.startswith(expected), problem
    assert not re.search(r"validation error|Input should|\[type=|Options\b", problem), problem


@pytest.mark.parametrize(("upstreams", "min_ready", "ok"), [(0, None, True), (0, 0, True), (2, 2, True),
                                                            (2, 3, False), (0, 1, False), (3, None, True)])
def test_min_ready_above_the_upstreams_is_a_problem(upstreams: int, min_ready: int | None, ok: bool) -> None:
    data: dict[str, Any] = {"upstreams": {f"u{i}": {"command": "srv"} for i in range(upstreams)}}
    if min_ready is not None:
        data["min_ready"] = min_ready
    if ok:
        parse_config(yaml.safe_dump(data, sort_keys=False))
        return
    with pytest.raises(ConfigError) as raised:
        parse_config(yaml.safe_dump(data, sort_keys=False))
    assert raised.value.problems == [
        f"min_ready: is {min_ready}, but the config has {upstreams} enabled upstream(s), so it could never be met (it "
        f"is not lowered for you): set min_ready: {upstreams} or lower, or add upstreams (line {2 * upstreams + 2})"]


SETTINGS_CHANGES: list[tuple[str, dict[str, Any]]] = [
    ("hooks", {"hooks": [{"timeout": {"default": "30s"}}]}),
    ("policy", {"policy": {"gateway_deny": ["*exec*"]}}),
    ("clients", {"clients": {"ide": {"token": "ide-token-1234567"}}, "anonymous": "ide"}),
    ("naming", {"naming": {"separator": "--"}}),
    ("page_size", {"page_size": 7}),
    ("limits", {"limits": {"calls_in_flight": 50}}),
]


@pytest.mark.anyio
async def test_a_reload_that_changed_only_settings_says_which(procs: list[Proc], tmp_path: Path) -> None:
    base: dict[str, Any] = {"upstreams": {"a": stdio_upstream("ce-a")}}
    path = write_config(tmp_path, base)
    start_triad(procs, path, wait_ready=1)
    current = base
    for count, (key, change) in enumerate(SETTINGS_CHANGES, 1):
        current = {**current, **change}
        changed = sorted(k for k in change if k != "anonymous") + (["anonymous"] if "anonymous" in change else [])
        temporary = path.with_name("next.yaml")
        temporary.write_text(yaml.safe_dump(current, sort_keys=False))
        temporary.replace(path)
        line = await procs[-1].until(r"reloaded config \(file changed\): (.*); registry version", count)
        assert line.group(1) == "settings " + ", ".join(changed), (key, line.group(0))
    path.write_bytes("upstreams: {}\n".encode("utf-16"))
    await procs[-1].until(r"reload \(file changed\) refused, the running config stays in force:\\n  \S+triad\.yaml: "
                          r"the file is UTF-16 text; save it as UTF-8")


RULE_PLACES: list[tuple[str, str]] = [
    ("policy:\n  profile:\n    deny:\n      - '@P@'\n", "policy.profile.deny"),
    ("policy:\n  profiles:\n    ro:\n      allow:\n        - '@P@'\n", "policy.profiles.ro.allow"),
    ("policy:\n  agents:\n    coder:\n      also_allow:\n        - '@P@'\n", "policy.agents.coder.also_allow"),
    ("policy:\n  providers:\n    openai:\n      deny:\n        - '@P@'\n", "policy.providers.openai.deny"),
    ("policy:\n  groups:\n    eng:\n      deny:\n        - '@P@'\n", "policy.groups.eng.deny"),
    ("policy:\n  gateway_deny:\n    - '@P@'\n", "policy.gateway_deny"),
    ("policy:\n  owner_only:\n    - '@P@'\n", "policy.owner_only"),
    ("policy:\n  tool_groups:\n    risky:\n      - '@P@'\n", "policy.tool_groups.risky"),
    ("clients:\n  ide:\n    token: ide-token-12345678\n    tools:\n      deny:\n        - '@P@'\n",
     "clients.ide.tools.deny"),
]
"""Every place a pattern is written; `@P@` is the pattern, on the last line."""

REGEXES: list[tuple[str, str]] = [
    ("^.*exec.*$", "did you mean '*exec*'?"),
    ("demo__ech?", "did you mean 'demo__ec*'?"),
    ("[a-z]+", "did you mean '*'?"),
    ("foo|bar", "did you mean the patterns 'foo', 'bar'?"),
    ("demo__(read|write)_file", "did you mean the patterns 'demo__read_file', 'demo__write_file'?"),
    ("^demo__echo$", "did you mean 'demo__echo'?"),
    ("\\w+_file", "did you mean '*_file'?"),
    ("exec.+", "did you mean 'exec*'?"),
    (".*delete", "did you mean '*delete'?"),
]
GLOBS = ["demo__*", "*exec*", "fs.*", "group:demo", "demo:*", "read_file", "*", "a.b.c"]
"""Patterns that are globs (a dot is in tool names; `fs.*` is a prefix): never taken for regular expressions."""


@pytest.mark.parametrize(("place", "path"), RULE_PLACES, ids=[p for _, p in RULE_PLACES])
def test_check_warns_where_a_pattern_is_a_regular_expression(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                                             place: str, path: str) -> None:
    head = "upstreams:\n  demo: {command: srv}\n"
    for pattern, fix in REGEXES + [(g, "") for g in GLOBS]:
        text = head + place.replace("@P@", pattern.replace("'", "''"))
        file = tmp_path / "triad.yaml"
        file.write_text(text)
        assert main(["check", "-c", str(file)]) == 0
        warnings = [w for w in capsys.readouterr().err.splitlines() if "regular expression" in w]
        if not fix:
            assert warnings == [], (pattern, warnings)
            continue
        assert warnings == [f"warning: {file}: {path}: pattern {pattern!r} looks like a regular expression, but a "
                            "pattern is a glob: * is its only wildcard and ^ $ ? + | ( ) [ ] are plain characters, so "
                            f"it matches no tool name; {fix} (line {len(text.splitlines())})"], warnings


TOOL_NAMES = st.from_regex(r"[a-z]{2,6}(_[a-z]{2,6}){0,2}", fullmatch=True)


@st.composite
def regex_for(draw: st.DrawFn) -> tuple[str, str]:
    """A tool name and a regular expression someone wrote for it (that fully matches it)."""
    name = draw(TOOL_NAMES)
    cut = draw(st.integers(1, len(name) - 1))
    shapes = [f"^{name}$", f".*{name[cut:]}", f"{name[:cut]}.+", f"{name[:cut]}?{name[cut:]}",
              f"{name[:cut]}[a-z_]+", f"({name}|{draw(TOOL_NAMES)})", f"^.*{name[cut:]}.*$",
              f"{name[:cut]}\\w*", f"{re.escape(name[:cut])}(x|{name[cut:]})"]
    return name, draw(st.sampled_from(shapes))


@settings(max_examples=200, deadline=None)
@given(case=regex_for())
def test_the_glob_suggested_for_a_regular_expression_matches_what_it_matched(case: tuple[str, str]) -> None:
    from policy import compile_glob
    from policy.lint import looks_like_regex, regex_hint

    name, regex = case
    assert re.fullmatch(regex, name)
    assert looks_like_regex(regex)
    suggested = re.findall(r"'([^']*)'", regex_hint(regex).split("did you mean", 1)[1])
    assert any(glob is not None and glob.matches_text(name) for glob in map(compile_glob, suggested)), (regex,
                                                                                                      suggested)


@pytest.mark.anyio
async def test_plan_and_the_daemon_name_patterns_that_match_no_tool(procs: list[Proc], tmp_path: Path) -> None:
    config: dict[str, Any] = {"upstreams": {"a": stdio_upstream("ce-pa"), "b": stdio_upstream("ce-pb")},
                              "policy": {"profile": {"deny": ["a__echo", "a__ecoh", "^.*image.*$", "b__*"]},
                                         "tool_groups": {"gone": ["c__*"]}}}
    path = write_config(tmp_path, config)
    text = path.read_text().splitlines()

    def line(pattern: str) -> int:
        return next(i for i, x in enumerate(text, 1) if x.strip() in (f"- {pattern}", f"- '{pattern}'"))

    expected = [
        f"policy.profile.deny: pattern 'a__ecoh' matches none of the 40 tools the upstreams list (did you mean "
        f"'a__echo' or 'b__echo'?) (line {line('a__ecoh')})",
        "policy.profile.deny: pattern '^.*image.*$' matches none of the 40 tools the upstreams list (a pattern is a "
        "glob: * is its only wildcard and ^ $ ? + | ( ) [ ] are plain characters, so it matches no tool name; did "
        f"you mean '*image*'?) (line {line('^.*image.*$')})",
        "policy.tool_groups.gone: pattern 'c__*' matches none of the 40 tools the upstreams list (`triad plan` lists "
        f"their names) (line {line('c__*')})",
    ]
    plan = await anyio.run_process([*TRIAD, "plan", "-c", str(path)], check=False)
    out = plan.stdout.decode()
    assert plan.returncode == 0, plan.stderr.decode()
    registry = out.split("\nregistry:\n", 1)[1].splitlines()
    assert [x.strip() for x in registry if "matches none" in x] == expected, out
    start_triad(procs, path, wait_ready=2)
    for warning in expected:
        await procs[-1].until(re.escape(warning))
    # a reload that brings a new such pattern says so too; the ones already said are not repeated
    config["policy"]["gateway_deny"] = ["b__nothing"]
    temporary = path.with_name("next.yaml")
    temporary.write_text(yaml.safe_dump(config, sort_keys=False))
    temporary.replace(path)
    await procs[-1].until(r"policy.gateway_deny: pattern 'b__nothing' matches none of the 40 tools the upstreams "
                          r"list \(did you mean '\w+' or '\w+'\?\) \(line \d+\)")
    assert all(procs[-1].stderr.count(w) == 1 for w in expected), procs[-1].stderr


@settings(max_examples=80, deadline=None)
@given(literal=st.from_regex(r"[a-z ]{0,4}(\$[A-Za-z0-9_ ]{0,4}){1,3}(\$\$)?", fullmatch=True))
def test_an_imported_literal_dollar_stays_literal(literal: str) -> None:
    """A client that does not expand `$VAR` passed it as written: the import writes `$$`, and Triad passes the same
    text (now that a near-miss reference is refused, an unescaped one would fail the imported file)."""
    import json

    from gateway.cli._importer import convert

    source = {"mcpServers": {"sh": {"command": "sh", "args": ["-c", literal], "env": {"P": literal}}}}
    config = parse_config(convert(json.dumps(source), source_format="claude-desktop").yaml)
    assert config.upstreams["sh"].args == ("-c", literal)
    assert config.upstreams["sh"].env["P"].get_secret_value() == literal
