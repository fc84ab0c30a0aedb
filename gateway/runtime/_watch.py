"""What the config watcher compares: the file as reached through every symlink on its way.

A Kubernetes ConfigMap mounts `config.yaml -> ..data/config.yaml` with `..data -> ..2026_12_01_x`, and an update
swaps `..data` by renaming a new link over it; `ln -sfn` retargets a link in place. Neither touches the directory
the final file is in, so the watcher watches the directory of every link in the chain and of the final target,
recomputes the chain after each change, and compares a fingerprint of all of it (each link's target, the final
file's real path, inode, mtime, size and content hash). Pure functions of the file system; the `Reloader` owns the
watching task.
"""

from __future__ import annotations

import hashlib
import os
from dataclasses import dataclass
from pathlib import Path

from consumers import read_regular

MAX_LINKS = 40
"""Links followed on the way to the config file before it counts as a loop (Linux's own limit is 40)."""


@dataclass(frozen=True)
class Fingerprint:
    links: tuple[tuple[str, str], ...]
    """Each symlink on the way, with its target as written."""
    target: tuple[str, int, int, int, str] | None
    """The final file: real path, inode, mtime (ns), size, sha256 of its bytes; None if it cannot be read."""

    def names(self, path: Path) -> frozenset[str]:
        """The paths whose change can change this chain: `path`, each link, and the final file. Only those are
        watched for: a log file written beside the config would otherwise wake the watcher at every line."""
        found = {str(path.absolute()), *(link for link, _ in self.links)}
        if self.target is not None:
            found.add(self.target[0])
        return frozenset(found)

    def directories(self, path: Path) -> frozenset[Path]:
        """Where a change to this chain shows: the directory of `path`, of each link, and of the final file."""
        found = {path.absolute().parent, *(Path(link).parent for link, _ in self.links)}
        if self.target is not None:
            found.add(Path(self.target[0]).parent)
        return frozenset(found)


def link_chain(path: Path) -> tuple[list[tuple[str, str]], Path]:
    """The symlinks met on the way to `path` (in order, with their targets) and the path they lead to."""
    links: list[tuple[str, str]] = []
    pending = path.absolute()
    for _ in range(MAX_LINKS):
        for depth in range(2, len(pending.parts) + 1):
            prefix = Path(*pending.parts[:depth])
            if prefix.is_symlink():
                target = os.readlink(prefix)
                links.append((str(prefix), target))
                pending = prefix.parent / target / Path(*pending.parts[depth:])
                break
        else:
            return links, pending
    return links, pending  # a loop: the final stat fails (ELOOP) and the file reads as gone


def fingerprint(path: Path) -> Fingerprint:
    links, final = link_chain(path)
    try:
        content, _ = read_regular(final)  # never a FIFO's blocking read
        info = final.stat()
        target = (os.path.realpath(final), info.st_ino, info.st_mtime_ns, info.st_size,
                  hashlib.sha256(content).hexdigest())
    except OSError:
        target = None
    return Fingerprint(tuple(links), target)
