"""One run of one source: bytes in, sink events out.  Pure glue of ``decode`` and ``pair``.

The caller (the file reader for ``summary``/``convert``, the tailer for ``watch``) owns the
file and the clock; it calls :meth:`Run.feed` with each chunk in order and :meth:`Run.finish`
once, with the reason the run ended.  Nothing here blocks or raises for bad data.

Where the compiled core was built (:data:`ringtrace.stages.core.COMPILED`), a run reads through it: the
same items, events and summaries as the pure-Python stages, with no :class:`Record` or event object
made unless the sinks read them (``wants``).  When a sink wants the run's bands (``wants.bands``: the report),
the compiled pairer folds them as it pairs; on the pure path :class:`ringtrace.stages.bands.Folder` folds them
from the records and events; ``RunFinished.bands`` carries them.
"""

from __future__ import annotations

from pathlib import PurePath
from typing import TYPE_CHECKING, cast

from ringtrace.analysis.advise import advise
from ringtrace.model.records import (
    WANT_ALL,
    Bands,
    Finding,
    FinishReason,
    HostLog,
    Labels,
    Meta,
    Problem,
    Record,
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
from ringtrace.stages import core
from ringtrace.stages.bands import Folder
from ringtrace.stages.core import LinkedDecoder
from ringtrace.stages.decode import Decoder, Item
from ringtrace.stages.diagnose import Thresholds, describe_log, diagnose, wedge_causes
from ringtrace.stages.pair import Pairer
from ringtrace.stages.verdict import verdict_of

if TYPE_CHECKING:
    from ringtrace.stages import _core

KEEP_PROBLEMS = 100
"""Problems kept for the final report; all are counted."""


class Run:
    """Decoder + pairer for one :class:`Source`.  Single-threaded; memory O(depth + kept problems)."""

    def __init__(self, source: Source, thresholds: Thresholds | None = None, seen_at: float = 0.0,
                 wants: Wants = WANT_ALL, host_log: HostLog | None = None, alone: bool = False,
                 compiled: bool | None = None) -> None:
        """``compiled``: read through the compiled core (True), the pure-Python stages (False), or
        whichever :data:`ringtrace.stages.core.COMPILED` says (None)."""
        self.source = source
        self.wants = wants
        self.seen_at = seen_at
        self.thresholds = thresholds or Thresholds()
        self.decoder: Decoder
        self.pairer: Pairer | _core.Pairer
        self.folder: Folder | None = None  # the pure path's fold of the bands (the compiled pairer folds its own)
        if core.COMPILED if compiled is None else compiled:
            self.pairer = pairer = core.pairer(keep_events=wants.events, bands=wants.bands)
            self.decoder = LinkedDecoder(pairer, keep_records=wants.records)
        else:
            self.decoder = Decoder()
            self.pairer = Pairer()
            if wants.bands:
                self.folder = Folder(wants.bands)
        self.started = False
        self.problems: list[Problem] = []
        self.bytes = 0
        self.finished: RunFinished | None = None
        self.last_line = 0  # the last record's line
        self.host_log = host_log  # used by finish() only: confirms the wedge, names a failure
        self.alone = alone  # the file was named on its own: another run's log beside it is not reported

    @property
    def meta(self) -> Meta | None:
        return self.decoder.meta

    def feed(self, chunk: bytes) -> list[SinkEvent]:
        """Decode and pair ``chunk``; returns RunStarted (once) and a RunProgress when anything happened."""
        self.bytes += len(chunk)
        decoder = self.decoder
        before = decoder.records
        items = decoder.feed(chunk)
        read = decoder.records - before
        paired = -1 if self._linked() is None else read  # the compiled core paired them as it read them
        if read and len(items) == read and (paired < 0 or cast("LinkedDecoder", decoder).keep_records):
            return self._progress(cast("list[Record]", items), [], paired)  # records only (the usual chunk)
        return self._consume(items, paired)

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
        cut = reason in ("deleted", "rewritten")
        before = self.decoder.records
        items = self.decoder.finish(cut)
        out = self._consume(items, self.decoder.records - before if self._linked() is not None else -1)
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
        findings = diagnose(summary, th, self.pairer.open_usage() if summary.wedged else (), self.host_log,
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
                                    advice=advise(summary, th.headroom, path=self.source.path,
                                                  labels=self.source.labels, host_log=self.host_log),
                                    key=key, wedge_causes=causes, last_line=self.last_line, seen_at=self.seen_at,
                                    verdict=verdict, bands=self._bands())
        out.append(self.finished)
        if foreign and log is not None and not self.alone:
            out.extend(log_only_run(log, th, f"{key}#log" if key else ""))
        return out

    def summary(self, finished: bool = False) -> RunSummary:
        """A snapshot; ``finished`` reports still-open scopes as wedged."""
        return self.pairer.summary(self.decoder.parse_errors, finished)

    def _bands(self) -> Bands | None:
        """The run's bands, when the sinks want them (``wants.bands``)."""
        if self.folder is not None:
            return self.folder.bands()
        linked = self._linked()
        return linked.bands() if linked is not None else None

    def _linked(self) -> _core.Pairer | None:
        """The compiled pairer the decoder pairs into as it decodes, or None (the pure path: Run pairs)."""
        decoder = self.decoder
        return decoder.pairer if isinstance(decoder, LinkedDecoder) else None

    def _consume(self, items: list[Item], paired: int = -1) -> list[SinkEvent]:
        """``items`` in order; ``paired`` >= 0: the decoder already paired that many records (the
        compiled path), which are among ``items`` only when the sinks read records."""
        out: list[SinkEvent] = []
        records: list[Record] = []
        problems: list[Problem] = []
        for item in items:
            if type(item) is Record:
                records.append(item)
            elif isinstance(item, Meta):
                self.pairer.meta = item
                if not self.started:
                    self.started = True
                    out.append(RunStarted(self.source, item, self.seen_at))
            elif isinstance(item, Problem):
                problems.append(item)
                if len(self.problems) < KEEP_PROBLEMS:
                    self.problems.append(item)
        out += self._progress(records, problems, paired)
        return out

    def _progress(self, records: list[Record], problems: list[Problem], paired: int = -1) -> list[SinkEvent]:
        """Pair ``records`` (unless ``paired`` >= 0: see :meth:`_consume`); RunStarted if not yet sent, and a
        RunProgress when anything happened."""
        out: list[SinkEvent] = []
        linked = self._linked() if paired >= 0 else None
        if linked is None:
            events = self.pairer.push_many(records)
            read = len(records)
            if records:
                self.last_line = records[-1].line
            if self.folder is not None:
                self.folder.push(records, events, self.meta)
        else:
            events = linked.take_events()
            read = paired
            if read:
                self.last_line = linked.last_line
        if read and not self.started:
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


def log_only_run(log: HostLog, thresholds: Thresholds | None = None, key: str = ""
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
    advice = advise(summary, th.headroom, labels=source.labels, host_log=log)  # what the log alone proves
    return (RunStarted(source, None),
            RunFinished(source, summary, findings, "eof", (), host_log=log, advice=advice, key=key,
                        verdict=verdict_of(summary, findings, log, near=th.near)))
