"""`sandbox:` of a stdio upstream (and `sandbox_default:`): what its child may read, write, reach and use, enforced
by bubblewrap (`bwrap`) and kernel limits (`consumers._bwrap` builds the command line).

`problems` says, for `triad check` and before every spawn, why a sandbox cannot be set up on this machine (no
bwrap, a path that is not there, a limit nothing here can enforce); a sandbox with a problem is never started
bare: its upstream is down with that reason. `describe` is what `plan` and the console show.
"""

from __future__ import annotations

import os
import re
import shutil
from typing import Annotated, Literal

from pydantic import BaseModel, BeforeValidator, ConfigDict, Field

from consumers._cgroups import pids_root
from consumers._json import JSON

BWRAP = "bwrap"
"""bubblewrap's command (Debian's package `bubblewrap`), looked up on Triad's PATH."""

_SIZE = re.compile(r"^\s*(\d+)\s*([KMGT]?)i?B?\s*$", re.IGNORECASE)
_UNIT_BYTES = {"": 1, "K": 1 << 10, "M": 1 << 20, "G": 1 << 30, "T": 1 << 40}
MIN_MEMORY = 16 << 20
"""Below this no interpreter starts at all: a smaller `memory` is a typo (512 meaning 512M), refused."""


def parse_size(value: JSON) -> int:
    """`512M`, `2G`, `64K`, `1048576` -> bytes (powers of 1024)."""
    if isinstance(value, bool) or not isinstance(value, int | str):
        raise ValueError("not a size (use e.g. 512M, 2G)")
    match = _SIZE.match(str(value))
    if match is None:
        raise ValueError("not a size (use e.g. 512M, 2G)")
    size = int(match.group(1)) * _UNIT_BYTES[match.group(2).upper()]
    if size < MIN_MEMORY:
        raise ValueError(f"must be at least {MIN_MEMORY >> 20}M")
    return size


_CPU = re.compile(r"^\s*(\d+)\s*(s|m)?\s*$")


def _cpu_seconds(value: JSON) -> JSON:
    """`300s`, `5m` or a whole number of seconds (RLIMIT_CPU counts whole seconds)."""
    if isinstance(value, str):
        if (match := _CPU.match(value)) is None:
            raise ValueError("not a CPU time (use e.g. 300s, 5m, or whole seconds)")
        return int(match.group(1)) * (60 if match.group(2) == "m" else 1)
    return value


Size = Annotated[int, BeforeValidator(parse_size)]
CpuSeconds = Annotated[int, BeforeValidator(_cpu_seconds), Field(ge=1)]
Network = Literal["none", "loopback", "host"]


class SandboxConfig(BaseModel):
    """`upstreams.<name>.sandbox`: the child runs in bubblewrap with a read-only view of the system's programs and
    libraries (`/usr`, the `/lib`s, a few files of `/etc`), of its own command (its interpreter and the venv or
    `node_modules` it lives in) and of `read`; `write` bound read-write; a private `/tmp` and home (empty tmpfs,
    one per child, so one per client session with `sessions: per_client`); its own PID, IPC and UTS namespaces;
    no capabilities, no new privileges; and dies with Triad."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    enabled: bool = True
    """`false` (written `sandbox: false`): no sandbox, not even `sandbox_default:`."""
    read: tuple[str, ...] = ()
    """Paths bound read-only (relative ones: relative to the config file). Must exist."""
    write: tuple[str, ...] = ()
    """Paths bound read-write. Must exist."""
    network: Network = "none"
    """`none` and `loopback`: a network namespace of its own, with only its own loopback interface (up), so
    nothing outside is reachable, the host's loopback listeners included (bubblewrap cannot share only the host's
    loopback: the two are the same namespace). `host`: the host's network."""
    env: tuple[str, ...] = ()
    """Names of Triad's environment variables passed on; every other one is removed. The upstream's own `env:`
    (with its `${VAR}` values) is always passed, and `PATH` and `HOME` (the private home) are set."""
    memory: Size | None = None
    """Address space per process (`RLIMIT_AS`), e.g. `512M`: more than the memory used (Node needs about 2G)."""
    pids: int | None = Field(default=None, ge=1)
    """Processes and threads of the whole sandbox at once (a cgroup's `pids.max`; needs a writable pids cgroup)."""
    cpu: CpuSeconds | None = None
    """CPU time per process (`RLIMIT_CPU`), e.g. `300s`: past it the kernel kills the process."""
    tmp: Literal["private", "host"] = "private"
    """`private`: an empty `/tmp` of its own; `host`: the host's `/tmp`, read-write."""

    def describe(self) -> dict[str, JSON]:
        """What `plan` and the console show: what the child may reach and which limits hold."""
        return {"read": list(self.read), "write": list(self.write), "network": self.network, "env": list(self.env),
                "memory": self.memory, "pids": self.pids, "cpu": self.cpu, "tmp": self.tmp}


def describe_sandbox(sandbox: SandboxConfig | None) -> str:
    """One line for a plan's upstream row ("" for an unsandboxed upstream)."""
    if sandbox is None:
        return ""
    parts = [f"network {sandbox.network}", f"read {', '.join(sandbox.read) or '-'}",
             f"write {', '.join(sandbox.write) or '-'}", f"tmp {sandbox.tmp}"]
    if sandbox.env:
        parts.append(f"env {', '.join(sandbox.env)}")
    limits = [f"memory {sandbox.memory >> 20}M" if sandbox.memory else "", f"pids {sandbox.pids}" if sandbox.pids
              else "", f"cpu {sandbox.cpu}s" if sandbox.cpu else ""]
    if any(limits):
        parts.append("limits " + ", ".join(x for x in limits if x))
    return "sandbox: " + "; ".join(parts)


def problems(sandbox: SandboxConfig) -> list[tuple[str, str]]:
    """(key under `sandbox`, what is wrong) for each reason this sandbox cannot be set up here; [] if it can."""
    found: list[tuple[str, str]] = []
    if shutil.which(BWRAP) is None:
        found.append(("", f"bubblewrap ({BWRAP}) is not installed or not on the PATH (Debian: apt-get install "
                          "bubblewrap); the upstream stays down, never started outside its sandbox"))
    for key in ("read", "write"):
        for index, path in enumerate(getattr(sandbox, key)):
            if not os.path.isabs(path):
                found.append((f"{key}.{index}", f"not an absolute path: {path}"))
            elif not os.path.exists(path):
                found.append((f"{key}.{index}", f"path not found: {path}"))
    if sandbox.pids is not None and pids_root() is None:
        found.append(("pids", "cannot be enforced on this machine: no writable pids cgroup (RLIMIT_NPROC counts "
                              "every process of the user, and not root's at all); remove pids or give Triad a "
                              "cgroup"))
    return found
