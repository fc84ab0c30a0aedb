"""Reading a file Triad keeps or is given (its config, state files, token files): the regular file only.

A FIFO at such a path would block the read until some writer came (the daemon's loop, or a reload, with it, and
SIGTERM waits for the thread), and a device such as /dev/zero never ends: an outside attack hung `triad serve`
with `mkfifo pins.json`. The file is opened without blocking and checked to be regular before a byte is read.
"""

from __future__ import annotations

import errno
import os
import stat
from pathlib import Path


def read_regular(path: Path, limit: int | None = None) -> tuple[bytes, float]:
    """The bytes of the regular file at `path` and its mtime (taken after the read): `FileNotFoundError` when
    there is none, another `OSError` (its `strerror` says why) when it cannot be read, is no regular file, or
    holds more than `limit` bytes."""
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise OSError(errno.EINVAL, "not a regular file")
        with os.fdopen(fd, "rb", closefd=False) as stream:
            content = stream.read() if limit is None else stream.read(limit + 1)
        if limit is not None and len(content) > limit:
            raise OSError(errno.EFBIG, f"larger than {limit} bytes")
        return content, os.fstat(fd).st_mtime
    finally:
        os.close(fd)
