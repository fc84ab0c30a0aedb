"""Exposed names: sanitising, limits, collisions, prefix modes, URIs (section 11.2, checklist item 6)."""

from __future__ import annotations

from pathlib import Path

import pytest

from gateway.cli import main
from gateway.config._models import NamingConfig
from gateway.errors import ConfigError
from gateway.registry._naming import (
    assign_names,
    expose_uri,
    parse_exposed_uri,
    prefix_active,
    renamed_key,
    sanitize,
    sanitize_server_names,
)
from gateway.runtime._loading import load_config, parse_config
from gateway.state import _name_ledger as name_ledger
from gateway.state._name_ledger import NameLedger, ledger_path
from policy.patterns import compile_glob

DEFAULT = NamingConfig()


def names(catalog: dict[str, list[str]], naming: NamingConfig = DEFAULT, *, prefixed: bool = True,
          reserved: tuple[str, ...] = ()) -> dict[tuple[str, str], str]:
    parts = sanitize_server_names(list(catalog))
    return dict(assign_names(catalog, naming, server_parts=parts, prefixed=prefixed, reserved=reserved).forward)


@pytest.mark.parametrize(("raw", "expected"), [
    ("echo", "echo"),
    ("  padded  ", "padded"),
    ("a.b/c d", "a-b-c-d"),
    ("café", "caf-"),
    ("日本", "--"),
    ("emoji🙂", "emoji-"),
    ("", "tool"),
    ("   ", "tool"),
    ("ok_-9", "ok_-9"),
])
def test_sanitize(raw: str, expected: str) -> None:
    assert sanitize(raw, "tool") == expected


@pytest.mark.parametrize(("servers", "expected"), [
    (["github"], ["github"]),
    (["", " "], ["mcp", "mcp-2"]),
    (["9lives"], ["mcp-9lives"]),
    (["my server"], ["my-server"]),
    (["GitHub", "github", "GITHUB"], ["GitHub", "github-2", "GITHUB-3"]),
    (["x" * 40], ["x" * 30]),
    (["x" * 40, "x" * 35], ["x" * 30, "x" * 28 + "-2"]),
    (["a.b", "a-b"], ["a-b", "a-b-2"]),
])
def test_server_parts(servers: list[str], expected: list[str]) -> None:
    assert list(sanitize_server_names(servers).values()) == expected


def test_prefixed_names() -> None:
    assert names({"github": ["create_issue"], "fs": ["read"]}) == {
        ("github", "create_issue"): "github__create_issue", ("fs", "read"): "fs__read"}


def test_whole_name_is_cut_to_64_characters() -> None:
    long = "t" * 100
    [name] = names({"server": [long]}).values()
    assert name == "server__" + "t" * (64 - len("server__"))
    assert len(name) == 64


def test_max_length_is_configurable_up_to_128() -> None:
    long = "t" * 200
    [name] = names({"s": [long]}, NamingConfig(max_length=128)).values()
    assert len(name) == 128
    with pytest.raises(ValueError):
        NamingConfig(max_length=129)


def test_collisions_across_case_go_to_the_fewest_capitals_then_get_suffixes_in_that_order() -> None:
    result = names({"s": ["Echo", "echo", "ECHO"]})
    assert result == {("s", "echo"): "s__echo", ("s", "Echo"): "s__Echo-2", ("s", "ECHO"): "s__ECHO-3"}


def test_collision_after_sanitising() -> None:
    assert names({"s": ["a.b", "a-b"]}) == {("s", "a-b"): "s__a-b", ("s", "a.b"): "s__a-b-2"}


def test_collision_suffix_still_fits_64() -> None:
    long_a, long_b = "x" * 70 + "a", "x" * 70 + "b"
    result = names({"srv": [long_a, long_b]})
    assert result[("srv", long_a)] == "srv__" + "x" * 59
    assert result[("srv", long_b)] == "srv__" + "x" * 57 + "-2"
    assert all(len(n) <= 64 for n in result.values())


def test_reserved_names_are_never_reused_case_insensitively() -> None:
    assert names({"s": ["Status"]}, prefixed=False, reserved=("status",)) == {("s", "Status"): "Status-2"}


def test_unprefixed_names_across_upstreams_collide_in_sorted_order() -> None:
    result = names({"b": ["echo"], "a": ["echo"]}, prefixed=False)
    assert result == {("a", "echo"): "echo", ("b", "echo"): "echo-2"}


def test_unprefixed_name_must_start_with_a_letter() -> None:
    assert names({"s": ["1password"]}, prefixed=False) == {("s", "1password"): "tool-1password"}


def test_mapping_is_stable_whatever_the_catalog_order() -> None:
    first = names({"a": ["x", "y", "X"], "b": ["x"]})
    second = names({"a": ["X", "y", "x"], "b": ["x"]})
    assert first == second


def test_reverse_lookup() -> None:
    parts = sanitize_server_names(["gh"])
    mapping = assign_names({"gh": ["a.b"]}, DEFAULT, server_parts=parts, prefixed=True)
    assert mapping.resolve("gh__a-b") == ("gh", "a.b")
    assert mapping.resolve("gh__nope") is None


def test_custom_separator() -> None:
    assert names({"gh": ["t"]}, NamingConfig(separator="_")) == {("gh", "t"): "gh_t"}


@pytest.mark.parametrize(("mode", "count", "expected"), [
    ("always", 1, True), ("never", 3, False), ("conditional", 1, False), ("conditional", 2, True),
    ("conditional", 0, False),
])
def test_prefix_modes(mode: str, count: int, expected: bool) -> None:
    assert prefix_active(NamingConfig(prefix=mode), count) is expected  # type: ignore[arg-type]


@pytest.mark.parametrize(("uri", "exposed"), [
    ("test://static", "test://srv/static"),
    ("file:///etc/hosts", "file://srv//etc/hosts"),
    ("urn:isbn:123", "urn:srv/isbn:123"),
    ("test://template/{id}/data", "test://srv/template/{id}/data"),
    ("no-scheme", "triad:srv/no-scheme"),
])
def test_uris_round_trip(uri: str, exposed: str) -> None:
    assert expose_uri(uri, "srv") == exposed
    assert parse_exposed_uri(exposed) == ("srv", uri)


def test_unparseable_uri() -> None:
    assert parse_exposed_uri("test://") is None
    assert parse_exposed_uri("plain") is None


SEPARATOR_CLASHES = [
    ("separator inside a name", "upstreams: {fs: {command: x}, fs__evil: {command: y}}\n",
     "upstreams.fs__evil: the name contains the naming separator '__'"),
    ("custom separator inside a name", "naming: {separator: '-'}\nupstreams: {my-server: {command: x}}\n",
     "upstreams.my-server: the name contains the naming separator '-'"),
    ("sanitised into the separator", "naming: {separator: '-'}\nupstreams: {my.server: {command: x}}\n",
     "upstreams.my.server: the name contains the naming separator '-'"),
    ("case does not hide it", "naming: {separator: X}\nupstreams: {boxer: {command: x}}\n",
     "upstreams.boxer: the name contains the naming separator 'X'"),
    ("one prefix runs into another", "upstreams:\n  fs: {command: x}\n  fs_: {command: y}\n",
     "upstreams.fs_: its tools' prefix 'fs___' overlaps 'fs__' of upstream 'fs', so a pattern"),
]


@pytest.mark.parametrize(("case", "text", "expected"), SEPARATOR_CLASHES, ids=[c[0] for c in SEPARATOR_CLASHES])
def test_check_refuses_upstream_names_that_read_as_another_upstreams_prefix(
        case: str, text: str, expected: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "names.yaml"
    path.write_text(text)
    assert main(["check", "-c", str(path)]) == 1
    assert expected in capsys.readouterr().err


def test_upstream_names_are_free_when_nothing_is_prefixed(tmp_path: Path) -> None:
    path = tmp_path / "never.yaml"
    path.write_text("naming: {prefix: never}\nupstreams: {fs: {command: x}, fs__evil: {command: y}}\n")
    assert main(["check", "-c", str(path)]) == 0


def test_check_warns_where_a_pattern_spans_upstreams(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "span.yaml"
    path.write_text("upstreams: {fs: {command: x}, files: {command: y}, web: {command: z}}\n"
                    "policy:\n"
                    "  profile: {deny: ['f*', '*delete*', 'fs__*', 'files__read*', 'fs:*', 'web*']}\n"
                    "  gateway_deny: ['fi*']\n")
    assert main(["check", "-c", str(path)]) == 0
    warnings = [line for line in capsys.readouterr().err.splitlines() if "spans" in line]
    assert warnings == [f"warning: {path}: policy.profile.deny: pattern 'f*' spans upstreams fs, files (write "
                        "'fs__...' to mean one of them) (line 3)"]


def test_a_pattern_cannot_reach_into_another_upstream_once_names_are_checked() -> None:
    """What the refusal protects: with `fs` and `fs_`, the glob `fs__*` matched both upstreams' tools."""
    parts = sanitize_server_names(["fs", "fs_"])
    mapping = assign_names({"fs": ["read"], "fs_": ["write"]}, DEFAULT, server_parts=parts, prefixed=True)
    glob = compile_glob("fs__*")
    assert glob is not None
    assert [name for name in mapping.reverse if glob.matches_text(name)] == ["fs__read", "fs___write"]
    with pytest.raises(ConfigError):
        parse_config("upstreams: {fs: {command: x}, fs_: {command: y}}\n")


def test_a_history_never_gives_an_exact_name_to_a_lookalike() -> None:
    catalog = {"fsA": ["Delete_File", "delete_file"]}
    expected = {("fsA", "delete_file"): "fsA__delete_file", ("fsA", "Delete_File"): "fsA__Delete_File-2"}
    assert names(catalog) == expected
    pinned = {("fsA", "Delete_File"): "fsA__Delete_File", ("fsA", "delete_file"): "fsA__delete_file-2"}
    parts = sanitize_server_names(list(catalog))
    mapping = assign_names(catalog, DEFAULT, server_parts=parts, prefixed=True, pinned=pinned)
    assert dict(mapping.forward) == expected


def test_a_pinned_name_that_is_not_exact_stays_with_its_tool_when_a_lookalike_sorts_first() -> None:
    parts = sanitize_server_names(["fs"])
    pinned = {("fs", "a:b"): "fs__a-b"}  # a:b came first; a.b sorts before it
    mapping = assign_names({"fs": ["a.b", "a:b"]}, DEFAULT, server_parts=parts, prefixed=True, pinned=pinned)
    assert dict(mapping.forward) == {("fs", "a:b"): "fs__a-b", ("fs", "a.b"): "fs__a-b-2"}


def test_the_pinned_name_of_an_absent_tool_goes_to_no_other_tool_unless_it_is_an_exact_match() -> None:
    parts = sanitize_server_names(["a", "b"])
    pinned = {("a", "e.cho"): "e-cho", ("a", "echo"): "echo"}  # a is down: its tools are not in the catalog now
    mapping = assign_names({"a": [], "b": ["e:cho", "echo"]}, DEFAULT, server_parts=parts, prefixed=False,
                           pinned=pinned)
    assert dict(mapping.forward) == {("b", "e:cho"): "e-cho-2", ("b", "echo"): "echo"}


def test_a_renamed_tool_is_named_from_its_new_name_and_its_former_name_only_to_an_exact_match() -> None:
    parts = sanitize_server_names(["fs"])
    pinned = {("fs", "echo"): "fs__echo"}  # the name echo had before it was renamed
    catalog = {"fs": [renamed_key("echo", "say"), "Echo"]}  # the upstream now offers a lookalike too
    mapping = assign_names(catalog, DEFAULT, server_parts=parts, prefixed=True, pinned=pinned)
    assert mapping.forward == {("fs", "echo => say"): "fs__say", ("fs", "Echo"): "fs__Echo"}  # an exact match
    again = assign_names(catalog, DEFAULT, server_parts=parts, prefixed=True,
                         pinned={**pinned, **mapping.forward})
    assert again.forward == mapping.forward


@pytest.mark.parametrize(("pinned", "naming", "expected"), [
    ("gh__t", NamingConfig(separator="_"), "gh_t"),          # another separator
    ("gh__t-7", NamingConfig(), "gh__t"),                    # an exact match gets its own name
    ("gh__other", NamingConfig(), "gh__t"),                  # not a name this tool could have
    ("gh__t-0", NamingConfig(), "gh__t"),
    ("gh__" + "t" * 60, NamingConfig(max_length=32), "gh__" + "t" * 28),  # cut for a longer limit
])
def test_a_pinned_name_the_settings_would_not_give_is_ignored(pinned: str, naming: NamingConfig,
                                                               expected: str) -> None:
    raw = "t" * 60 if pinned.startswith("gh__tttt") else "t"
    parts = sanitize_server_names(["gh"])
    mapping = assign_names({"gh": [raw]}, naming, server_parts=parts, prefixed=True, pinned={("gh", raw): pinned})
    assert mapping.exposed("gh", raw) == expected


def test_the_ledger_is_written_whole_and_read_back(tmp_path: Path) -> None:
    path = tmp_path / "state" / "triad.names.json"
    ledger = NameLedger(path, persist=True)
    ledger.record("tools", {("fs", "read"): "fs__read"})
    ledger.record("prompts", {("fs", "greet"): "fs__greet"})
    again = NameLedger(path)
    assert dict(again.pinned("tools")) == {("fs", "read"): "fs__read"}
    assert dict(again.pinned("prompts")) == {("fs", "greet"): "fs__greet"}
    # no temporary file left behind; the version before the last write is kept (tests/test_name_ledger_files.py)
    assert sorted(p.name for p in path.parent.iterdir()) == ["triad.names.json", "triad.names.json.bak"]


def test_a_ledger_that_does_not_persist_never_writes(tmp_path: Path) -> None:
    path = tmp_path / "triad.names.json"
    NameLedger(path).record("tools", {("fs", "read"): "fs__read"})
    assert not path.exists()


def test_names_another_process_wrote_are_kept(tmp_path: Path) -> None:
    path = tmp_path / "triad.names.json"
    one, two = NameLedger(path, persist=True), NameLedger(path, persist=True)
    one.record("tools", {("fs", "read"): "fs__read"})
    two.record("tools", {("fs", "write"): "fs__write"})
    assert dict(NameLedger(path).pinned("tools")) == {("fs", "read"): "fs__read", ("fs", "write"): "fs__write"}


def test_the_ledger_forgets_absent_tools_first_past_its_limit(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(name_ledger, "MAX_NAMES", 3)
    ledger = NameLedger()
    ledger.record("tools", {("s", f"old{i}"): f"s__old{i}" for i in range(3)})
    ledger.record("tools", {("s", "new0"): "s__new0", ("s", "new1"): "s__new1"})
    assert list(ledger.pinned("tools")) == [("s", "old2"), ("s", "new0"), ("s", "new1")]


def test_the_ledger_lives_next_to_the_config_or_in_state_dir(tmp_path: Path) -> None:
    path = tmp_path / "gw.yaml"
    path.write_text("upstreams: {}\n")
    assert ledger_path(load_config(path)) == tmp_path / "gw.names.json"
    path.write_text("upstreams: {}\nstate_dir: var/triad\n")
    assert ledger_path(load_config(path)) == tmp_path / "var" / "triad" / "gw.names.json"
    assert ledger_path(parse_config("upstreams: {}\n")) is None
