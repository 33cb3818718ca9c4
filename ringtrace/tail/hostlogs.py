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
"""A host log is kilobytes to a few MB; past this only its first bytes are read."""
CHUNK = 1 << 20


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
                parts = self._read(path)
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

    @staticmethod
    def _read(path: Path) -> tuple[HostLog, ...]:
        parser = HostLogParser(str(path))
        done = 0
        with path.open("rb") as fh:
            while done < MAX_LOG_BYTES and (chunk := fh.read(min(CHUNK, MAX_LOG_BYTES - done))):
                parser.feed(chunk)
                done += len(chunk)
        return parser.finish()

    def _warn(self, path: Path, err: BaseException) -> None:
        if path not in self._failed:
            self._failed.add(path)
            log.warning("%s: cannot read host log: %s", utf8(str(path)), err)
