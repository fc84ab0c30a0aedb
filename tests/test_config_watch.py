"""The config watcher sees every way a file or the links to it can change, and every edit after that; an in-place
writer that pauses mid-file is never applied half-way."""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

import anyio
import pytest
import yaml

from tests.conftest import Proc, start_triad, stdio_upstream

pytestmark = pytest.mark.anyio


def config_with(*names: str, **extra: Any) -> str:
    return yaml.safe_dump({"upstreams": {n: stdio_upstream(f"watch-{n}") for n in names}, **extra})


def rename_over(file: Path, text: str) -> None:
    temporary = file.with_name(file.name + ".tmp")
    temporary.write_text(text)
    os.replace(temporary, file)


def configmap_swap(root: Path, text: str, generation: int) -> None:
    """What the kubelet does: a new timestamped directory, a new `..data` link renamed over the old one, the old
    directory removed."""
    new = root / f"..2026_12_01_{generation}"
    new.mkdir()
    (new / "triad.yaml").write_text(text)
    old = os.readlink(root / "..data")
    os.symlink(new.name, root / "..data_tmp")
    os.replace(root / "..data_tmp", root / "..data")
    for child in (root / old).iterdir():
        child.unlink()
    (root / old).rmdir()


Layout = Callable[[Path, str], Path]
Change = Callable[[Path, str, int], None]


def plain(root: Path, text: str) -> Path:
    (root / "triad.yaml").write_text(text)
    return root / "triad.yaml"


def linked(root: Path, text: str) -> Path:
    (root / "real-1.yaml").write_text(text)
    (root / "triad.yaml").symlink_to("real-1.yaml")
    return root / "triad.yaml"


def configmap(root: Path, text: str) -> Path:
    (root / "..2026_12_01_0").mkdir()
    (root / "..2026_12_01_0" / "triad.yaml").write_text(text)
    (root / "..data").symlink_to("..2026_12_01_0")
    (root / "triad.yaml").symlink_to("..data/triad.yaml")
    return root / "triad.yaml"


def retarget(root: Path, text: str, generation: int) -> None:
    """`ln -sfn`: the link is removed and made anew, pointing at another file."""
    target = root / f"real-{generation + 1}.yaml"
    target.write_text(text)
    (root / "triad.yaml").unlink()
    (root / "triad.yaml").symlink_to(target.name)


def in_place(root: Path, text: str, _generation: int) -> None:
    (root / "triad.yaml").write_text(text)  # through the links, whatever they are


CASES: dict[str, tuple[Layout, Change]] = {
    "rename-over": (plain, lambda root, text, _g: rename_over(root / "triad.yaml", text)),
    "in-place": (plain, in_place),
    "symlink-retarget": (linked, retarget),
    "ln-sfn-then-edit": (linked, retarget),
    "configmap-data-swap": (configmap, lambda root, text, g: configmap_swap(root, text, g)),
}


@pytest.mark.parametrize("case", list(CASES))
async def test_each_way_a_config_or_its_links_change_is_applied_and_so_is_a_later_edit(
        case: str, procs: list[Proc], tmp_path: Path) -> None:
    layout, change = CASES[case]
    path = layout(tmp_path, config_with("a"))
    start_triad(procs, path, wait_ready=1)
    triad = procs[-1]
    change(tmp_path, config_with("a", "b"), 1)
    await triad.until(r"reloaded config \(file changed\): added b;")
    # the later edit: the same kind of change again, then an in-place write through whatever the links are now
    change(tmp_path, config_with("a", "b", "c"), 2)
    await triad.until(r"reloaded config \(file changed\): added c;")
    in_place(tmp_path, config_with("a", "b", "c", "d"), 3)
    await triad.until(r"reloaded config \(file changed\): added d;")


async def test_an_in_place_writer_that_pauses_mid_file_is_not_applied_half_way(procs: list[Proc],
                                                                               tmp_path: Path) -> None:
    """The writer stops for 0.6 s after the first upstream of three (the old fixed 0.3 s settle applied that
    partial file: "removed b, c"); with `reload.settle: 2s` only the whole file is applied."""
    path = tmp_path / "triad.yaml"
    path.write_text(config_with("a", "b", "c", reload={"settle": "2s"}))
    start_triad(procs, path, wait_ready=3)
    triad = procs[-1]
    whole = config_with("a", "b", "c", "d", reload={"settle": "2s"})
    cut = whole.index("  b:")
    with path.open("w") as stream:
        stream.write(whole[:cut])
        stream.flush()
        await anyio.sleep(0.6)  # the writer's pause (the behaviour under test), not a synchronisation
        stream.write(whole[cut:])
    await triad.until(r"reloaded config \(file changed\): added d;")
    assert "removed" not in triad.stderr and "refused" not in triad.stderr


@pytest.mark.parametrize("layout", [plain, linked, configmap], ids=["plain", "linked", "configmap"])
async def test_other_files_beside_the_config_do_not_wake_the_watcher(layout: Layout, procs: list[Proc],
                                                                     tmp_path: Path) -> None:
    """A log file written beside the config (`triad serve > triad.log` in its directory) woke the watcher at each
    line: watchfiles logged "1 change detected" for every one, about 9% of a core (found by an outside attack).
    Only the config's own chain of names is watched; a change to it is still applied."""
    path = layout(tmp_path, config_with("a"))
    start_triad(procs, path, wait_ready=1)
    triad = procs[-1]
    for line in range(20):
        with (tmp_path / "triad.log").open("a") as log:
            log.write(f"line {line}\n")
        await anyio.sleep(0.15)  # the writer's pace: each line is its own change (the behaviour under test)
    in_place(tmp_path, config_with("a", "b"), 1)
    await triad.until(r"reloaded config \(file changed\): added b;")
    assert triad.stderr.count("change detected") <= 3, triad.stderr
