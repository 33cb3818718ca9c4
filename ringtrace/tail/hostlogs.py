"""``watch --host-log-glob PATTERN``: the runtime's host log of a run, read when the run finishes.

``PATTERN`` is matched relative to each run's directory (``hostlog_match.run_root``: the work
dir of an L2 run, the out dir of an L3 run, a scene test's case folder), e.g. ``*.log``.  The
logs found are parsed (:class:`~ringtrace.hostlog.HostLogParser`) and matched to the finishing
file as ``summary --host-log`` matches them (an L3 log to the rank its lines name).  The log is
read at the run's finish, so it holds what the runtime wrote up to then (the runtime prints its
error lines before it exits, and the scope_stats file is written at teardown).

Called from the reader thread (it reads files); never raises: a log that cannot be read is
logged once and the run finishes without it.
"""

from __future__ import annotations

import logging
from pathlib import Path

import msgspec

from ringtrace.hostlog import HostLogParser
from ringtrace.hostlog_match import match_logs, run_root
from ringtrace.records import HostLog, utf8

log = logging.getLogger("ringtrace.tail")

MAX_LOG_BYTES = 64 << 20
"""A host log is kilobytes to a few MB; past this ``watch`` reads only its first bytes."""
CHUNK = 1 << 20


def read_log(path: Path, limit: int | None = None) -> tuple[HostLog, ...]:
    """Parse one log file in chunks, its first ``limit`` bytes when given (raises OSError when it
    cannot be read).  ``HostLog.path`` is the path for output (valid UTF-8).  Used by ``--host-log``
    and ``--host-log-glob`` alike."""
    parser = HostLogParser(utf8(str(path)))
    done = 0
    with path.open("rb") as fh:
        while limit is None or done < limit:
            chunk = fh.read(CHUNK if limit is None else min(CHUNK, limit - done))
            if not chunk:
                break
            parser.feed(chunk)
            done += len(chunk)
    return parser.finish()


class HostLogFinder:
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
                parts = read_log(path, MAX_LOG_BYTES)
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
