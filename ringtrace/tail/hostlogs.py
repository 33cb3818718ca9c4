"""``watch --host-log-glob PATTERN``: the runtime's host log of a run, read when the run finishes.

``PATTERN`` is matched relative to each run's directory (``hostlog_match.run_root``: the work
dir of an L2 run, the out dir of an L3 run, a scene test's case folder), e.g. ``*.log``.  The
logs found are parsed (:class:`~ringtrace.hostlog.HostLogParser`) and matched to the finishing
file as ``summary --host-log`` matches them (an L3 log to the rank its lines name).  The log is
read at the run's finish, so it holds what the runtime wrote up to then (the runtime prints its
error lines before it exits, and the scope_stats file is written at teardown).

A log is streamed through the parser whole, in constant memory, up to :data:`MAX_LOG_BYTES`
(256 MiB, ~3 s of one core); past that its first and last :data:`EDGE_BYTES` (64 MiB each: the
ring sizes are printed at the start, the failure at the end) are read, and a warning line and a
``skipped`` problem in ``host_log.problems`` say so.
"""

from __future__ import annotations

import logging
import os
from pathlib import Path
from typing import BinaryIO

import msgspec

from ringtrace.hostlog import HostLogParser
from ringtrace.hostlog_match import match_logs, run_root
from ringtrace.records import HostLog, utf8

log = logging.getLogger("ringtrace.tail")

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


class HostLogFinder:
    """The host log of a finishing run (``--host-log-glob``): a callable ``Path -> HostLog | None``.

    Who calls: :meth:`ringtrace.tail.follower.Follower.finish` (its ``find_log``), reached through the
    :class:`~ringtrace.tail.tailer.Tailer` calls the app makes on its reader thread (a slice's
    ``take``, ``look``, ``vanished``, ``tick``, ``finish_all``), so it runs there and only there,
    one call at a time: a glob of the run's directory and a whole read of each log found (seconds for
    a log of hundreds of MB), never on the event loop.  Owns only the set of paths already reported
    unreadable (each logged once).  Never raises: a log that cannot be read is logged and skipped.
    """

    def __init__(self, pattern: str) -> None:
        self.pattern = pattern
        self._failed: set[Path] = set()

    def __call__(self, file: Path) -> HostLog | None:
        """The host log of ``file``'s run, or None when none matches."""
        root = Path(run_root(file))
        logs: list[HostLog] = []
        try:
            candidates = sorted(p for p in root.glob(self.pattern) if p.is_file())
        except (OSError, ValueError) as err:
            self._warn(root, err)
            return None
        for path in candidates:
            try:
                parts = read_log(path)
            except OSError as err:
                self._warn(path, err)
                continue
            logs += [msgspec.structs.replace(p, path=str(path.resolve())) for p in parts]
        if not logs:
            return None
        target = str(file.resolve())
        for m in match_logs(logs, [target]):
            if m.file == target:
                return msgspec.structs.replace(m.log, path=utf8(m.log.path))
        return None

    def _warn(self, path: Path, err: BaseException) -> None:
        if path not in self._failed:
            self._failed.add(path)
            log.warning("%s: cannot read host log: %s", utf8(str(path)), err)
