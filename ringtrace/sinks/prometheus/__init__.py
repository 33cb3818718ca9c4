"""The Prometheus sink: live per-run state, read at scrape time.

Threads: :meth:`PrometheusSink.receive` runs on the app's sink thread, scrapes (``render``, ``collect``)
on the HTTP server's worker threads.  One lock guards the state: ``receive`` does small arithmetic
under it and never blocks; a scrape copies under it and formats outside it.

Per source path (the latest generation wins) the sink keeps the latest :attr:`RunProgress.summary`,
then the :class:`RunFinished` one, whose series stay ``series_ttl`` seconds of the injected ``clock``;
at most ``max_runs`` runs (the oldest finished go first).  Of sources with the same
``run``/``rank``/``dispatch`` labels the most recently updated is exposed.  Label values that are not
UTF-8 show U+FFFD.  ``render`` formats a finished run's lines once and is byte-identical to
prometheus_client's encoders over ``registry`` in both formats (registered collectors last).
"""

from __future__ import annotations

import platform
import threading
import time
from collections import deque
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass, field

import msgspec
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.exposition import choose_encoder
from prometheus_client.exposition import generate_latest as text_latest
from prometheus_client.openmetrics.exposition import CONTENT_TYPE_LATEST as OPENMETRICS
from prometheus_client.openmetrics.exposition import generate_latest as openmetrics_latest
from prometheus_client.registry import Collector, CollectorRegistry
from prometheus_client.utils import floatToGoString

from ringtrace.analysis.need import proven_need
from ringtrace.model.records import (
    RESOURCES,
    WANT_SUMMARIES,
    Advice,
    Meta,
    RunAdvice,
    RunFinished,
    RunProgress,
    RunStarted,
    RunSummary,
    SinkEvent,
    Source,
    empty_summary,
    utf8,
)
from ringtrace.model.runtime import TABLE as RESOURCE_TABLE
from ringtrace.model.runtime import usable
from ringtrace.sinks import ringtrace_version
from ringtrace.sinks.base import Sink

RUN_LABELS = ("run", "rank", "dispatch")
_UNIT = {r.name: r.metric_suffix for r in RESOURCE_TABLE}
_WHAT = {r.name: r.things for r in RESOURCE_TABLE}
_PER_RESOURCE = (("capacity", "Capacity of the ring's {} (the file's metadata line)."),
                 ("high_water", "Largest scope high water of the ring's {} (end.head - begin.tail: the backlog when "
                  "the scope began plus all it allocated). Occupancy, not need: reclaim is lazy, so a ring that never "
                  "had to wait keeps everything; can exceed capacity when the ring reclaimed during the scope."),
                 ("live", "Occupied {} (head - tail) at the ring's latest boundary record. Occupancy, not need: "
                  "reclaim is lazy, so a ring that never had to wait keeps everything."))
_RESOURCE_NAMES = {res: tuple(f"ringtrace_ring_{res}_{kind}{_UNIT[res]}" for kind, _ in _PER_RESOURCE)
                   for res in RESOURCES}
_WEDGED = ("site", "depth", "ring")

RUN_FAMILIES: tuple[tuple[str, str, tuple[str, ...]], ...] = (
    # (name, help, labels after run/rank/dispatch) of every per-run gauge, in exposition order
    *((name, doc.format(_WHAT[res]), ("ring",))
      for res in RESOURCES for name, (_, doc) in zip(_RESOURCE_NAMES[res], _PER_RESOURCE, strict=True)),
    ("ringtrace_ring_occupancy_ratio", "Occupied / usable capacity of a ring resource at the ring's latest boundary "
     "record (0-1; a task window of N holds N - 1 tasks). Occupancy, not need: near 1 while records keep coming "
     "the ring streams and the allocator is doing its job; near 1 in a run that stopped making progress it is "
     "about to wedge.", ("ring", "resource")),
    ("ringtrace_ring_need_ratio", "The need the run's records prove so far (ringtrace.analysis.need: what one open "
     "scope's tasks held at once, or one task's block) / capacity, task window and heap only; absent where the "
     "records prove nothing (the dep pool's count is timing).", ("ring", "resource")),
    ("ringtrace_ring_scopes", "Paired scopes that ended on this ring.", ("ring",)),
    ("ringtrace_tensormap_capacity", "Entries of the global tensormap.", ()),
    ("ringtrace_tensormap_high_water", "Peak tensormap entries at any boundary record.", ()),
    ("ringtrace_tensormap_live", "Tensormap entries at the latest boundary record.", ()),
    ("ringtrace_run_fatal", "1 when the run latched a fatal (metadata \"fatal\": true).", ()),
    ("ringtrace_run_dropped_records", "Records the collector dropped (peaks are lower bounds).", ()),
    ("ringtrace_run_complete", "1 when every record the device attempted, less dropped, was read.", ()),
    ("ringtrace_run_scopes", "Paired scopes read so far.", ()),
    ("ringtrace_run_records", "Boundary records read so far.", ()),
    ("ringtrace_run_finished", "1 once the run ended (complete, idle timeout, rewritten, ...).", ()),
    ("ringtrace_run_open_scopes", "Scopes open after the latest record (the wedged ones once finished).", ()),
    ("ringtrace_open_innermost_scope_info", "While a run is open: its innermost scope open after the latest record "
     "(where the orchestrator is submitting; ring = the ring it submits to); always 1.", _WEDGED),
    ("ringtrace_wedged_scopes", "Scopes that never closed in a finished run (0 while it runs).", ()),
    ("ringtrace_wedged_scope_info", "One series per scope left open by a finished run; always 1.", _WEDGED),
    ("ringtrace_wedged_innermost_scope_info", "Where a finished run wedged: its innermost open scope; always 1.",
     _WEDGED),
    ("ringtrace_run_last_update_timestamp_seconds", "When ringtrace last read data of the run.", ()),
    ("ringtrace_run_last_record_timestamp_seconds", "When ringtrace last read a new record of the run (when it "
     "was first seen, before any): time() minus this is how long the run has made no progress.", ()),
    ("ringtrace_run_info", "The run's file: path, program, schema version, finish reason; always 1.",
     ("path", "program", "version", "reason")),
    ("ringtrace_run_verdict", "The one verdict on a finished run (ringtrace.stages.verdict, as summary, check, "
     "OTLP and Perfetto say it): kind, severity (ok, info, warning, error; check fails on error) and its text; "
     "always 1.", ("kind", "severity", "text")),
    ("ringtrace_ring_recommended_capacity", "Capacity `ringtrace advise` recommends for a ring resource from a "
     "finished run (absent where only a measurement run can tell).", ("ring", "resource")),
    ("ringtrace_ring_measure_next_capacity", "Capacity for the next measurement run where the records cannot "
     "size the ring yet (oversized or wedged runs).", ("ring", "resource")),
    ("ringtrace_run_failed", "1 when the run's host log reports a failure: the code it latched (orch_error_code, "
     "else sched_error_code, else the scheduler's fatal code; unknown when it names none), its name (error) and "
     "the ring its deadlock report names (empty when it names none).", ("code", "error", "ring")),
)
_LABEL_NAMES = {name: (*RUN_LABELS, *extra) for name, _, extra in RUN_FAMILIES}


@dataclass(frozen=True, slots=True)
class RunView:
    """One exposed run, copied under the sink's lock; ``final`` is None while the run is open."""

    labels: tuple[str, str, str]  # run, rank, dispatch as valid UTF-8
    source: Source
    summary: RunSummary
    updated_at: float
    final: RunFinished | None
    record_at: float = 0.0  # when a new record was last read (when the run was first seen, before any)


@dataclass(slots=True)
class _RunState:
    source: Source
    live: RunSummary  # the latest summary: RunProgress's, then RunFinished's
    updated_at: float
    final: RunFinished | None = None
    lines: list[bytes] | None = None  # a finished run's sample lines, one bytes per run family
    record_at: float = 0.0  # when the record count last grew (set at creation)

    def view(self) -> RunView:
        lab = self.source.labels
        return RunView((utf8(lab.run), utf8(lab.rank), utf8(lab.dispatch)), self.source, self.live,
                       self.updated_at, self.final, self.record_at)

    def take(self, summary: RunSummary, now: float) -> None:
        """``summary`` is the run's latest: a progress of its records moves :attr:`record_at`."""
        if summary.records > self.live.records:
            self.record_at = now
        self.live = summary
        self.updated_at = now


def _sized(advice: RunAdvice | None) -> RunAdvice | None:
    """Only the capacities the gauges show (the reasons' texts stay with the events and the summary)."""
    if advice is None:
        return None
    return RunAdvice(tuple(Advice(a.ring, a.resource, None, None, None, None, a.recommended, a.basis, "",
                                  a.measure_next) for a in advice.advice
                           if a.recommended is not None or a.measure_next is not None))


@dataclass(slots=True)
class _SelfCounts:
    records: int = 0
    parse_errors: dict[str, int] = field(default_factory=dict)
    started: int = 0
    finished: dict[str, int] = field(default_factory=dict)
    expired: int = 0
    evicted: int = 0
    files_watched: int | None = None


class _Collector:
    """prometheus_client's collector protocol over a function giving families."""

    def __init__(self, collect: Callable[[], Iterable[Metric]]) -> None:
        self.collect = collect


def _key(source: Source) -> str:
    """A run's place in the sink: its path (a new generation replaces the old run), or for a run known
    from its host log alone (no path) its labels."""
    return source.path or f"\0{source.name}"


class PrometheusSink(Sink):
    """A sink keeping live per-run state, exposed on its own :attr:`registry` at scrape time.

    ``sink_errors`` returns failures per sink (``FanOut.errors``), ``reader`` the reader's gauges
    (``files_watched``, ``read_errors``, ``in_flight_bytes``); both are read at scrape time.
    ``clock`` gives wall-clock seconds (the TTL and ``last_update_timestamp``).
    """

    name = "prometheus"
    wants = WANT_SUMMARIES

    def __init__(self, series_ttl: float = 900.0, clock: Callable[[], float] = time.time,
                 sink_errors: Callable[[], Mapping[str, int]] | None = None, max_runs: int = 10_000,
                 reader: Callable[[], Mapping[str, int]] | None = None) -> None:
        self.registry = CollectorRegistry(auto_describe=True)
        self.series_ttl = series_ttl
        self.max_runs = max_runs
        self._clock = clock
        self._sink_errors = sink_errors
        self._reader = reader
        self._lock = threading.Lock()
        self._runs: dict[str, _RunState] = {}
        self._finished: deque[_RunState] = deque()  # finish order (their updated_at is the finish time)
        self._self = _SelfCounts()
        self._build = [ringtrace_version(), platform.python_version()]
        self.registry.register(self)
        self._headers = {om: _family_heads(encode(_Collector(lambda: run_families([]))))
                         for om, encode in ((False, text_latest), (True, openmetrics_latest))}
        self._own = CollectorRegistry(auto_describe=False)  # what render appends: own families, then registered
        self._own.register(_Collector(self.self_families))

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
        pass

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
            st = self._runs[_key(source)] = _RunState(source, empty_summary(meta), now, record_at=now)
            self._bound()
        return st

    def _started(self, ev: RunStarted, now: float) -> None:
        st = self._runs.get(_key(ev.source))
        if st is not None and st.source.generation == ev.source.generation and st.final is None:
            return  # a repeated start of the same run: keep the figures
        if st is not None and st.source.generation <= ev.source.generation:
            del self._runs[_key(ev.source)]  # a new run of the same path replaces the old one
        self._self.started += 1
        self._state(ev.source, now, ev.meta)

    def _progress(self, ev: RunProgress, now: float) -> None:
        errors = self._self.parse_errors
        for p in ev.problems:
            if p.severity == "error":
                errors[p.reason] = errors.get(p.reason, 0) + 1
        st = self._state(ev.source, now)
        if st is None or st.final is not None:
            return
        if ev.summary is not None:
            self._self.records += ev.summary.records - st.live.records
            st.take(ev.summary, now)
        st.updated_at = now

    def _finish(self, ev: RunFinished, now: float) -> None:
        self._self.finished[ev.reason] = self._self.finished.get(ev.reason, 0) + 1
        st = self._state(ev.source, now, ev.summary.meta)
        if st is None or st.final is not None:
            return
        self._self.records += ev.summary.records - st.live.records
        # kept until the series expire: only what the families read (no findings' texts, no problems)
        st.final = msgspec.structs.replace(ev, findings=(), problems=(), wedge_causes=(), advice=_sized(ev.advice))
        st.take(ev.summary, now)
        self._finished.append(st)

    def _drop_oldest_finished(self) -> int:
        """Forget the run that finished first (unless it was replaced already); how many runs went."""
        st = self._finished.popleft()
        if self._runs.get(_key(st.source)) is not st:
            return 0
        del self._runs[_key(st.source)]
        return 1

    def _expire(self, now: float) -> None:
        """Drop finished runs older than the TTL (finish order is clock order)."""
        while self._finished and self._finished[0].updated_at + self.series_ttl <= now:
            self._self.expired += self._drop_oldest_finished()

    def _bound(self) -> None:
        """Keep at most ``max_runs``: the oldest finished first, then the least recently updated."""
        runs = self._runs
        while len(runs) > self.max_runs and self._finished:
            self._self.evicted += self._drop_oldest_finished()
        if len(runs) > self.max_runs:
            for path, _ in sorted(runs.items(), key=lambda kv: kv[1].updated_at)[: len(runs) - self.max_runs]:
                del runs[path]
                self._self.evicted += 1

    def _chosen(self) -> list[_RunState]:
        """The exposed runs, one per label set (the most recently updated), sorted by labels."""
        self._expire(self._clock())
        chosen: dict[tuple[str, str, str], _RunState] = {}
        for st in self._runs.values():
            lab = st.source.labels
            key = (lab.run, lab.rank, lab.dispatch)
            other = chosen.get(key)
            if other is None or st.updated_at >= other.updated_at:
                chosen[key] = st
        return [chosen[k] for k in sorted(chosen)]

    # -- scrapes ------------------------------------------------------------------------------

    def describe(self) -> Iterable[Metric]:
        return []  # unchecked collector: the families depend on the live state

    def collect(self) -> Iterator[Metric]:
        """Every family, collected afresh (the reference :meth:`render` is checked against)."""
        with self._lock:
            views = [st.view() for st in self._chosen()]
        yield from run_families(views)
        yield from self.self_families()

    def self_families(self) -> Iterator[Metric]:
        """The exporter's own families (counters, the reader's gauges, build info)."""
        with self._lock:
            c = self._self
            c = _SelfCounts(c.records, dict(c.parse_errors), c.started, dict(c.finished), c.expired, c.evicted,
                            c.files_watched)
            tracked = len(self._runs)
        reader = _poll(self._reader)
        watched = reader.get("files_watched", c.files_watched)
        yield CounterMetricFamily("ringtrace_records_read", "Scope-boundary records read from all files.",
                                  value=c.records)
        yield _counted("ringtrace_parse_errors", "Input lines that could not be read, by reason.", "reason",
                       c.parse_errors)
        if watched is not None:
            yield GaugeMetricFamily("ringtrace_files_watched", "scope_stats files followed right now.", value=watched)
        if reader:
            yield CounterMetricFamily("ringtrace_read_errors", "Looks at a file that failed (permissions, I/O "
                                      "errors, not a regular file); each file's first of a kind is logged.",
                                      value=reader.get("read_errors", 0))
            yield GaugeMetricFamily("ringtrace_in_flight_bytes", "Input bytes read whose events the sinks have "
                                    "not taken yet (bounded: the reader waits).",
                                    value=reader.get("in_flight_bytes", 0))
        yield _counted("ringtrace_sink_errors", "Failures of an output sink (it was skipped), by sink.", "sink",
                       _poll(self._sink_errors))
        yield CounterMetricFamily("ringtrace_runs_started", "Runs (source files or rewrites) seen to start.",
                                  value=c.started)
        yield _counted("ringtrace_runs_finished", "Runs finished, by reason.", "reason", c.finished)
        yield CounterMetricFamily("ringtrace_runs_expired", "Finished runs whose series were dropped after the TTL.",
                                  value=c.expired)
        yield CounterMetricFamily("ringtrace_runs_evicted",
                                  "Runs dropped early because more than the run limit were tracked.", value=c.evicted)
        yield GaugeMetricFamily("ringtrace_runs_tracked", "Runs whose series are exposed or held right now.",
                                value=tracked)
        info = GaugeMetricFamily("ringtrace_build_info", "ringtrace build: version and Python version (always 1).",
                                 labels=["version", "python_version"])
        info.add_metric(self._build, 1)
        yield info

    def render(self, accept: str) -> tuple[bytes, str]:
        """The exposition for a scrape whose ``Accept`` header is ``accept``: (body, content type).

        Called by the HTTP server off the event loop; the lock is held only to pick the runs.
        """
        _, content_type = choose_encoder(accept)
        om = content_type.startswith(OPENMETRICS.split(";")[0])
        with self._lock:
            picked = [(st, st.lines or st.view()) for st in self._chosen()]
        rows: list[list[bytes]] = []
        for st, got in picked:
            if isinstance(got, RunView):
                view, got = got, _sample_lines(got)
                if view.final is not None:
                    st.lines = got  # benign race: two scrapes would store the same bytes
            rows.append(got)
        out = []
        for i, head in enumerate(self._headers[om]):
            out.append(head)
            out.extend(row[i] for row in rows)
        out.append(openmetrics_latest(self._own) if om else text_latest(self._own))
        return b"".join(out), content_type


def _poll(read: Callable[[], Mapping[str, int]] | None) -> dict[str, int]:
    """``read()``, or {} without one or when it fails (a scrape must not fail while the app shuts down)."""
    try:
        return dict(read()) if read is not None else {}
    except Exception:
        return {}


def _counted(name: str, doc: str, label: str, counts: Mapping[str, int]) -> CounterMetricFamily:
    fam = CounterMetricFamily(name, doc, labels=[label])
    for key, n in sorted(counts.items()):
        fam.add_metric([key], n)
    return fam


def _family_heads(body: bytes) -> list[bytes]:
    """The ``# HELP``/``# TYPE`` lines of an exposition of empty families, one bytes per family."""
    chunks: list[bytes] = []
    for line in body.splitlines(keepends=True):
        if line.startswith(b"# HELP ") or not chunks:
            chunks.append(line)
        elif line != b"# EOF\n":
            chunks[-1] += line
    return chunks


def _samples(v: RunView) -> Iterator[tuple[str, list[str], float]]:
    """(family name, label values, value) of each sample of one run; a family's samples in order."""
    lab, s, fin = list(v.labels), v.summary, v.final
    for p in s.peaks:
        rl = [*lab, str(p.ring)]
        capacity, high_water, live = _RESOURCE_NAMES[p.resource]
        if p.capacity is not None:
            yield capacity, rl, p.capacity
        yield live, rl, p.live
        if not p.scopes:
            continue  # no paired scope on the ring: peaks are not meaningful
        yield high_water, rl, p.high_water
    for p in s.peaks:  # the ratios, by resource and ring (capacity known)
        if p.capacity is not None:
            yield "ringtrace_ring_occupancy_ratio", [*lab, str(p.ring), p.resource], p.live / usable(p.resource,
                                                                                                   p.capacity)
    for p in s.peaks:
        need = proven_need(p, s).value if p.capacity is not None else 0
        if need:
            yield "ringtrace_ring_need_ratio", [*lab, str(p.ring), p.resource], need / (p.capacity or 1)
    ring_scopes: dict[int, int] = {}
    for p in s.peaks:
        ring_scopes.setdefault(p.ring, p.scopes)
    for ring, n in sorted(ring_scopes.items()):
        yield "ringtrace_ring_scopes", [*lab, str(ring)], n
    tm, meta = s.tensormap, s.meta
    if tm.capacity is not None:
        yield "ringtrace_tensormap_capacity", lab, tm.capacity
    yield "ringtrace_tensormap_high_water", lab, tm.peak
    yield "ringtrace_tensormap_live", lab, tm.live
    if meta is not None:
        yield "ringtrace_run_fatal", lab, meta.fatal
        yield "ringtrace_run_dropped_records", lab, meta.dropped
    yield "ringtrace_run_complete", lab, s.complete
    yield "ringtrace_run_scopes", lab, s.scopes
    yield "ringtrace_run_records", lab, s.records
    yield "ringtrace_run_finished", lab, fin is not None
    yield "ringtrace_run_open_scopes", lab, len(s.wedged) if fin is not None else s.open_scopes
    if fin is None and s.open:
        o = s.open[-1]
        yield "ringtrace_open_innermost_scope_info", [*lab, o.site, str(o.depth), str(o.ring)], 1
    yield "ringtrace_wedged_scopes", lab, len(s.wedged)
    for w in s.wedged:
        yield "ringtrace_wedged_scope_info", [*lab, w.site, str(w.depth), str(w.ring)], 1
    if s.wedged:
        w = s.wedged[-1]
        yield "ringtrace_wedged_innermost_scope_info", [*lab, w.site, str(w.depth), str(w.ring)], 1
    yield "ringtrace_run_last_update_timestamp_seconds", lab, v.updated_at
    yield "ringtrace_run_last_record_timestamp_seconds", lab, v.record_at
    yield "ringtrace_run_info", [*lab, v.source.display_path, utf8(v.source.labels.program),
                                 str(meta.version) if meta else "", fin.reason if fin else ""], 1
    if fin is not None:
        verdict = fin.verdict
        yield "ringtrace_run_verdict", [*lab, verdict.kind, verdict.severity, utf8(verdict.text)], 1
    for a in fin.advice.advice if fin is not None and fin.advice is not None else ():
        if a.recommended is not None:
            yield "ringtrace_ring_recommended_capacity", [*lab, str(a.ring), a.resource], a.recommended
        elif a.measure_next is not None:
            yield "ringtrace_ring_measure_next_capacity", [*lab, str(a.ring), a.resource], a.measure_next
    log = fin.host_log if fin is not None else None
    if log is not None and log.failed:  # the latched code: the orchestrator's, else the scheduler's
        code, name = log.failure_code, log.failure_name
        where = "" if log.ring is None else str(log.ring)  # the deadlock report's ring ("" where it names none)
        yield "ringtrace_run_failed", [*lab, "unknown" if code is None else str(code), name or "", where], 1


def run_families(views: Iterable[RunView]) -> list[Metric]:
    """Every per-run gauge family for ``views``, in :data:`RUN_FAMILIES` order (pure; empty families too)."""
    fams = {name: GaugeMetricFamily(name, doc, labels=[*RUN_LABELS, *extra]) for name, doc, extra in RUN_FAMILIES}
    for v in sorted(views, key=lambda v: v.labels):
        for name, labels, value in _samples(v):
            fams[name].add_metric(labels, value)
    return list(fams.values())


def _escape(value: str) -> str:
    return value.replace("\\", r"\\").replace("\n", r"\n").replace('"', r'\"')


def _sample_lines(view: RunView) -> list[bytes]:
    """One run's sample lines, one bytes per run family: the text prometheus_client writes for them
    (the same in both formats: gauges without timestamps are written alike)."""
    lines: dict[str, list[str]] = {name: [] for name in _LABEL_NAMES}
    for name, values, value in _samples(view):
        labels = ",".join(f'{k}="{_escape(v)}"' for k, v in sorted(zip(_LABEL_NAMES[name], values, strict=True)))
        lines[name].append(f"{name}{{{labels}}} {floatToGoString(value)}\n")  # type: ignore[no-untyped-call]
    return ["".join(rows).encode() for rows in lines.values()]


__all__ = ["RUN_FAMILIES", "PrometheusSink", "RunView", "run_families"]
