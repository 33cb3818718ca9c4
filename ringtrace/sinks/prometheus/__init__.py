"""The Prometheus sink: live per-run state, read at scrape time by a custom collector.

Threads: :meth:`PrometheusSink.receive` runs on the app's sink thread, :meth:`collect` on the
HTTP server's threads (via the registry).  One lock guards the state; ``receive`` only does
small arithmetic under it and never blocks on I/O, and ``collect`` copies what it needs under
the lock and builds the exposition outside it.

State per source path (the latest generation wins):

* while a run is open, the latest :attr:`RunProgress.summary` (the pairer's live figures);
* at :class:`RunFinished` it is replaced by the final ``summary`` (with the wedged scopes) and the run's
  series stay for ``series_ttl`` seconds of the injected ``clock``, then disappear.  At most
  ``max_runs`` runs are kept (the oldest finished runs go first), so memory is bounded.

Two sources whose paths give the same ``run``/``rank``/``dispatch`` labels would make
duplicate series; only the most recently updated of them is exposed.

Scrapes (:meth:`PrometheusSink.render`) cost what the open runs cost: a finished run's series
never change until they expire, so its sample lines are formatted once (at its first scrape)
and reused; only open runs are collected per scrape.  The output is byte-identical to a fresh
collection through :attr:`registry` (prometheus_client's own encoders), in both formats.
Collectors added with :meth:`PrometheusSink.register` (the OTLP sink's counters) follow the sink's
own families in both.
Label values from paths that are not UTF-8 are shown with U+FFFD, never an encoding error.
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

from ringtrace.records import (
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

RUN_LABELS = ("run", "rank", "dispatch")
RING_LABELS = (*RUN_LABELS, "ring")
_UNIT = {"task_window": "", "heap": "_bytes", "dep_pool": ""}
_WHAT = {"task_window": "task-window slots", "heap": "heap bytes", "dep_pool": "dep-pool entries"}


def _version() -> str:
    try:
        from importlib.metadata import version

        return version("ringtrace")
    except Exception:  # not installed (running from a source tree)
        return "unknown"


@dataclass(slots=True)
class _RunState:
    source: Source
    live: RunSummary  # the latest RunProgress.summary (an empty one until records arrive)
    updated_at: float
    final: RunFinished | None = None
    lines: list[bytes] | None = None  # a finished run's sample lines, one bytes per run family

    def view(self) -> RunView:
        lab = self.source.labels
        key = (utf8(lab.run), utf8(lab.rank), utf8(lab.dispatch))
        if self.final is not None:
            s = self.final.summary
            return RunView(key, self.source, s, len(s.wedged), self.updated_at, self.final.reason, self.final)
        return RunView(key, self.source, self.live, self.live.open_scopes, self.updated_at, "")


def _sized(advice: RunAdvice | None) -> RunAdvice | None:
    """Only the capacities the gauges show (the reasons' texts stay with the events and the summary)."""
    if advice is None:
        return None
    return RunAdvice(tuple(Advice(a.ring, a.resource, None, None, None, None, a.recommended, a.basis, "",
                                  a.measure_next) for a in advice.advice
                           if a.recommended is not None or a.measure_next is not None))


@dataclass(frozen=True, slots=True)
class RunView:
    """What the collector exposes for one run (a snapshot taken under the lock)."""

    labels: tuple[str, str, str]
    source: Source
    summary: RunSummary
    open_scopes: int
    updated_at: float
    reason: str  # finish reason, "" while the run is open
    final: RunFinished | None = None  # the finished run (advice, host log), None while open


@dataclass(slots=True)
class _SelfCounts:
    records: int = 0
    parse_errors: dict[str, int] = field(default_factory=dict)
    started: int = 0
    finished: dict[str, int] = field(default_factory=dict)
    expired: int = 0
    evicted: int = 0
    files_watched: int | None = None


class PrometheusSink:
    """A sink keeping live per-run state, exposed on its own :attr:`registry` at scrape time.

    ``sink_errors`` returns failures per sink (``FanOut.errors``), ``reader`` the reader's gauges
    (``files_watched``, ``read_errors``, ``in_flight_bytes``); both are read at scrape time.
    ``clock`` gives wall-clock seconds (the TTL and ``last_update_timestamp``).
    """

    name = "prometheus"
    wants = WANT_SUMMARIES

    def __init__(self, registry: CollectorRegistry | None = None, series_ttl: float = 900.0,
                 clock: Callable[[], float] = time.time,
                 sink_errors: Callable[[], Mapping[str, int]] | None = None, max_runs: int = 10_000,
                 reader: Callable[[], Mapping[str, int]] | None = None) -> None:
        self.registry = registry if registry is not None else CollectorRegistry(auto_describe=True)
        self.series_ttl = series_ttl
        self.max_runs = max_runs
        self._clock = clock
        self._sink_errors = sink_errors
        self._reader = reader
        self._lock = threading.Lock()
        self._runs: dict[str, _RunState] = {}
        self._finished: deque[tuple[float, str, _RunState]] = deque()  # finish order
        self._self = _SelfCounts()
        self._build = (_version(), platform.python_version())
        self.registry.register(self)
        self._headers = {fmt: _family_chunks(encode(_Families(run_families([]))))
                         for fmt, encode in ((False, text_latest), (True, _openmetrics_body))}
        self._own = CollectorRegistry(auto_describe=False)
        self._own.register(_Families(self, self_only=True))

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

    def flush(self) -> None:
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

    # -- state --------------------------------------------------------------------------------

    def _state(self, source: Source, now: float, meta: Meta | None = None) -> _RunState | None:
        """The state for ``source``: None for an older generation than the one tracked."""
        st = self._runs.get(source.path)
        if st is not None and st.source.generation > source.generation:
            return None
        if st is None or st.source.generation < source.generation:
            st = _RunState(source, empty_summary(meta), now)
            self._runs[source.path] = st
            self._bound()
        return st

    def _started(self, ev: RunStarted, now: float) -> None:
        st = self._runs.get(ev.source.path)
        if st is not None and st.source.generation == ev.source.generation and st.final is None:
            return  # a repeated start of the same run: keep the figures
        if st is not None and st.source.generation <= ev.source.generation:
            del self._runs[ev.source.path]  # a new run of the same path replaces the old one
        self._self.started += 1
        self._state(ev.source, now, ev.meta)

    def _progress(self, ev: RunProgress, now: float) -> None:
        counts = self._self
        for p in ev.problems:
            if p.severity == "error":
                counts.parse_errors[p.reason] = counts.parse_errors.get(p.reason, 0) + 1
        st = self._state(ev.source, now)
        if st is None or st.final is not None:
            return
        if ev.summary is not None:
            counts.records += ev.summary.records - st.live.records
            st.live = ev.summary
        st.updated_at = now

    def _finish(self, ev: RunFinished, now: float) -> None:
        self._self.finished[ev.reason] = self._self.finished.get(ev.reason, 0) + 1
        st = self._state(ev.source, now, ev.summary.meta)
        if st is None or st.final is not None:
            return
        self._self.records += ev.summary.records - st.live.records
        # kept until the series expire: only what the families read (no findings' texts, no problems)
        st.final = msgspec.structs.replace(ev, findings=(), problems=(), wedge_causes=(), advice=_sized(ev.advice))
        st.live = ev.summary
        st.updated_at = now
        self._finished.append((now, ev.source.path, st))

    def _expire(self, now: float) -> None:
        """Drop finished runs older than the TTL (finish order is clock order)."""
        fin = self._finished
        while fin and fin[0][0] + self.series_ttl <= now:
            _, path, st = fin.popleft()
            if self._runs.get(path) is st:
                del self._runs[path]
                self._self.expired += 1

    def _bound(self) -> None:
        """Keep at most ``max_runs``: the oldest finished first, then the least recently updated."""
        runs = self._runs
        while len(runs) > self.max_runs and self._finished:
            _, path, st = self._finished.popleft()
            if runs.get(path) is st:
                del runs[path]
                self._self.evicted += 1
        if len(runs) > self.max_runs:
            for path, _ in sorted(runs.items(), key=lambda kv: kv[1].updated_at)[: len(runs) - self.max_runs]:
                del runs[path]
                self._self.evicted += 1

    def _chosen(self) -> list[_RunState]:
        """The exposed runs, one per label set (the most recently updated), sorted by labels.  Under the lock."""
        self._expire(self._clock())
        chosen: dict[tuple[str, str, str], _RunState] = {}
        for st in self._runs.values():
            lab = st.source.labels
            key = (lab.run, lab.rank, lab.dispatch)
            other = chosen.get(key)
            if other is None or st.updated_at >= other.updated_at:
                chosen[key] = st
        return [chosen[k] for k in sorted(chosen)]

    def views(self) -> list[RunView]:
        """Snapshot of every exposed run (one per label set: the most recently updated)."""
        with self._lock:
            return [st.view() for st in self._chosen()]

    # -- collector ----------------------------------------------------------------------------

    def describe(self) -> Iterable[Metric]:
        return []  # unchecked collector: the families depend on the live state

    def collect(self) -> Iterator[Metric]:
        """Every family, collected afresh (the reference :meth:`render` is checked against)."""
        yield from run_families(self.views())
        yield from self.self_families()

    def self_families(self) -> Iterator[Metric]:
        """The exporter's own families (counters, files watched, build info)."""
        with self._lock:
            counts = _SelfCounts(self._self.records, dict(self._self.parse_errors), self._self.started,
                                 dict(self._self.finished), self._self.expired, self._self.evicted,
                                 self._self.files_watched)
            tracked = len(self._runs)
        yield from self._self_families(counts, tracked)

    def render(self, accept: str) -> tuple[bytes, str]:
        """The exposition for a scrape whose ``Accept`` header is ``accept``: (body, content type).

        Called by the HTTP server off the event loop.  Finished runs' lines come from their cache;
        the lock is held only to pick the runs, never while formatting.
        """
        _, content_type = choose_encoder(accept)
        om = content_type.startswith(OPENMETRICS.split(";")[0])
        with self._lock:
            states = self._chosen()
            parts = [(st, st.lines) for st in states]
        rows: list[list[bytes]] = []
        for st, lines in parts:
            if lines is None:
                lines = _sample_lines(st.view())
                if st.final is not None:
                    st.lines = lines  # benign race: two scrapes would store the same bytes
            rows.append(lines)
        out = []
        for i, head in enumerate(self._headers[om]):
            out.append(head)
            out.extend(row[i] for row in rows)
        own = (_openmetrics_body if om else text_latest)(self._own)
        out.append(own)
        if om:
            out.append(b"# EOF\n")
        return b"".join(out), content_type

    def _self_families(self, c: _SelfCounts, tracked: int) -> Iterator[Metric]:
        yield CounterMetricFamily("ringtrace_records_read", "Scope-boundary records read from all files.",
                                  value=c.records)
        pe = CounterMetricFamily("ringtrace_parse_errors", "Input lines that could not be read, by reason.",
                                 labels=["reason"])
        for reason, n in sorted(c.parse_errors.items()):
            pe.add_metric([reason], n)
        yield pe
        reader: Mapping[str, int] = {}
        if self._reader is not None:
            try:
                reader = dict(self._reader())
            except Exception:  # a scrape must not fail because the app is shutting down
                reader = {}
        watched = reader.get("files_watched", c.files_watched)
        if watched is not None:
            yield GaugeMetricFamily("ringtrace_files_watched", "scope_stats files followed right now.",
                                    value=watched)
        if reader:
            yield CounterMetricFamily("ringtrace_read_errors", "Looks at a file that failed (permissions, I/O "
                                      "errors, not a regular file); each file's first of a kind is logged.",
                                      value=reader.get("read_errors", 0))
            yield GaugeMetricFamily("ringtrace_in_flight_bytes", "Input bytes read whose events the sinks have "
                                    "not taken yet (bounded: the reader waits).",
                                    value=reader.get("in_flight_bytes", 0))
        se = CounterMetricFamily("ringtrace_sink_errors", "Failures of an output sink (it was skipped), by sink.",
                                 labels=["sink"])
        if self._sink_errors is not None:
            try:
                errors = dict(self._sink_errors())
            except Exception:  # a scrape must not fail because the app is shutting down
                errors = {}
            for sink, n in sorted(errors.items()):
                se.add_metric([sink], n)
        yield se
        yield CounterMetricFamily("ringtrace_runs_started", "Runs (source files or rewrites) seen to start.",
                                  value=c.started)
        rf = CounterMetricFamily("ringtrace_runs_finished", "Runs finished, by reason.", labels=["reason"])
        for reason, n in sorted(c.finished.items()):
            rf.add_metric([reason], n)
        yield rf
        yield CounterMetricFamily("ringtrace_runs_expired", "Finished runs whose series were dropped after the TTL.",
                                  value=c.expired)
        yield CounterMetricFamily("ringtrace_runs_evicted",
                                  "Runs dropped early because more than the run limit were tracked.",
                                  value=c.evicted)
        yield GaugeMetricFamily("ringtrace_runs_tracked", "Runs whose series are exposed or held right now.",
                                value=tracked)
        bi = GaugeMetricFamily("ringtrace_build_info", "ringtrace build: version and Python version (always 1).",
                               labels=["version", "python_version"])
        bi.add_metric(list(self._build), 1)
        yield bi


class _Families:
    """A collector over fixed families, or over one sink's own families (for prometheus_client's encoders)."""

    def __init__(self, source: Iterable[Metric] | PrometheusSink, self_only: bool = False) -> None:
        self.source = source
        self.self_only = self_only

    def collect(self) -> Iterable[Metric]:
        if isinstance(self.source, PrometheusSink):
            return self.source.self_families()
        return self.source


def _openmetrics_body(collector: Collector | CollectorRegistry) -> bytes:
    """OpenMetrics without its closing ``# EOF`` (the caller appends it once)."""
    body: bytes = openmetrics_latest(collector)  # type: ignore[no-untyped-call]
    return body[: -len(b"# EOF\n")] if body.endswith(b"# EOF\n") else body


def _family_chunks(body: bytes) -> list[bytes]:
    """Split an exposition into one chunk per family (each starts with its ``# HELP`` line)."""
    chunks: list[bytes] = []
    for line in body.splitlines(keepends=True):
        if line.startswith(b"# HELP ") or not chunks:
            chunks.append(line)
        else:
            chunks[-1] += line
    return chunks


_go_float: Callable[[float], str] = floatToGoString  # prometheus_client's own number format


def _escape(value: str) -> str:
    return value.replace("\\", r"\\").replace("\n", r"\n").replace('"', r'\"')


def _sample_lines(view: RunView) -> list[bytes]:
    """One run's sample lines, one bytes per family of :func:`run_families` (the same text in
    both formats: gauges without timestamps are written alike)."""
    out = []
    for fam in run_families([view]):
        lines = []
        for smp in fam.samples:
            labels = ",".join(f'{k}="{_escape(v)}"' for k, v in sorted(smp.labels.items()))
            value = _go_float(smp.value)
            lines.append(f"{smp.name}{{{labels}}} {value}\n" if labels else f"{smp.name} {value}\n")
        out.append("".join(lines).encode())
    return out


def _b(x: bool) -> float:
    return 1.0 if x else 0.0


def run_families(views: Iterable[RunView]) -> list[Metric]:
    """Every per-run and per-ring family for ``views`` (pure; families are yielded even when empty)."""
    fams: dict[str, GaugeMetricFamily] = {}

    def fam(name: str, doc: str, extra: tuple[str, ...] = (), labels: tuple[str, ...] = RING_LABELS
            ) -> GaugeMetricFamily:
        f = fams[name] = GaugeMetricFamily(name, doc, labels=[*labels, *extra])
        return f

    per_res: dict[tuple[str, str], GaugeMetricFamily] = {}
    for res in RESOURCES:
        what, unit = _WHAT[res], _UNIT[res]
        per_res[res, "capacity"] = fam(f"ringtrace_ring_{res}_capacity{unit}",
                                       f"Capacity of the ring's {what} (the file's metadata).")
        per_res[res, "high_water"] = fam(f"ringtrace_ring_{res}_high_water{unit}",
                                         f"Peak scope high water of the ring's {what} (end.head - begin.tail).")
        per_res[res, "live"] = fam(f"ringtrace_ring_{res}_live{unit}",
                                   f"Occupied {what} (head - tail) at the ring's latest boundary record.")
    util = fam("ringtrace_ring_utilization_ratio", "Peak high water / capacity of a ring resource (may exceed 1 "
               "when a scope streams through reclaim).", ("resource",))
    pinned = fam("ringtrace_ring_pinned_ratio", "Largest single-scope allocation / capacity: held until that scope "
                 "exits; at 1 the ring deadlocks.", ("resource",))
    ring_scopes = fam("ringtrace_ring_scopes", "Paired scopes that ended on this ring.")
    site = fam("ringtrace_ring_peak_site_info", "The scope site behind a ring ratio (ratio=utilization|pinned); "
               "always 1.", ("resource", "ratio", "site"))
    tm_cap = fam("ringtrace_tensormap_capacity", "Entries of the global tensormap.", labels=RUN_LABELS)
    tm_hw = fam("ringtrace_tensormap_high_water", "Peak tensormap entries at any boundary record.",
                labels=RUN_LABELS)
    tm_live = fam("ringtrace_tensormap_live", "Tensormap entries at the latest boundary record.", labels=RUN_LABELS)
    fatal = fam("ringtrace_run_fatal", "1 when the run latched a fatal (metadata \"fatal\": true).",
                labels=RUN_LABELS)
    dropped = fam("ringtrace_run_dropped_records", "Records the collector dropped (peaks are lower bounds).",
                  labels=RUN_LABELS)
    complete = fam("ringtrace_run_complete", "1 when every record the device attempted, less dropped, was read.",
                   labels=RUN_LABELS)
    scopes = fam("ringtrace_run_scopes", "Paired scopes read so far.", labels=RUN_LABELS)
    records = fam("ringtrace_run_records", "Boundary records read so far.", labels=RUN_LABELS)
    finished = fam("ringtrace_run_finished", "1 once the run ended (complete, idle timeout, rewritten, ...).",
                   labels=RUN_LABELS)
    open_sc = fam("ringtrace_run_open_scopes", "Scopes open after the latest record (the wedged ones once finished).",
                  labels=RUN_LABELS)
    wedged = fam("ringtrace_wedged_scopes", "Scopes that never closed in a finished run (0 while it runs).",
                 labels=RUN_LABELS)
    wedged_info = fam("ringtrace_wedged_scope_info", "One series per scope left open by a finished run; always 1.",
                      ("site", "depth", "ring"), RUN_LABELS)
    inner_info = fam("ringtrace_wedged_innermost_scope_info", "Where a finished run wedged: its innermost open "
                     "scope; always 1.", ("site", "depth", "ring"), RUN_LABELS)
    updated = fam("ringtrace_run_last_update_timestamp_seconds", "When ringtrace last read data of the run.",
                  labels=RUN_LABELS)
    info = fam("ringtrace_run_info", "The run's file: path, program, schema version, finish reason; always 1.",
               ("path", "program", "version", "reason"), RUN_LABELS)
    recommended = fam("ringtrace_ring_recommended_capacity", "Capacity `ringtrace advise` recommends for a ring "
                      "resource from a finished run (absent where only a measurement run can tell).", ("resource",))
    measure_next = fam("ringtrace_ring_measure_next_capacity", "Capacity for the next measurement run where the "
                       "records cannot size the ring yet (oversized or wedged runs).", ("resource",))
    failed = fam("ringtrace_run_failed", "1 when the run's host log reports a failure: its orch_error_code (or the "
                 "scheduler's fatal code) and its name (error).", ("code", "error"), RUN_LABELS)

    for v in sorted(views, key=lambda v: v.labels):
        lab = list(v.labels)
        s = v.summary
        for p in s.peaks:
            rl = [*lab, str(p.ring)]
            if p.capacity is not None:
                per_res[p.resource, "capacity"].add_metric(rl, p.capacity)
            per_res[p.resource, "live"].add_metric(rl, p.live)
            if not p.scopes:
                continue  # no paired scope on the ring: peaks are not meaningful
            per_res[p.resource, "high_water"].add_metric(rl, p.high_water)
            if p.capacity is not None:
                util.add_metric([*rl, p.resource], p.high_water / p.capacity)
                pinned.add_metric([*rl, p.resource], p.alloc / p.capacity)
                site.add_metric([*rl, p.resource, "utilization", p.high_water_site], 1)
                site.add_metric([*rl, p.resource, "pinned", p.alloc_site], 1)
        for ring_no in sorted({p.ring for p in s.peaks}):
            ring_scopes.add_metric([*lab, str(ring_no)], next(p.scopes for p in s.peaks if p.ring == ring_no))
        tm = s.tensormap
        if tm.capacity is not None:
            tm_cap.add_metric(lab, tm.capacity)
        tm_hw.add_metric(lab, tm.peak)
        tm_live.add_metric(lab, tm.live)
        if s.meta is not None:
            fatal.add_metric(lab, _b(s.meta.fatal))
            dropped.add_metric(lab, s.meta.dropped)
        complete.add_metric(lab, _b(s.complete))
        scopes.add_metric(lab, s.scopes)
        records.add_metric(lab, s.records)
        finished.add_metric(lab, _b(bool(v.reason)))
        open_sc.add_metric(lab, v.open_scopes)
        wedged.add_metric(lab, len(s.wedged))
        for w in s.wedged:
            wedged_info.add_metric([*lab, w.site, str(w.depth), str(w.ring)], 1)
        if s.wedged:
            w = s.wedged[-1]
            inner_info.add_metric([*lab, w.site, str(w.depth), str(w.ring)], 1)
        updated.add_metric(lab, v.updated_at)
        fin = v.final
        if fin is not None and fin.advice is not None:
            for a in fin.advice.advice:
                if a.recommended is not None:
                    recommended.add_metric([*lab, str(a.ring), a.resource], a.recommended)
                elif a.measure_next is not None:
                    measure_next.add_metric([*lab, str(a.ring), a.resource], a.measure_next)
        log = fin.host_log if fin is not None else None
        if log is not None:
            code = log.orch_error_code if log.orch_error_code is not None else log.fatal_code
            if code is not None:
                failed.add_metric([*lab, str(code), log.error_name or ""], 1)
        info.add_metric([*lab, v.source.display_path, utf8(v.source.labels.program),
                         str(s.meta.version) if s.meta else "", v.reason], 1)
    return list(fams.values())


__all__ = ["PrometheusSink", "RunView", "run_families"]
