"""The runtime's host log of a run that ``watch`` follows, read when the run finishes.

By default the logs are found as ``summary`` finds them (``gather.logfiles.run_folder_logs``: ``host.log`` or a
``*.log`` the parser recognises, directly in the run's folder or in the one holding its ``scope_stats/``);
with ``--host-log-glob PATTERN``, ``PATTERN`` is matched relative to each run's directory
(``hostlog_match.run_root``: the work dir of an L2 run, the out dir of an L3 run, a scene test's case
folder), e.g. ``logs/*.log``.  The logs found are parsed (:class:`~ringtrace.hostlog.parse.HostLogParser`)
and matched to the finishing file as ``summary --host-log`` matches them (an L3 log to the rank its lines
name).  The log is
read at the run's finish, so it holds what the runtime wrote up to then (the runtime prints its
error lines before it exits, and the scope_stats file is written at teardown).

A log is streamed through the parser whole, in constant memory, up to :data:`MAX_LOG_BYTES`
(256 MiB, ~3 s of one core); past that its first and last :data:`EDGE_BYTES` (64 MiB each: the
ring sizes are printed at the start, the failure at the end) are read, and a warning line and a
``skipped`` problem in ``host_log.problems`` say so.
"""

from __future__ import annotations

import logging
from pathlib import Path

import msgspec

from ringtrace.gather.logfiles import recognised, run_folder_logs
from ringtrace.gather.pairing import match_logs, run_root
from ringtrace.hostlog.read import read_log
from ringtrace.model.records import HostLog, utf8
from ringtrace.sources.paths import HOST_LOG_NAME

log = logging.getLogger("ringtrace.reading.tail")

class HostLogFinder:
    """The host log of a finishing run (``--host-log-glob``): a callable ``Path -> HostLog | None``.

    Who calls: :meth:`ringtrace.reading.tail.follower.Follower.finish` (its ``find_log``), reached through the
    :class:`~ringtrace.reading.tail.tailer.Tailer` calls the app makes on its reader thread (a slice's
    ``take``, ``look``, ``vanished``, ``tick``, ``finish_all``), so it runs there and only there,
    one call at a time: a glob of the run's directory and a whole read of each log found (seconds for
    a log of hundreds of MB), never on the event loop.  Owns only the set of paths already reported
    unreadable (each logged once).  Never raises: a log that cannot be read is logged and skipped.
    """

    def __init__(self, pattern: str = "") -> None:
        self.pattern = pattern
        self._failed: set[Path] = set()

    def __call__(self, file: Path) -> HostLog | None:
        """The host log of ``file``'s run, or None when none matches."""
        root = Path(run_root(file))
        logs: list[HostLog] = []
        try:
            candidates = (sorted(p for p in root.glob(self.pattern) if p.is_file()) if self.pattern
                          else run_folder_logs(file))
        except (OSError, ValueError) as err:
            self._warn(root, err)
            return None
        for path in candidates:
            try:
                parts = read_log(path)
            except OSError as err:
                self._warn(path, err)
                continue
            if not self.pattern and path.name != HOST_LOG_NAME and not recognised(parts):
                continue  # as summary: another *.log (a build log) is no host log
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
