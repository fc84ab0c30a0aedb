"""Exposed names are a function of the catalog: an exact raw-name match wins, whatever the order or the history.

Issue 29, points 1 and 3: on a first start `Delete_File` took `fs__delete_file`'s name (it sorts first), so a
deny on `fs__delete_file` (matched case-insensitively) landed on the harmless tool; with one ledger per replica
`echo` meant one upstream's tool on r1 and another's on r2. The class: every set of raw names with case variants
and characters that normalise to the same form, in every order, with and without names given before.
"""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from gateway.config._models import NamingConfig
from gateway.registry._naming import NameMap, assign_names, sanitize, sanitize_server_names
from gateway.state import NameLedger

NAMING = NamingConfig(max_length=12)  # short, so that cut names are generated too
RESERVED = ("search", "ab")
ALPHABET = ["a", "A", "b", "B", "_", "-", ".", " ", ":", "2"]

raw_names = st.text(alphabet=st.sampled_from(ALPHABET), min_size=1, max_size=5).map(
    lambda s: s if s.strip() else "a" + s)
catalogs = st.dictionaries(st.sampled_from(["a", "b"]), st.lists(raw_names, max_size=7, unique=True),
                           min_size=1)
modes = st.booleans()
"""True: `<upstream>__<tool>`; False: unprefixed, where the same raw name on two upstreams competes."""


def _head(upstream: str, prefixed: bool) -> str:
    return f"{upstream}{NAMING.separator}" if prefixed else ""


def _is_exact(raw: str, upstream: str, prefixed: bool) -> bool:
    """Whether the raw name is exactly its name's form: nothing sanitised, cut, or put in front."""
    plain = _head(upstream, prefixed) + raw
    return sanitize(raw, "tool") == raw and (prefixed or raw[:1].isalpha()) and len(plain) <= NAMING.max_length


def _assign(catalog: dict[str, list[str]], prefixed: bool,
            pinned: dict[tuple[str, str], str] | None = None) -> NameMap:
    return assign_names(catalog, NAMING, server_parts=sanitize_server_names(sorted(catalog)), prefixed=prefixed,
                        reserved=RESERVED, pinned=pinned)


@st.composite
def histories(draw: st.DrawFn, catalog: dict[str, list[str]], prefixed: bool) -> dict[tuple[str, str], str]:
    """Names given before: any tool (present or gone) with any name a tool of these raw names could have had."""
    pool = [(up, raw) for up, raws in catalog.items() for raw in raws] + [("a", draw(raw_names))]
    keys = draw(st.lists(st.sampled_from(pool), max_size=6, unique=True))
    names = [_head(up, prefixed) + sanitize(draw(st.sampled_from(pool))[1], "tool") for up, _ in keys]
    suffixes = draw(st.lists(st.sampled_from(["", "-2", "-3"]), min_size=len(keys), max_size=len(keys)))
    return {key: (name + suffix)[:NAMING.max_length] for key, name, suffix in zip(keys, names, suffixes, strict=True)}


@settings(max_examples=200, deadline=None)
@given(data=st.data(), catalog=catalogs, prefixed=modes)
def test_names_are_a_function_of_the_catalog_and_an_exact_match_always_wins(
        data: st.DataObject, catalog: dict[str, list[str]], prefixed: bool) -> None:
    pinned = data.draw(st.none() | histories(catalog, prefixed))
    mapping = _assign(catalog, prefixed, pinned)
    names = list(mapping.forward.values())
    # (a) unique case-insensitively, and never a reserved name
    assert len({n.lower() for n in names}) == len(names)
    assert not {n.lower() for n in names} & set(RESERVED)
    # (b) an exact raw-name match gets its own name; among exact names that differ only by case, the one with
    # the fewest capitals (then the first in code points) does, and no other tool gets a name confusable with it
    exact = [(up, raw) for up, raws in catalog.items() for raw in raws if _is_exact(raw, up, prefixed)]
    for up, raw in exact:
        plain = _head(up, prefixed) + raw
        if plain.lower() in RESERVED:
            continue
        rivals = [(u, r) for u, r in exact if (_head(u, prefixed) + r).lower() == plain.lower()]
        winner = min(rivals, key=lambda k: (sum(c.isupper() for c in k[1]), k[1], k[0]))
        holder = next(key for key, name in mapping.forward.items() if name.lower() == plain.lower())
        assert holder == winner
        assert mapping.forward[winner] == _head(winner[0], prefixed) + winner[1]
    # (c) the order of the catalog and of the history changes nothing
    shuffled = {up: data.draw(st.permutations(raws)) for up, raws in reversed(catalog.items())}
    history = dict(reversed(list(pinned.items()))) if pinned is not None else None
    assert dict(_assign(shuffled, prefixed, history).forward) == dict(mapping.forward)


@settings(max_examples=200, deadline=None)
@given(data=st.data(), catalog=catalogs, prefixed=modes)
def test_two_replicas_with_fresh_ledgers_give_the_same_names(data: st.DataObject, catalog: dict[str, list[str]],
                                                             prefixed: bool) -> None:
    """(d) Each replica lists the upstreams in its own order and keeps its own ledger: same names."""
    given_names = []
    for _replica in range(2):
        ledger = NameLedger()
        listed = {up: data.draw(st.permutations(raws)) for up, raws in data.draw(st.permutations(
            list(catalog.items())))}
        mapping = _assign(listed, prefixed, dict(ledger.pinned("tools")))
        ledger.record("tools", mapping.forward)
        again = _assign(listed, prefixed, dict(ledger.pinned("tools")))  # the next rebuild reads the ledger
        assert dict(again.forward) == dict(mapping.forward)
        given_names.append(dict(mapping.forward))
    assert given_names[0] == given_names[1]


@settings(max_examples=200, deadline=None)
@given(data=st.data(), catalog=catalogs, prefixed=modes)
def test_whatever_came_first_an_exact_name_means_the_same_tool_on_every_replica(
        data: st.DataObject, catalog: dict[str, list[str]], prefixed: bool) -> None:
    """Each replica saw the tools arrive in its own order, one rebuild each, recording every name it gave."""
    exact_names = []
    for _replica in range(2):
        ledger = NameLedger()
        arrived: dict[str, list[str]] = {}
        for up, raw in data.draw(st.permutations([(u, r) for u, rs in catalog.items() for r in rs])):
            arrived.setdefault(up, []).append(raw)
            ledger.record("tools", _assign(arrived, prefixed, dict(ledger.pinned("tools"))).forward)
        final = _assign(catalog, prefixed, dict(ledger.pinned("tools")))
        exact_names.append({name: key for key, name in final.forward.items() if name == _head(key[0], prefixed)
                            + key[1]})
    assert exact_names[0] == exact_names[1]


def test_delete_file_gets_its_own_name_and_the_lookalike_a_suffix() -> None:
    mapping = assign_names({"a": ["Delete_File", "delete_file"]}, NamingConfig(), server_parts={"a": "a"},
                           prefixed=True)
    assert dict(mapping.forward) == {("a", "delete_file"): "a__delete_file", ("a", "Delete_File"): "a__Delete_File-2"}
