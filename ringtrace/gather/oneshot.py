"""The one-shot run: whole files read once, synchronously, through the same :class:`~ringtrace.stages.run.Run`
and sinks the tailer uses; and the runs known from a host log alone.  Blocking I/O: nothing else runs."""

from __future__ import annotations

import zlib
from collections.abc import Callable, Mapping, Sequence, Set
from pathlib import Path

import zstandard

from ringtrace.analysis.advise import advise
from ringtrace.config import Thresholds
from ringtrace.files import open_input
from ringtrace.model.records import HostLog, SinkEvent, Source
from ringtrace.sinks import FanOut
from ringtrace.sources.paths import source_labels
from ringtrace.stages.run import Run, log_only_run

CHUNK = 1 << 20


def read_files(files: list[Path], sinks: FanOut, thresholds: Thresholds,
               progress: Callable[[int], None] | None = None,
               host_logs: Mapping[Path, HostLog] | None = None, alone: Set[Path] = frozenset()) -> list[str]:
    """Feed every file to ``sinks``; returns error messages for files that could not be opened/read.

    ``progress`` is called with the number of bytes read after each chunk; ``host_logs`` gives a
    file's matched host log (``.pairing``) to its run's diagnosis; a file in ``alone`` was
    named on its own and is read as that one run (``Run``'s ``alone``).
    """
    errors: list[str] = []
    for path in files:
        try:
            seen_at = path.stat().st_mtime
        except OSError:
            seen_at = 0.0
        run = Run(Source(str(path), source_labels(path)), thresholds, seen_at, sinks.wants,
                  host_log=host_logs.get(path) if host_logs else None, alone=path in alone, advise=advise)
        try:
            with open_input(path) as fh:
                while chunk := fh.read(CHUNK):
                    sinks.receive_all(run.feed(chunk))
                    if progress is not None:
                        progress(len(chunk))
        except (OSError, EOFError, zlib.error, zstandard.ZstdError) as err:  # a cut or corrupt archive too
            why = err.strerror if isinstance(err, OSError) and err.strerror else str(err) or type(err).__name__
            errors.append(f"{path}: cannot read: {why}")
            sinks.receive_all(run.finish("eof"))
            continue
        sinks.receive_all(run.finish("eof"))
    return errors


def log_only_events(logs: Sequence[HostLog], thresholds: Thresholds) -> list[SinkEvent]:
    """RunStarted + RunFinished for each run known from its host log alone (labels read off the log's path)."""
    out: list[SinkEvent] = []
    for log in logs:
        out += log_only_run(log, thresholds, advise=advise)
    return out
