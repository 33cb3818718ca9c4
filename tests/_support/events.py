"""The sink events of real files, the two ways the product makes them.

:func:`read_events` reads whole files through the one-shot path (``convert``/``summary``);
:func:`run_events` feeds one file to a ``Run`` in chunks, as the watcher reads a growing file;
:func:`one_shot` is one file's ``RunFinished`` as ``summary`` makes it; :func:`finished` picks the
``RunFinished`` events of a stream.
"""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path

from ringtrace.config import Thresholds
from ringtrace.gather.oneshot import read_files
from ringtrace.model.records import (
    RunFinished,
    SinkEvent,
    Source,
)
from ringtrace.sinks import FanOut
from ringtrace.sources.paths import find_sources
from ringtrace.stages.run import Run
from tests._support.sinks import Collect


def read_events(paths: list[Path]) -> list[SinkEvent]:
    files, errors = find_sources([str(p) for p in paths])
    assert not errors
    cap = Collect()
    assert read_files(files, FanOut([cap]), Thresholds()) == []
    return cap.events


def run_events(path: Path, source: Source, chunk: int = 16 << 10) -> list[SinkEvent]:
    """The events of ``path`` read as the watcher reads a growing file: ``chunk`` bytes at a time."""
    data = path.read_bytes()
    run = Run(source)
    events: list[SinkEvent] = []
    for i in range(0, len(data), chunk):
        events += run.feed(data[i:i + chunk])
    return events + run.finish("eof")


def finished(events: Iterable[object]) -> list[RunFinished]:
    """The ``RunFinished`` events of ``events``, in order."""
    return [e for e in events if isinstance(e, RunFinished)]


def one_shot(path: Path) -> RunFinished:
    """``path``'s run as the one-shot reader finishes it (what ``summary`` reports)."""
    [fin] = finished(read_events([path]))
    return fin
