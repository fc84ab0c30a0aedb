"""The `audit` built-in hook: one JSON line per call, read, get, policy denial and approval decision, written whole
or not at all.

Built by the chain factory like every built-in (`BUILTIN_HOOKS`); it holds no open file (one is opened per record).
"""

from __future__ import annotations

import errno
import json
import logging
import os
import stat
import sys
from datetime import UTC, datetime
from pathlib import Path
from typing import Literal

from consumers import JSON, JSONObject
from gateway.config import STANDARD_STREAM
from gateway.hooks._options import HookOptions, json_size
from gateway.hooks._protocols import PathResolver
from gateway.hooks._values import Block, CallContext, Outcome
from policy import LAYER_NAMES

logger = logging.getLogger("triad.hooks")


AuditFailure = Literal["closed", "open"]

AUDIT_REFUSED = "Refused: the gateway cannot write its audit record ({reason}), and audit is fail: closed."
"""What a client is told while the audit file cannot be written (the path is in the log, not in the answer)."""


class Audit:
    """One JSON line per call, read and get (and per call the policy denied), to a file or stderr.

    A line is written whole or not at all: one `os.write` on an `O_APPEND` descriptor, and a short write (a full
    disk) is truncated back, so readers never see a torn line. With `fail: closed` (the default: the audit is a
    security record) a result whose record cannot be written is withheld, and calls are refused until a record can
    be written again (the refused calls' records are the probe); with `fail: open` the call goes on and the
    failure is logged."""

    class Options(HookOptions):
        path: str = STANDARD_STREAM
        bodies: bool = False
        fail: AuditFailure = "closed"
        priority: int = -1000  # last among after-hooks: it records what the client actually gets

    def __init__(self, **options: JSON) -> None:
        self.options = self.Options(**options)
        self.priority = self.options.priority
        self._path = self._file(self.options.path)
        self._failing: str | None = None
        """Why the last record could not be written (None: it was)."""

    def locate(self, resolve: PathResolver) -> None:
        self._path = self._file(resolve(self.options.path))

    @staticmethod
    def _file(path: str) -> Path | None:
        return None if path == STANDARD_STREAM else Path(path)

    def _write(self, ctx: CallContext, record: JSONObject) -> bool:
        """Append the record; False (logged) when it could not be written."""
        line = {"time": datetime.now(UTC).isoformat(timespec="milliseconds"), "client": ctx.client_id,
                **({"subject": ctx.subject} if ctx.subject is not None else {}),
                "session": ctx.session.id, "kind": ctx.kind, "name": ctx.name, "raw": ctx.raw_name,
                "upstream": ctx.upstream, **record}
        data = (json.dumps(line, default=str) + "\n").encode()
        try:
            if self._path is None:
                sys.stderr.buffer.write(data)
                sys.stderr.flush()
            else:
                append_whole(self._path, data)
        except OSError as exc:
            if self._failing is None:
                logger.error("audit: cannot write to %s (%s); %s", self._path or "stderr", exc.strerror,
                             "calls are refused until it can (fail: closed)" if self.options.fail == "closed"
                             else "calls go on unaudited (fail: open)")
            self._failing = exc.strerror or type(exc).__name__
            return False
        if self._failing is not None:
            logger.warning("audit: writing to %s works again", self._path or "stderr")
            self._failing = None
        return True

    async def _before(self, ctx: CallContext) -> Block | None:
        if self._failing is not None and self.options.fail == "closed":
            return Block(AUDIT_REFUSED.format(reason=self._failing))
        return None

    before_call = before_read = before_get = _before

    async def _after(self, ctx: CallContext, outcome: Outcome) -> JSONObject | None:
        result = outcome.result
        status = ("blocked" if outcome.blocked else "error" if outcome.error is not None
                  else "tool_error" if result and result.get("isError") else "ok")
        record: JSONObject = {"decision": "blocked" if outcome.blocked else "allowed", "outcome": status,
                                  "duration_ms": round(outcome.duration * 1000, 3),
                                  "arguments_bytes": json_size(ctx.arguments), "result_bytes": json_size(result)}
        if outcome.error is not None:
            record["error"] = outcome.error
        if self.options.bodies:
            record["arguments"], record["result"] = ctx.arguments, result
        if self._write(ctx, record) or self.options.fail == "open" or outcome.blocked:
            return None
        refused = AUDIT_REFUSED.format(reason=self._failing)
        if ctx.kind == "tool":  # the result is withheld: what was not recorded is not handed out
            return {"content": [{"type": "text", "text": refused}], "isError": True, "structuredContent": None,
                    "_meta": None}
        return {"contents": [], "messages": [], "description": refused}

    after_call = after_read = after_get = _after

    async def on_approval(self, ctx: CallContext, decision: str, by: str, reason: str) -> None:
        self._write(ctx, {"decision": "approval", "outcome": decision, "approved_by" if decision == "approved"
                          else "answered_by": by, "reason": reason})

    async def on_denied(self, ctx: CallContext, layer: int, pattern: str | None, detail: str) -> None:
        self._write(ctx, {"decision": "denied", "outcome": "denied", "layer": LAYER_NAMES.get(layer, str(layer)),
                          "pattern": pattern,
                          "detail": detail})


def append_whole(path: Path, data: bytes) -> None:
    """Append `data` to `path` whole or not at all (raises OSError): opened per record, so that there is nothing
    to close when a reload drops the hook and rotation tools just work. A regular file or a device (a terminal,
    /dev/null), never a FIFO or socket: a FIFO with no reader blocked the open, and the event loop with it (found
    by an outside attack), so the open does not block and the file is refused."""
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_CLOEXEC | os.O_NONBLOCK, 0o600)
    try:
        mode = os.fstat(fd).st_mode
        if not (stat.S_ISREG(mode) or stat.S_ISCHR(mode)):  # a FIFO's write blocks too, once its reader stalls
            raise OSError(errno.EINVAL, f"not a regular file (for standard error, the path is {STANDARD_STREAM!r})")
        if stat.S_ISCHR(mode):
            os.set_blocking(fd, True)  # a terminal or /dev/null: written as before
        start = os.fstat(fd).st_size
        written = os.write(fd, data)
        if written < len(data):  # a full disk takes what fits: take it back rather than leave a torn line
            os.ftruncate(fd, start)
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
    finally:
        os.close(fd)
