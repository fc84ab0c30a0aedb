"""The bubblewrap command line of a sandboxed stdio child (`upstreams.<name>.sandbox`, `consumers.sandbox`), and the
environment it is started with.

The child sees: the system's programs and libraries read-only (`SYSTEM_DIRS`, `ETC_FILES`), its own command's
files read-only (the command, its `#!` interpreter, and the venv or `node_modules` tree each lives in), `read`
read-only and `write` read-write, an empty `/tmp` and home of its own (tmpfs, `TMPFS_SIZE`), a fresh `/proc` of
its own PID namespace and a minimal `/dev`. Nothing else of the host's files exists for it: not the config, not
the home directory. The environment is built here (an allow-list), and handed to bwrap as its own: never as
`--setenv` arguments, which every local user can read in `/proc/<pid>/cmdline`.

Why no `--new-session`: the child is already the leader of a session of its own with no controlling terminal
(`consumers.child_process`), so there is no terminal to inject input into (the TIOCSTI escape it guards against),
and keeping bwrap's processes in the child's process group lets Triad end them all with one signal.
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Mapping, Sequence
from pathlib import Path

from consumers.sandbox import BWRAP, SandboxConfig

SYSTEM_DIRS = ("/usr", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32")
"""Bound read-only where they exist (with merged `/usr`, the others are links into it)."""
ETC_FILES = ("/etc/ld.so.cache", "/etc/ld.so.conf", "/etc/ld.so.conf.d", "/etc/alternatives", "/etc/passwd",
             "/etc/group", "/etc/nsswitch.conf", "/etc/host.conf", "/etc/hosts", "/etc/resolv.conf", "/etc/gai.conf",
             "/etc/protocols", "/etc/services", "/etc/ssl", "/etc/ca-certificates", "/etc/localtime",
             "/etc/mime.types")
"""What programs read of `/etc` to run, resolve names and check certificates; not `/etc` whole (shadow, keys)."""
SANDBOX_HOME = "/home/sandbox"
"""The private home's path when Triad's own HOME is unset or `/`."""
TMPFS_SIZE = 256 << 20
"""Bytes each private tmpfs (`/tmp`, home) may hold: a bound on the child's memory use through files."""
SHEBANG_LIMIT = 256
"""Bytes of a script's first line read to find its interpreter."""
SYSTEM_PREFIXES = ("/usr/", "/bin/", "/sbin/", "/lib", "/etc/")


def home_dir() -> str:
    home = os.environ.get("HOME", "")
    return home if os.path.isabs(home) and home != "/" else SANDBOX_HOME


def sandbox_env(sandbox: SandboxConfig, env: Mapping[str, str]) -> dict[str, str]:
    """The child's whole environment: `PATH`, the private `HOME`, the listed names of Triad's, the upstream's own."""
    passed = {name: os.environ[name] for name in sandbox.env if name in os.environ}
    return {"PATH": os.environ.get("PATH", os.defpath), **passed, **env, "HOME": home_dir()}


def command_roots(command: str, path: str) -> list[str]:
    """The directories the command needs to run, beyond the system's: the tree the command lives in (both where
    its name is and where its links lead), and the same for its `#!` interpreter."""
    found = command if os.sep in command else shutil.which(command, path=path)
    if found is None:
        return []
    roots: list[str] = []
    for file in (found, *_interpreter(found, path)):
        for place in (os.path.abspath(file), os.path.realpath(file)):
            root = _root_of(place)
            if root is not None and root not in roots:
                roots.append(root)
    return roots


def _interpreter(script: str, path: str) -> list[str]:
    """A script's `#!` interpreter (through `/usr/bin/env NAME`), if it has one."""
    try:
        with open(script, "rb") as file:
            head = file.read(SHEBANG_LIMIT)
    except OSError:
        return []
    if not head.startswith(b"#!"):
        return []
    words = head[2:].split(b"\n", 1)[0].decode(errors="replace").split()
    if words and os.path.basename(words[0]) == "env":
        words = [w for w in words[1:] if not w.startswith("-")]
        found = shutil.which(words[0], path=path) if words else None
        return [found] if found is not None else []
    return words[:1]


def _root_of(file: str) -> str | None:
    """The outermost `node_modules` above `file`, else the venv it is in (a `pyvenv.cfg` above it), else its own
    directory; None for a file of the system's (bound already)."""
    if file.startswith(SYSTEM_PREFIXES):
        return None
    parents = Path(file).parents
    modules = [p for p in parents if p.name == "node_modules"]
    if modules:
        return str(modules[-1])
    venv = next((p for p in parents if (p / "pyvenv.cfg").is_file()), None)
    return str(venv) if venv is not None else str(Path(file).parent)


def bwrap_argv(sandbox: SandboxConfig, command: str, args: Sequence[str], cwd: str | None,
               path: str) -> list[str]:
    """`bwrap ... -- command args`: the child's command line in its sandbox (`path`: the PATH it runs with)."""
    home = home_dir()
    argv = [shutil.which(BWRAP) or BWRAP, "--die-with-parent", "--unshare-pid", "--unshare-ipc", "--unshare-uts",
            "--unshare-cgroup-try", "--cap-drop", "ALL", "--hostname", "sandbox"]
    if sandbox.network != "host":
        argv.append("--unshare-net")  # bwrap brings the new namespace's loopback up
    for place in (*SYSTEM_DIRS, *ETC_FILES):
        argv += ["--ro-bind-try", place, place]
    argv += ["--dev", "/dev", "--proc", "/proc"]
    argv += ["--size", str(TMPFS_SIZE), "--tmpfs", "/tmp"] if sandbox.tmp == "private" else ["--bind", "/tmp", "/tmp"]
    argv += ["--size", str(TMPFS_SIZE), "--tmpfs", home]
    for root in command_roots(command, path):
        argv += ["--ro-bind", root, root]
    for place in sandbox.read:
        argv += ["--ro-bind", place, place]
    for place in sandbox.write:
        argv += ["--bind", place, place]
    argv += ["--remount-ro", "/"]  # the sandbox's own root (a tmpfs holding the mount points): nothing to write there
    reachable = (*sandbox.read, *sandbox.write)
    inside = cwd is not None and any(cwd == p or cwd.startswith(p.rstrip("/") + "/") for p in reachable)
    argv += ["--chdir", cwd if inside and cwd is not None else home, "--", command, *args]
    return argv
