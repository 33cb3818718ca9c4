"""Reading a user's paths into finished runs: the one room every one-shot command (``summary``, ``check``,
``convert``, ``report``, ``advise``, ``diff``) asks for its runs; the commands render what it returns.

1. :func:`plan`: discovery (:func:`ringtrace.sources.paths.find_inputs`: files, directories, globs) and the
   host logs' pairing (:mod:`.plan` by :mod:`.pairing`'s rules; which files are host logs: :mod:`.logfiles`);
2. :func:`read`: each file's one-shot run and every run known from a host log alone (:mod:`.oneshot`), into a
   :class:`~ringtrace.sinks.summary.SummarySink` and the caller's sinks; then one answer per program
   (:func:`ringtrace.analysis.advise.program_advice`), so every surface gives one size and one verb.

``watch``'s tailer pairs the logs it finds by the same rules (:mod:`.pairing`, :mod:`.logfiles`).
Blocking I/O, on the caller's thread: nothing else runs.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from pathlib import Path

import msgspec

from ringtrace.analysis.advise import ProgramAnswer, program_advice
from ringtrace.config import Thresholds
from ringtrace.gather.oneshot import log_only_events, read_files
from ringtrace.gather.plan import Plan, plan_for_read
from ringtrace.model.records import RunFinished
from ringtrace.sinks import FanOut, Sink
from ringtrace.sinks.summary import SummarySink
from ringtrace.sources.paths import find_inputs

__all__ = ["FLUSH_SECONDS", "Gathered", "Planned", "plan", "read"]

FLUSH_SECONDS = 120.0
"""How long the sinks may take to push out what they hold at the end of a read (OTLP spans, retries
included): the deadline of their ``flush``."""


class Planned(msgspec.Struct, frozen=True):
    """What a read will read: the scope_stats ``files`` in order, their host logs and the runs known from a log
    alone (``plan``, with the input errors and notes found so far), and the files named on their own (``alone``:
    each is that one run)."""

    files: list[Path]
    plan: Plan
    alone: frozenset[Path]

    @property
    def size(self) -> int:
        """The files' bytes (for a progress bar)."""
        return sum(f.stat().st_size for f in self.files if f.exists())


class Gathered(msgspec.Struct, frozen=True):
    """A read's outcome: ``summary`` holds every finished run (``summary.finished``, each with its program's
    advice), ``programs`` the programs' answers (made in the same pass); ``errors`` are input errors (the read
    is not ok: exit 2); ``notes`` are the host logs' problems and notes (said, not failing); ``sink_errors``
    counts each sink's failures."""

    summary: SummarySink
    programs: list[ProgramAnswer]
    errors: list[str]
    notes: list[str]
    sink_errors: dict[str, int]

    @property
    def runs(self) -> list[RunFinished]:
        return self.summary.finished

    @property
    def ok(self) -> bool:
        """Every input was readable and every sink took what it was given."""
        return not self.errors and not any(f.unreadable for f in self.runs) and not any(self.sink_errors.values())


def plan(paths: Sequence[str], host_logs: Sequence[str] = ()) -> Planned:
    """Discovery and pairing for ``paths`` (scope_stats files, host logs, directories) and ``host_logs``
    (``--host-log`` patterns): see :mod:`.plan`."""
    files, pairing = plan_for_read(host_logs, paths, find_inputs(list(paths)))
    return Planned(files, pairing, frozenset(f for f in files if str(f) in paths))


def read(planned: Planned, thresholds: Thresholds, sinks: Sequence[Sink] = (),
         progress: Callable[[int], None] | None = None) -> Gathered:
    """Read ``planned`` into a summary sink and ``sinks`` (a network sink sends while the files are read);
    ``progress`` is called with the bytes read after each chunk."""
    summary = SummarySink()
    fanout = FanOut([summary, *sinks])
    if any(s.blocks for s in sinks):  # every sink on an outlet, so sending overlaps reading
        fanout.start_oneshot()
    pairing = planned.plan
    errors = list(pairing.errors)
    errors += read_files(planned.files, fanout, thresholds, progress, pairing.for_file, planned.alone)
    fanout.receive_all(log_only_events(pairing.log_only, thresholds))
    fanout.flush(time.monotonic() + FLUSH_SECONDS)
    fanout.close()
    summary.finished[:], programs = program_advice(summary.finished, thresholds.headroom)  # one answer per program
    return Gathered(summary, programs, errors, [*pairing.problems, *pairing.notes], dict(fanout.errors))

