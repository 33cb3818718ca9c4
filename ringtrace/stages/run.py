"""One run of one source: bytes in, sink events out.  Pure glue of ``decode`` and ``pair``.

The caller (the file reader for ``summary``/``convert``, the tailer for ``watch``) owns the
file and the clock; it calls :meth:`Run.feed` with each chunk in order and :meth:`Run.finish`
once, with the reason the run ended.  Nothing here blocks or raises for bad data.

A run reads through a :class:`ringtrace.stages.reader.Reader`: the compiled core where it was built
(:data:`ringtrace.stages.core.COMPILED`), with no :class:`Record` or event object made unless the sinks read
them (``wants``), else the pure-Python stages; the same items, events, summaries and bands either way
(``wants.bands``: the report's, which ``RunFinished.bands`` carries).
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import PurePath
from typing import TYPE_CHECKING, cast

from ringtrace.config import Thresholds
from ringtrace.model.records import (
    WANT_ALL,
    Finding,
    FinishReason,
    HostLog,
    Labels,
    Meta,
    Problem,
    Record,
    RunAdvice,
    RunFinished,
    RunProgress,
    RunStarted,
    RunSummary,
    SinkEvent,
    Source,
    TensormapPeak,
    Wants,
)
from ringtrace.sources.paths import labels_for
from ringtrace.stages.decode import Decoder
from ringtrace.stages.diagnose import describe_log, diagnose, wedge_causes
from ringtrace.stages.pair import Pairer
from ringtrace.stages.reader import Reader, Step, reader
from ringtrace.stages.verdict import verdict_of

if TYPE_CHECKING:
    from ringtrace.stages import _core

KEEP_PROBLEMS = 100
"""Problems kept for the final report; all are counted."""

Advisor = Callable[[RunSummary, float, str, Labels, "HostLog | None"], RunAdvice]
"""What makes a finished run's advice from its summary, the headroom, its path, labels and host log
(:func:`ringtrace.analysis.advise.advise`, given by whoever wires the run: sizing is analysis, not a stage);
without one a run carries no advice."""


class Run:
    """Decoder + pairer for one :class:`Source`.  Single-threaded; memory O(depth + kept problems)."""

    def __init__(self, source: Source, thresholds: Thresholds | None = None, seen_at: float = 0.0,
                 wants: Wants = WANT_ALL, host_log: HostLog | None = None, alone: bool = False,
                 compiled: bool | None = None, advise: Advisor | None = None) -> None:
        """``compiled``: read through the compiled core (True), the pure-Python stages (False), or
        whichever :data:`ringtrace.stages.core.COMPILED` says (None).  ``advise``: makes the finished run's
        advice (none without it)."""
        self.source = source
        self.wants = wants
        self.seen_at = seen_at
        self.thresholds = thresholds or Thresholds()
        self.reader: Reader = reader(wants, compiled)
        self.started = False
        self.problems: list[Problem] = []
        self.bytes = 0
        self.finished: RunFinished | None = None
        self.last_line = 0  # the last record's line
        self.host_log = host_log  # used by finish() only: confirms the wedge, names a failure
        self.alone = alone  # the file was named on its own: another run's log beside it is not reported
        self.advise = advise

    @property
    def meta(self) -> Meta | None:
        return self.reader.decoder.meta

    @property
    def decoder(self) -> Decoder:
        """The reader's decoder: lines, records and parse errors read, held-back bytes."""
        return self.reader.decoder

    @property
    def pairer(self) -> Pairer | _core.Pairer:
        return self.reader.pairer

    def feed(self, chunk: bytes) -> list[SinkEvent]:
        """Decode and pair ``chunk``; returns RunStarted (once) and a RunProgress when anything happened."""
        self.bytes += len(chunk)
        step = self.reader.feed(chunk)
        if step.records and len(step.items) == step.records and self.reader.keeps_records:
            return self._progress(cast("list[Record]", step.items), [], step)  # records only (the usual chunk)
        return self._consume(step)

    def finish(self, reason: FinishReason, key: str = "") -> list[SinkEvent]:
        """End the run: decode a held-back last line, report wedged scopes, findings and the verdict.

        On ``shutdown`` the run did not end by itself, so its open scopes are not called wedged; nor
        are they when the file was ``deleted`` or ``rewritten`` under the reader, or holds fewer records
        than its metadata promises (``cut_short``: the cut last line is dropped, not reported).

        A host log that reports a runtime failure beside a file that completed (every record, no scope
        left open, not fatal) is another run's log (the runtime writes no file for a failed run): the
        file keeps its own verdict and the log is reported after it as a run of its own (key ``KEY#log``).
        """
        if self.finished is not None:
            return []
        out = self._consume(self.reader.finish(cut=reason in ("deleted", "rewritten")))
        if not self.started:
            self.started = True
            out.insert(0, RunStarted(self.source, self.meta, self.seen_at))
        th = self.thresholds
        summary = self.summary(finished=reason not in ("shutdown", "deleted", "rewritten"))
        if summary.wedged and summary.missing:  # a cut file: its open scopes are not a wedge
            summary = self.summary(finished=False)
        log = self.host_log
        foreign = log is not None and log.runtime_failed and _ran_to_its_end(summary)
        if foreign:
            self.host_log = None
        findings = diagnose(summary, th, self.reader.open_usage() if summary.wedged else (), self.host_log,
                            reason)
        if foreign and log is not None:
            how = ("not read with it (the file was named alone: name its folder to see both runs)" if self.alone
                   else "reported as a run of its own")
            findings = (*findings, Finding(
                "other_run_log", "info", f"the host log {log.path} reports {describe_log(log)}, but this file "
                                         "completed (the runtime writes no file for a failed run): it is another "
                                         f"run's log, {how}"))
        causes = wedge_causes(summary, findings, th)
        verdict = verdict_of(summary, findings, self.host_log, causes[-1] if causes else None,
                             stopped=reason == "shutdown", near=th.near)
        self.finished = RunFinished(self.source, summary, findings, reason, tuple(self.problems),
                                    host_log=self.host_log,
                                    advice=self.advise(summary, th.headroom, self.source.path, self.source.labels,
                                                       self.host_log) if self.advise else None,
                                    key=key, wedge_causes=causes, last_line=self.last_line, seen_at=self.seen_at,
                                    verdict=verdict, bands=self.reader.bands())
        out.append(self.finished)
        if foreign and log is not None and not self.alone:
            out.extend(log_only_run(log, th, f"{key}#log" if key else "", self.advise))
        return out

    def summary(self, finished: bool = False) -> RunSummary:
        """A snapshot; ``finished`` reports still-open scopes as wedged."""
        return self.reader.summary(finished)

    def _consume(self, step: Step) -> list[SinkEvent]:
        """A step's items in order: RunStarted at the metadata, the problems kept and counted."""
        out: list[SinkEvent] = []
        records: list[Record] = []
        problems: list[Problem] = []
        for item in step.items:
            if type(item) is Record:
                records.append(item)
            elif isinstance(item, Meta):
                if not self.started:
                    self.started = True
                    out.append(RunStarted(self.source, item, self.seen_at))
            elif isinstance(item, Problem):
                problems.append(item)
                if len(self.problems) < KEEP_PROBLEMS:
                    self.problems.append(item)
        out += self._progress(records, problems, step)
        return out

    def _progress(self, records: list[Record], problems: list[Problem], step: Step) -> list[SinkEvent]:
        """RunStarted if not yet sent, and a RunProgress when anything happened."""
        out: list[SinkEvent] = []
        read, events = step.records, step.events
        if read:
            self.last_line = self.reader.last_line
            if not self.started:
                self.started = True
                out.append(RunStarted(self.source, self.meta, self.seen_at))
        if read or events or problems:
            wants = self.wants
            out.append(RunProgress(self.source, tuple(records) if wants.records else (),
                                   tuple(events) if wants.events else (), tuple(problems),
                                   self.summary(finished=False)))
        return out


def _ran_to_its_end(s: RunSummary) -> bool:
    """Every record the metadata promises was read, none dropped, no scope left open, not fatal."""
    m = s.meta
    return m is not None and m.dropped == 0 and not m.fatal and s.complete and not s.open


def log_only_run(log: HostLog, thresholds: Thresholds | None = None, key: str = "", advise: Advisor | None = None
                 ) -> tuple[RunStarted, RunFinished]:
    """A run known from its host log alone (no scope_stats file): ``source.path`` is "", no records,
    and the findings :func:`ringtrace.stages.diagnose.diagnose` gives the log (``failed`` when it reports one).
    Labels are read off the log's path (its folder is the run), rank and dispatch from its lines."""
    lab = labels_for(PurePath(log.path))
    rank = str(log.rank) if log.rank is not None else lab.rank
    dispatch = str(log.dispatch) if log.dispatch is not None else lab.dispatch
    summary = RunSummary(None, 0, 0, 0, 0, 0, (), TensormapPeak(None, 0, "", 0), (), 0)
    source = Source("", Labels(lab.run, rank, dispatch))
    th = thresholds or Thresholds()
    findings = diagnose(summary, th, (), log)
    advice = advise(summary, th.headroom, "", source.labels, log) if advise else None  # what the log alone proves
    return (RunStarted(source, None),
            RunFinished(source, summary, findings, "eof", (), host_log=log, advice=advice, key=key,
                        verdict=verdict_of(summary, findings, log, near=th.near)))
