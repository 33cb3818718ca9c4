"""Read whole files once, synchronously, through the same Run/sink path the tailer uses.

Used by ``summary``, ``check`` and ``convert``.  Blocking I/O is fine here: nothing else runs.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from pathlib import Path

from ringtrace.diagnose import Thresholds
from ringtrace.layout import source_labels
from ringtrace.records import HostLog, Source
from ringtrace.run import Run
from ringtrace.sinks import FanOut

CHUNK = 1 << 20


def read_files(files: list[Path], sinks: FanOut, thresholds: Thresholds,
               progress: Callable[[int], None] | None = None,
               host_logs: Mapping[Path, HostLog] | None = None) -> list[str]:
    """Feed every file to ``sinks``; returns error messages for files that could not be opened/read.

    ``progress`` is called with the number of bytes read after each chunk; ``host_logs`` gives a
    file's matched host log (``ringtrace.hostlog_match``) to its run's diagnosis.
    """
    errors: list[str] = []
    for path in files:
        try:
            seen_at = path.stat().st_mtime
        except OSError:
            seen_at = 0.0
        run = Run(Source(str(path), source_labels(path)), thresholds, seen_at,
                  host_log=host_logs.get(path) if host_logs else None)
        try:
            with path.open("rb") as fh:
                while chunk := fh.read(CHUNK):
                    sinks.receive_all(run.feed(chunk))
                    if progress is not None:
                        progress(len(chunk))
        except OSError as err:
            errors.append(f"{path}: cannot read: {err.strerror or err}")
            sinks.receive_all(run.finish("eof"))
            continue
        sinks.receive_all(run.finish("eof"))
    return errors
