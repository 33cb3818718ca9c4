"""A host log file read whole, or at its edges past a cap (blocking: the caller's thread owns it).

A log is streamed through :class:`~ringtrace.hostlog.parse.HostLogParser` whole, in constant memory, up
to :data:`MAX_LOG_BYTES` (256 MiB, ~3 s of one core); past that its first and last :data:`EDGE_BYTES`
(64 MiB each: the ring sizes are printed at the start, the failure at the end) are read, and a warning
line and a ``skipped`` problem in ``host_log.problems`` say so.
"""

from __future__ import annotations

import logging
import os
from pathlib import Path
from typing import BinaryIO

from ringtrace.hostlog.parse import HostLogParser
from ringtrace.model.records import HostLog, utf8

log = logging.getLogger("ringtrace.hostlog")

MAX_LOG_BYTES = 256 << 20
"""A host log up to this size is read whole; a larger one only at its edges (:data:`EDGE_BYTES`), logged."""
EDGE_BYTES = 64 << 20
"""How much of the start and of the end of a log over the cap is read."""
CHUNK = 1 << 20
MIB = 1 << 20


def _feed(fh: BinaryIO, parser: HostLogParser, n: int) -> None:
    """Feed the parser the next ``n`` bytes of ``fh`` (fewer at its end), a chunk at a time."""
    while n > 0:
        chunk = fh.read(min(CHUNK, n))
        if not chunk:
            return
        parser.feed(chunk)
        n -= len(chunk)


def read_log(path: Path, limit: int | None = MAX_LOG_BYTES, edge: int = EDGE_BYTES) -> tuple[HostLog, ...]:
    """Parse one log file (raises OSError when it cannot be read).  ``HostLog.path`` is the path for
    output (valid UTF-8).  Used by ``--host-log``, the logs ``summary`` finds and ``--host-log-glob``.

    A log of at most ``limit`` bytes (None: any size) is read whole, up to the size it had when opened
    (a log still being written is read as it was then).  A larger one: its first and last ``edge`` bytes
    (at most ``limit // 2`` each), with a warning logged and the parser told of the gap."""
    parser = HostLogParser(utf8(str(path)))
    with path.open("rb") as fh:
        size = os.fstat(fh.fileno()).st_size
        if limit is None or size <= limit:
            _feed(fh, parser, size)
            return parser.finish()
        edge = max(1, min(edge, limit // 2))
        tail = size - edge
        log.warning("%s: host log of %.0f MiB is over the cap of %.0f MiB: reading its first and last %.0f MiB "
                    "only (a failure reported in the %.0f MiB between is missed)", utf8(str(path)), size / MIB,
                    limit / MIB, edge / MIB, (tail - edge) / MIB)
        _feed(fh, parser, edge)
        parser.skip(tail - edge)
        fh.seek(tail - 1)  # one byte early: when it is a newline, the tail's first line is read whole
        _feed(fh, parser, edge + 1)
    return parser.finish()
