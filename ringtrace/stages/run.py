"""One run of one source: bytes in, sink events out.  Pure glue of ``decode`` and ``pair``.

The caller (the file reader for ``summary``/``convert``, the tailer for ``watch``) owns the
file and the clock; it calls :meth:`Run.feed` with each chunk in order and :meth:`Run.finish`
once, with the reason the run ended.  Nothing here blocks or raises for bad data.
"""

from __future__ import annotations

from typing import cast

from ringtrace.analysis.advise import advise
from ringtrace.model.records import (
    WANT_ALL,
    Finding,
    FinishReason,
    HostLog,
    Meta,
    Problem,
    Record,
    RunFinished,
    RunProgress,
    RunStarted,
    RunSummary,
    SinkEvent,
    Source,
    Wants,
)
from ringtrace.stages.decode import Decoder, Item
from ringtrace.stages.diagnose import Thresholds, diagnose, wedge_causes
from ringtrace.stages.pair import Pairer

KEEP_PROBLEMS = 100
"""Problems kept for the final report; all are counted."""


class Run:
    """Decoder + pairer for one :class:`Source`.  Single-threaded; memory O(depth + kept problems)."""

    def __init__(self, source: Source, thresholds: Thresholds | None = None, seen_at: float = 0.0,
                 wants: Wants = WANT_ALL, host_log: HostLog | None = None) -> None:
        self.source = source
        self.wants = wants
        self.seen_at = seen_at
        self.thresholds = thresholds or Thresholds()
        self.decoder = Decoder()
        self.pairer = Pairer()
        self.started = False
        self.problems: list[Problem] = []
        self.bytes = 0
        self.finished: RunFinished | None = None
        self.last_line = 0  # the last record's line
        self.host_log = host_log  # used by finish() only: confirms the wedge, names a failure

    @property
    def meta(self) -> Meta | None:
        return self.decoder.meta

    def feed(self, chunk: bytes) -> list[SinkEvent]:
        """Decode and pair ``chunk``; returns RunStarted (once) and a RunProgress when anything happened."""
        self.bytes += len(chunk)
        decoder = self.decoder
        before = decoder.records
        items = decoder.feed(chunk)
        if items and len(items) == decoder.records - before:  # records only (the usual chunk)
            return self._progress(cast("list[Record]", items), [])
        return self._consume(items)

    def finish(self, reason: FinishReason, key: str = "") -> list[SinkEvent]:
        """End the run: decode a held-back last line, report wedged scopes and findings.

        On ``shutdown`` the run did not end by itself, so its open scopes are not called wedged; nor
        are they when the file was ``deleted`` or ``rewritten`` under the reader (a ``cut_short`` warning
        says so, and the cut last line is dropped, not reported).
        """
        if self.finished is not None:
            return []
        cut = reason in ("deleted", "rewritten")
        out = self._consume(self.decoder.finish(cut))
        if not self.started:
            self.started = True
            out.insert(0, RunStarted(self.source, self.meta, self.seen_at))
        summary = self.summary(finished=reason not in ("shutdown", "deleted", "rewritten"))
        findings = diagnose(summary, self.thresholds, self.pairer.open_usage() if summary.wedged else (),
                            self.host_log)
        if cut and not summary.complete:
            findings = (*findings, Finding(
                "cut_short", "warning",
                f"the file was {reason} before its run ended ({summary.records} records read, "
                f"{summary.open_scopes} scope(s) open): the figures cover what was read; the open scopes "
                "are not called wedged and a half-written last line is not an error"))
        self.finished = RunFinished(self.source, summary, findings, reason, tuple(self.problems),
                                    host_log=self.host_log,
                                    advice=advise(summary, self.thresholds.headroom, path=self.source.path,
                                                  labels=self.source.labels,
                                                  host_log=self.host_log),
                                    key=key, wedge_causes=wedge_causes(summary, findings, self.thresholds),
                                    last_line=self.last_line, seen_at=self.seen_at)
        out.append(self.finished)
        return out

    def summary(self, finished: bool = False) -> RunSummary:
        """A snapshot; ``finished`` reports still-open scopes as wedged."""
        return self.pairer.summary(self.decoder.parse_errors, finished)

    def _consume(self, items: list[Item]) -> list[SinkEvent]:
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
        out += self._progress(records, problems)
        return out

    def _progress(self, records: list[Record], problems: list[Problem]) -> list[SinkEvent]:
        """Pair ``records``; RunStarted if not yet sent, and a RunProgress when anything happened."""
        out: list[SinkEvent] = []
        events = self.pairer.push_many(records)
        if records:
            self.last_line = records[-1].line
        if records and not self.started:
            self.started = True
            out.append(RunStarted(self.source, self.meta, self.seen_at))
        if records or events or problems:
            wants = self.wants
            out.append(RunProgress(self.source, tuple(records) if wants.records else (),
                                   tuple(events) if wants.events else (), tuple(problems),
                                   self.summary(finished=False)))
        return out
