"""The Prometheus sink: live per-run state, read at scrape time.

Threads: :meth:`PrometheusSink.receive` runs on the app's sink thread, scrapes (``chunks``, ``render``,
``collect``) on the HTTP server's worker threads.  One lock guards the state: ``receive`` does small
arithmetic under it and never blocks; a scrape picks the runs under it.

Per source path (the latest generation wins) the sink keeps an open run's latest summary.  A finished
run is formatted once, when it finishes, into its exposition lines (one bytes per family:
:mod:`ringtrace.sinks.prometheus._families` says which series a run has), and only those are kept, packed
with the runs that finished about when it did (:mod:`ringtrace.sinks.prometheus._segments`: deflated,
~30 times smaller), for ``series_ttl`` seconds of the injected ``clock``.  Limits: at most ``max_runs`` runs (the oldest
finished go first, then the least recently updated), and at most ``series_budget`` series of finished
runs (0: no cap): past it the oldest finished runs' series go, counted in
``ringtrace_series_dropped_total`` and said once in the log.  With ``state_dir`` the finished runs'
lines are journalled (:mod:`ringtrace.sinks.prometheus._journal`) and served again after a restart,
for the rest of their TTL.

In each family the finished runs come first, in finish order, then the open runs, by labels.  A run
that finishes replaces a finished run with the same ``run``/``rank``/``dispatch`` labels; an open run
updated after a finished one with its labels hides it.  Label values that are not UTF-8 show U+FFFD.  A
scrape (``chunks``) formats the open runs afresh and hands the exposition out in pieces of about 256 KiB
made as they are sent (:mod:`ringtrace.sinks.prometheus.exposition`): the 30 MB of 10,000 finished rank
files are never held whole.  Its gzip is stitched from the segments' deflate streams (only the open
runs and the own families are compressed at a scrape), and its key tells the server when its last gzip
can be sent again.  ``render``, the
pieces joined, is byte-identical to prometheus_client's encoders over ``registry`` in both formats
(registered collectors last); ``collect`` is that reference, reading a finished run's samples back from
its lines with prometheus_client's parser.
"""

from __future__ import annotations

import logging
import platform
import threading
import time
from collections import deque
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path

import msgspec
from prometheus_client.core import Metric
from prometheus_client.exposition import choose_encoder
from prometheus_client.exposition import generate_latest as text_latest
from prometheus_client.openmetrics.exposition import CONTENT_TYPE_LATEST as OPENMETRICS
from prometheus_client.openmetrics.exposition import generate_latest as openmetrics_latest
from prometheus_client.parser import text_string_to_metric_families
from prometheus_client.registry import Collector, CollectorRegistry

from ringtrace.model.records import (
    WANT_SUMMARIES,
    Labels,
    Meta,
    RunFinished,
    RunProgress,
    RunStarted,
    RunSummary,
    SinkEvent,
    Source,
    empty_summary,
    utf8,
)
from ringtrace.sinks import ringtrace_version
from ringtrace.sinks.base import Sink
from ringtrace.sinks.prometheus._families import (
    LABEL_NAMES,
    RUN_FAMILIES,
    RUN_LABELS,
    RunView,
    Sample,
    run_families,
    run_lines,
    samples,
)
from ringtrace.sinks.prometheus._journal import Entry, Journal, decode_key, encode_key
from ringtrace.sinks.prometheus._own import SelfCounts, own_families
from ringtrace.sinks.prometheus._segments import Packed, Segment, deflate, gzip_of, inflate
from ringtrace.sinks.prometheus.exposition import Chunks, family_heads, gz_parts, pieces

log = logging.getLogger("ringtrace.sinks.prometheus")
Key = tuple[str, str, str]


@dataclass(slots=True)
class _RunState:
    source: Source
    labels: Key  # run, rank, dispatch as valid UTF-8
    updated_at: float  # a finished run's finish time
    record_at: float  # when the record count last grew (set at creation)
    live: RunSummary | None  # an open run's latest summary; None once finished
    lines: tuple[bytes, ...] | None = None  # a finished run's sample lines, one bytes per family, until packed
    sizes: tuple[int, ...] = ()  # their lengths (finished)
    series: int = 0  # how many (finished)
    run_key: str = ""  # RunFinished.key (finished)
    restored: bool = False  # read from the journal at start
    dead: bool = False  # a finished run that left (its lines go at its segment's next pack)
    segment: Segment | None = None  # where its lines are packed (finished)

    def view(self) -> RunView:
        assert self.live is not None
        return RunView(self.labels, self.source, self.live, None, self.record_at)

    def take(self, summary: RunSummary, now: float) -> None:
        """``summary`` is the run's latest: a progress of its records moves :attr:`record_at`."""
        if self.live is not None and summary.records > self.live.records:
            self.record_at = now
        self.live = summary
        self.updated_at = now


class _Collector:
    """prometheus_client's collector protocol over a function giving families."""

    def __init__(self, collect: Callable[[], Iterable[Metric]]) -> None:
        self.collect = collect


def _key(source: Source) -> str:
    """A run's place in the sink: its path (a new generation replaces the old run), or for a run known
    from its host log alone (no path) its labels."""
    return source.path or f"\0{source.name}"


def _labels(source: Source) -> Key:
    lab = source.labels
    return utf8(lab.run), utf8(lab.rank), utf8(lab.dispatch)


class PrometheusSink(Sink):
    """A sink keeping live per-run state, exposed on its own :attr:`registry` at scrape time.

    ``sink_errors`` returns failures per sink (``FanOut.errors``), ``reader`` the reader's gauges
    (``files_watched``, ``read_errors``, ``in_flight_bytes``); both are read at scrape time.
    ``clock`` gives wall-clock seconds (the TTL).  ``advice``: expose the advice families.
    """

    name = "prometheus"
    wants = WANT_SUMMARIES

    def __init__(self, series_ttl: float = 900.0, clock: Callable[[], float] = time.time,
                 sink_errors: Callable[[], Mapping[str, int]] | None = None, max_runs: int = 10_000,
                 reader: Callable[[], Mapping[str, int]] | None = None, *, series_budget: int = 0,
                 advice: bool = False, state_dir: Path | None = None) -> None:
        self.registry = CollectorRegistry(auto_describe=True)
        self.series_ttl = series_ttl
        self.max_runs = max_runs
        self.series_budget = series_budget
        self.advice = advice
        self._clock = clock
        self._sink_errors = sink_errors
        self._reader = reader
        self._lock = threading.Lock()
        self._runs: dict[str, _RunState] = {}
        self._open: dict[str, _RunState] = {}  # the open ones among them
        self._finished: deque[_RunState] = deque()  # finish order (their updated_at is the finish time)
        self._finished_series = 0
        self._self = SelfCounts()
        self._build = [ringtrace_version(), platform.python_version()]
        self._version = 0  # moves at every change of what the runs expose
        self._segments: deque[Segment] = deque()  # the finished runs' lines, in finish order
        self._by_labels: dict[Key, _RunState] = {}  # the finished run of each label set
        self._journal = Journal(state_dir) if state_dir is not None else None
        self.registry.register(self)
        self._headers = {om: family_heads(encode(_Collector(lambda: run_families([]))))
                         for om, encode in ((False, text_latest), (True, openmetrics_latest))}
        self._heads_z = {om: [deflate(h) for h in heads] for om, heads in self._headers.items()}
        self._own = CollectorRegistry(auto_describe=False)  # what render appends: own families, then registered
        self._own.register(_Collector(self.self_families))
        if self._journal is not None:
            self._restore(self._journal.load(clock(), series_ttl))

    # -- sink contract ----------------------------------------------------------------------

    def receive(self, event: SinkEvent) -> None:
        now = self._clock()
        with self._lock:
            if type(event) is RunProgress:
                self._progress(event, now)
            elif type(event) is RunStarted:
                self._started(event, now)
            elif type(event) is RunFinished:
                self._finish(event, now)
            self._expire(now)

    def flush(self, deadline: float) -> None:
        pass

    def close(self) -> None:
        if self._journal is not None:
            self._journal.close()

    def register(self, collector: Collector) -> None:
        """Expose another component's families (e.g. ``OtlpSink.collector()``) after this sink's own,
        on :attr:`registry` and in :meth:`render` alike.  Use this, not ``registry.register``."""
        self.registry.register(collector)
        self._own.register(collector)

    def set_files_watched(self, n: int) -> None:
        """The app reports how many files it follows (``ringtrace_files_watched``)."""
        with self._lock:
            self._self.files_watched = n

    # -- state (every method under the lock) ------------------------------------------------

    def _state(self, source: Source, now: float, meta: Meta | None = None) -> _RunState | None:
        """The state for ``source``: None for an older generation than the one tracked."""
        st = self._runs.get(_key(source))
        if st is not None and st.source.generation > source.generation:
            return None
        if st is None or st.source.generation < source.generation:
            self._forget(_key(source))
            st = _RunState(source, _labels(source), now, now, empty_summary(meta))
            self._runs[_key(source)] = self._open[_key(source)] = st
            self._bound()
        return st

    def _started(self, ev: RunStarted, now: float) -> None:
        st = self._runs.get(_key(ev.source))
        if st is not None and st.source.generation == ev.source.generation and (st.live is not None or st.restored):
            return  # a repeated start of the same run: keep the figures (a restored run: until its finish)
        if st is not None and st.source.generation <= ev.source.generation:
            self._forget(_key(ev.source))  # a new run of the same path replaces the old one
        self._self.started += 1
        self._state(ev.source, now, ev.meta)

    def _progress(self, ev: RunProgress, now: float) -> None:
        errors = self._self.parse_errors
        for p in ev.problems:
            if p.severity == "error":
                errors[p.reason] = errors.get(p.reason, 0) + 1
        st = self._state(ev.source, now)
        if st is None or st.live is None:
            return
        if ev.summary is not None:
            self._self.records += ev.summary.records - st.live.records
            st.take(ev.summary, now)
        st.updated_at = now
        self._version += 1

    def _finish(self, ev: RunFinished, now: float) -> None:
        self._self.finished[ev.reason] = self._self.finished.get(ev.reason, 0) + 1
        key = _key(ev.source)
        old = self._runs.get(key)
        if old is not None and old.restored and old.run_key != ev.key and \
                old.source.generation == ev.source.generation:
            self._forget(key)  # read again after a restart, and not the run the journal holds
        st = self._state(ev.source, now, ev.summary.meta)
        if st is None or st.live is None:
            return  # finished already (a run finished again after a kill -9 keeps its first finish)
        self._self.records += ev.summary.records - st.live.records
        st.take(ev.summary, now)
        final = ev if self.advice or ev.advice is None else msgspec.structs.replace(ev, advice=None)
        lines, st.series = run_lines(samples(RunView(st.labels, st.source, ev.summary, final, st.record_at)))
        st.live, st.run_key = None, ev.key
        del self._open[key]
        if self._journal is not None:
            self._journal.append(_entry(key, st, lines))
            if self._journal.written > 2 * len(self._finished) + 1000:
                self._journal.rewrite(_entry(_key(run.source), run, got) for seg in self._segments
                                      for run, got in seg.lines() if isinstance(run, _RunState))
        self._add_finished(st, lines)

    def _add_finished(self, st: _RunState, lines: tuple[bytes, ...]) -> None:
        """``st`` finished with ``lines``: packed with the runs that finished before it, replacing a finished
        run with its labels; then the series budget."""
        old = self._by_labels.get(st.labels)
        if old is not None and self._runs.get(_key(old.source)) is old:
            self._forget(_key(old.source))
        self._by_labels[st.labels] = st
        st.lines, st.sizes = lines, tuple(map(len, lines))
        seg = self._segments[-1] if self._segments and not self._segments[-1].full else None
        if seg is None:
            seg = Segment(len(RUN_FAMILIES))
            self._segments.append(seg)
        seg.add(st)
        st.segment = seg
        if seg.full:
            seg.pack()  # as it fills: the lines are held packed from then on
        self._finished.append(st)
        self._finished_series += st.series
        self._version += 1
        budget = self.series_budget
        if budget and self._finished_series > budget:
            if not self._self.series_dropped:
                log.warning("the finished runs' series passed the series budget (%d, --series-budget): the oldest "
                            "finished runs' series are dropped before their TTL from now on "
                            "(ringtrace_series_dropped_total counts them)", budget)
            while self._finished_series > budget and self._finished:
                gone = self._drop_oldest_finished()
                self._self.series_dropped += gone.series if gone is not None else 0

    def _restore(self, entries: list[Entry]) -> None:
        """The journal's runs, in finish order, as finished runs."""
        with self._lock:
            for e in entries:
                key = decode_key(e.key)
                run, rank, dispatch = e.labels
                source = Source(key if not key.startswith("\0") else "", Labels(run, rank, dispatch), e.generation)
                lines = tuple(e.families.get(name, "").encode() for name, _, _ in RUN_FAMILIES)
                st = _RunState(source, e.labels, e.finished_at, e.record_at, None,
                               series=sum(b.count(b"\n") for b in lines), run_key=e.run_key, restored=True)
                self._forget(key)
                self._runs[key] = st
                self._add_finished(st, lines)
                self._bound()
            self._expire(self._clock())
        if entries:
            log.info("%d finished run(s) served again from %s for the rest of their TTL", len(self._finished),
                     self._journal.path if self._journal is not None else "")

    def _forget(self, key: str) -> _RunState | None:
        """Drop the run at ``key`` (if any); returns it."""
        st = self._runs.pop(key, None)
        self._open.pop(key, None)
        if st is not None:
            if st.live is None:
                self._finished_series -= st.series
                st.dead = True
                if st.segment is not None:
                    st.segment.dirty = True
                if self._by_labels.get(st.labels) is st:
                    del self._by_labels[st.labels]
            self._version += 1
        return st

    def _drop_oldest_finished(self) -> _RunState | None:
        """Forget the run that finished first, unless it was replaced already; the run dropped."""
        st = self._finished.popleft()
        if self._runs.get(_key(st.source)) is not st:
            return None
        return self._forget(_key(st.source))

    def _expire(self, now: float) -> None:
        """Drop finished runs older than the TTL (finish order is clock order)."""
        while self._finished and self._finished[0].updated_at + self.series_ttl <= now:
            self._self.expired += self._drop_oldest_finished() is not None

    def _bound(self) -> None:
        """Keep at most ``max_runs``: the oldest finished first, then the least recently updated."""
        runs = self._runs
        while len(runs) > self.max_runs and self._finished:
            self._self.evicted += self._drop_oldest_finished() is not None
        if len(runs) > self.max_runs:
            for path, _ in sorted(runs.items(), key=lambda kv: kv[1].updated_at)[: len(runs) - self.max_runs]:
                self._forget(path)
                self._self.evicted += 1

    def _exposed(self) -> tuple[list[Packed], list[tuple[bytes, ...]], list[RunView]]:
        """What a scrape shows: the segments' packed families, in finish order, and the finished runs' lines
        when a newer open run hides one of them (then no segments); the open runs exposed, by labels (of
        those with the same labels the most recently updated)."""
        self._expire(self._clock())
        for seg in self._segments:
            seg.pack()
        while self._segments and not self._segments[0].runs:
            self._segments.popleft()
        opened = _latest(self._open.values())
        by_labels = self._by_labels
        opened = [st for st in opened if st.labels not in by_labels or by_labels[st.labels].updated_at <= st.updated_at]
        hidden = {st.labels for st in opened} & by_labels.keys()
        views = [st.view() for st in opened]
        if not hidden:
            return [seg.parts for seg in self._segments if seg.parts is not None], [], views
        return [], [got for seg in self._segments for run, got in seg.lines()
                    if isinstance(run, _RunState) and run.labels not in hidden], views

    # -- scrapes ------------------------------------------------------------------------------

    def describe(self) -> Iterable[Metric]:
        return []  # unchecked collector: the families depend on the live state

    def collect(self) -> Iterator[Metric]:
        """Every family, collected afresh (the reference :meth:`render` is checked against)."""
        with self._lock:
            packed, rows, views = self._exposed()
        texts = [[inflate(parts[i]) for parts in packed] for i in range(len(RUN_FAMILIES))]
        segments = [_parsed(tuple(text[k] for text in texts)) for k in range(len(packed))]
        yield from run_families([*segments, *map(_parsed, rows), *map(samples, views)])
        yield from self.self_families()

    def self_families(self) -> Iterator[Metric]:
        """The exporter's own families (counters, the reader's gauges, build info)."""
        with self._lock:
            c = self._self.copy()
            c.tracked, c.finished_series = len(self._runs), self._finished_series
        yield from own_families(c, _poll(self._reader), _poll(self._sink_errors), self._build)

    def chunks(self, accept: str) -> tuple[Chunks, str]:
        """The exposition for a scrape whose ``Accept`` header is ``accept``, in pieces made as they are taken
        (the server streams them; or takes its gzip, stitched from the packed segments); the content type.
        The lock is held to pick the runs and pack what changed."""
        _, content_type = choose_encoder(accept)
        om = content_type.startswith(OPENMETRICS.split(";")[0])
        with self._lock:
            packed, rows, views = self._exposed()
            version = self._version
        own = openmetrics_latest(self._own) if om else text_latest(self._own)
        rows += [run_lines(samples(v))[0] for v in views]
        heads, zipped = self._headers[om], self._heads_z[om]
        return Chunks(pieces(heads, packed, rows, own), (om, version, own),
                      lambda: gzip_of(gz_parts(zipped, packed, rows, own))), content_type

    def render(self, accept: str) -> tuple[bytes, str]:
        """:meth:`chunks` joined: the whole body."""
        got, content_type = self.chunks(accept)
        return b"".join(got), content_type


def _latest(runs: Iterable[_RunState]) -> list[_RunState]:
    """One run per label set, the most recently updated, by labels."""
    chosen: dict[Key, _RunState] = {}
    for st in runs:
        other = chosen.get(st.labels)
        if other is None or st.updated_at >= other.updated_at:
            chosen[st.labels] = st
    return [chosen[k] for k in sorted(chosen)]


def _entry(key: str, st: _RunState, lines: tuple[bytes, ...]) -> Entry:
    return Entry(encode_key(key), st.source.generation, st.run_key, st.labels, st.updated_at, st.record_at,
                 {name: b.decode() for (name, _, _), b in zip(RUN_FAMILIES, lines, strict=True) if b})


def _parsed(lines: tuple[bytes, ...]) -> Iterator[Sample]:
    """A finished run's samples, read back from its lines."""
    for fam in text_string_to_metric_families(b"".join(lines).decode()):
        for s in fam.samples:
            yield s.name, [s.labels[k] for k in LABEL_NAMES[s.name]], s.value


def _poll(read: Callable[[], Mapping[str, int]] | None) -> dict[str, int]:
    """``read()``, or {} without one or when it fails (a scrape must not fail while the app shuts down)."""
    try:
        return dict(read()) if read is not None else {}
    except Exception:
        return {}


__all__ = ["RUN_FAMILIES", "RUN_LABELS", "PrometheusSink", "RunView", "run_families"]
