"""Stable list cursors (issue 30, point 4): paging interleaved with other clients' changes and the caller's own.

A rebuild for another client's change leaves the caller's list as it was: its cursor must keep working. When the
caller's own list changes between pages, the walk must still be consistent: nothing delivered twice, nothing that
was listed throughout the walk skipped, and a clean error only when every item of the last page left the list.
"""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from consumers import JSONObject
from gateway.errors import StaleCursor
from gateway.registry import CURSOR_KEYS, MAX_CURSOR_CHARS, paginate

UNIVERSE = [f"item-{i:03d}" for i in range(60)]
"""Keys in the list's fixed order (a list keeps the relative order of its items)."""

# a step: ("page",), ("other",) another client's change, ("own", flips) the caller's list gains or loses keys
STEPS = st.lists(st.one_of(st.just(("page",)), st.just(("other",)),
                           st.tuples(st.just("own"), st.sets(st.sampled_from(UNIVERSE), max_size=6))),
                 min_size=1, max_size=40)


def _items(present: set[str]) -> list[JSONObject]:
    return [{"uri": key} for key in UNIVERSE if key in present]


@settings(max_examples=300, derandomize=True, deadline=None)
@given(initial=st.sets(st.sampled_from(UNIVERSE), min_size=1), steps=STEPS, page_size=st.integers(1, 7))
def test_paging_through_changes_is_consistent(initial: set[str], steps: list[tuple[object, ...]],
                                              page_size: int) -> None:
    present = set(initial)
    throughout = set(initial)
    seen: list[str] = []
    own_changed = False
    page = paginate(_items(present), "resources", None, page_size)
    cursor = page.get("nextCursor")
    seen += [str(item["uri"]) for item in page["resources"]]
    for step in [*steps, *[("page",)] * len(UNIVERSE)]:  # then finish the walk on the final list
        if cursor is None:
            break
        if step[0] == "own":
            flips = step[1]
            assert isinstance(flips, set)
            present ^= flips
            throughout -= flips
            own_changed = own_changed or bool(flips)
        elif step[0] == "page":
            try:
                page = paginate(_items(present), "resources", cursor, page_size)
            except StaleCursor:
                # refused only when the caller's own list changed and the whole tail of delivered keys left it
                assert own_changed and not set(seen[-CURSOR_KEYS:]) & present, (seen, present)
                return
            assert len(str(cursor)) <= MAX_CURSOR_CHARS
            cursor = page.get("nextCursor")
            seen += [str(item["uri"]) for item in page["resources"]]
    assert len(seen) == len(set(seen)), "an item was delivered twice"
    assert throughout <= set(seen), f"skipped though listed throughout: {sorted(throughout - set(seen))}"


def test_a_cursor_survives_other_clients_changes_and_forgeries_are_refused() -> None:
    items = [{"name": "x" * 5000 + str(i)} for i in range(9)]  # long keys: the cursor stays bounded
    first = paginate(items, "tools", None, 4)
    assert len(first["nextCursor"]) <= MAX_CURSOR_CHARS
    again = paginate(items, "tools", first["nextCursor"], 4)
    assert [t["name"] for t in again["tools"]] == [t["name"] for t in items[4:8]]
    for forged in ("garbage!", "djE6MzoxMA", first["nextCursor"][:-3], "A" * (MAX_CURSOR_CHARS + 1)):
        try:
            paginate(items, "tools", forged, 4)
        except StaleCursor as refused:
            assert "invalid cursor" in str(refused)
        else:
            raise AssertionError(f"forged cursor {forged!r} was taken")
