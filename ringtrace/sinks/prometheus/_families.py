"""The per-run families: what one run exposes, as samples and as exposition lines.  Pure.

A series must earn its cost (issue 35): a finished rank file of an L3 run exposes about a quarter of the 82
series it used to.  Rings and resources a run never used (no allocation in its records: high water and
occupancy 0) expose nothing; constant facts (the capacities) are one info series per run
(``ringtrace_run_sizes_info``); occupancy is exposed while a run is open (the paging alert's input), and
advice (recommended and measure-next capacities) only when asked for (``--metrics-advice``).  The rest stays
where it is cheap: the events file, ``summary``, the report and the Perfetto trace.

:data:`RUN_FAMILIES` lists every per-run family in exposition order; :func:`samples` gives one run's
samples; :func:`run_lines` formats them as prometheus_client's encoders write them (the same in the text and
OpenMetrics formats: gauges without timestamps are written alike), one bytes per family.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from dataclasses import dataclass

from prometheus_client.core import GaugeMetricFamily, Metric
from prometheus_client.utils import floatToGoString

from ringtrace.model.records import RESOURCES, Peak, RunFinished, RunSummary, Source, utf8
from ringtrace.model.runtime import TABLE as RESOURCE_TABLE
from ringtrace.model.runtime import usable
from ringtrace.stages.need import proven_need

RUN_LABELS = ("run", "rank", "dispatch")
_SCOPE = ("site", "depth", "ring")
_RING = ("ring", "resource")
SIZES = (*(f"{r.name}{r.metric_suffix}" for r in RESOURCE_TABLE), "tensormap")
"""``ringtrace_run_sizes_info``'s labels: one per resource (the heap's in bytes), then the tensormap."""
_SIZES_HELP = ", ".join(f"{label}" + (f": empty in a version {r.since_version - 1} file" if r.optional else "")
                        for label, r in zip(SIZES, RESOURCE_TABLE, strict=False))
"""``task_window, heap_bytes, dep_pool: empty in a version 4 file``."""
_PROVEN = [r.words for r in RESOURCE_TABLE if not r.batch]
_PROVEN_HELP = " and ".join((", ".join(_PROVEN[:-1]), _PROVEN[-1])) if len(_PROVEN) > 1 else _PROVEN[0]
"""``task window and heap``: the resources whose need the records prove (``Resource.batch``)."""
_TIMING_HELP = "; ".join(f"the {r.words}'s count is timing" for r in RESOURCE_TABLE if r.batch)

RUN_FAMILIES: tuple[tuple[str, str, tuple[str, ...]], ...] = (
    # (name, help, labels after run/rank/dispatch) of every per-run gauge, in exposition order
    ("ringtrace_run_info", "The run's file: path, program, schema version, finish reason (empty while it runs); "
     "always 1.", ("path", "program", "version", "reason")),
    ("ringtrace_run_sizes_info", "The run's capacities, constant facts of its file's metadata line: per resource "
     f"the four rings' values joined by \",\" ({_SIZES_HELP}) and the global tensormap's entries; always 1.",
     SIZES),
    ("ringtrace_run_verdict", "The one verdict on a finished run (ringtrace.stages.verdict, as summary, check, "
     "OTLP and Perfetto say it): kind, severity (ok, info, warning, error; check fails on error) and its text; "
     "always 1.", ("kind", "severity", "text")),
    ("ringtrace_run_failed", "1 when the run's host log reports a failure: the code it latched (orch_error_code, "
     "else sched_error_code, else the scheduler's fatal code; unknown when it names none), its name (error) and "
     "the ring its deadlock report names (empty when it names none).", ("code", "error", "ring")),
    ("ringtrace_ring_high_water_ratio", "Largest scope high water / usable capacity of a ring resource the run "
     "used (end.head - begin.tail: the backlog when the scope began plus all it allocated; a task window of N "
     "holds N - 1). Occupancy, not need: reclaim is lazy, so a ring that never had to wait keeps everything; "
     "above 1 when the ring reclaimed during the scope.", _RING),
    ("ringtrace_ring_need_ratio", "The need the run's records prove so far (ringtrace.stages.need: what one open "
     f"scope's tasks held at once, or one task's block) / capacity, {_PROVEN_HELP} only; absent where the "
     f"records prove nothing ({_TIMING_HELP}).", _RING),
    ("ringtrace_ring_occupancy_ratio", "While a run is open: occupied / usable capacity of a ring resource it "
     "uses, at the ring's latest boundary record (0-1). Occupancy, not need: near 1 while records keep coming "
     "the ring streams and the allocator is doing its job; near 1 in a run that stopped making progress it is "
     "about to wedge.", _RING),
    ("ringtrace_run_scopes", "Paired scopes read so far.", ()),
    ("ringtrace_run_records", "Boundary records read so far.", ()),
    ("ringtrace_run_dropped_records", "Records the collector dropped (peaks are lower bounds); absent when none.",
     ()),
    ("ringtrace_run_open_scopes", "While a run is open: scopes open after the latest record.", ()),
    ("ringtrace_open_innermost_scope_info", "While a run is open: its innermost scope open after the latest record "
     "(where the orchestrator is submitting; ring = the ring it submits to); always 1.", _SCOPE),
    ("ringtrace_wedged_scopes", "Scopes that never closed in a finished run (absent when none).", ()),
    ("ringtrace_wedged_innermost_scope_info", "Where a finished run wedged: its innermost open scope; always 1.",
     _SCOPE),
    ("ringtrace_run_last_record_timestamp_seconds", "When ringtrace last read a new record of the run (when it "
     "was first seen, before any): time() minus this is how long the run has made no progress.", ()),
    ("ringtrace_ring_recommended_capacity", "With --metrics-advice: the capacity `ringtrace advise` recommends for "
     "a ring resource from a finished run (absent where only a measurement run can tell).", _RING),
    ("ringtrace_ring_measure_next_capacity", "With --metrics-advice: the capacity for the next measurement run "
     "where the records cannot size the ring yet (oversized or wedged runs).", _RING),
)
LABEL_NAMES = {name: (*RUN_LABELS, *extra) for name, _, extra in RUN_FAMILIES}
INDEX = {name: i for i, (name, _, _) in enumerate(RUN_FAMILIES)}

Sample = tuple[str, list[str], float]
"""(family name, label values in :data:`LABEL_NAMES` order, value)."""


@dataclass(frozen=True, slots=True)
class RunView:
    """One run as the families read it; ``final`` is None while the run is open."""

    labels: tuple[str, str, str]  # run, rank, dispatch as valid UTF-8
    source: Source
    summary: RunSummary
    final: RunFinished | None
    record_at: float = 0.0  # when a new record was last read (when the run was first seen, before any)


def used(p: Peak) -> bool:
    """The run's records show an allocation on ``p``'s ring and resource (a high water or an occupancy)."""
    return p.high_water > 0 or p.live > 0


def samples(v: RunView) -> Iterator[Sample]:
    """The samples of one run, in :data:`RUN_FAMILIES` order (advice only when ``v.final`` carries it)."""
    lab, s, fin = list(v.labels), v.summary, v.final
    meta = s.meta
    yield "ringtrace_run_info", [*lab, v.source.display_path, utf8(v.source.labels.program),
                                 str(meta.version) if meta else "", fin.reason if fin else ""], 1
    if meta is not None:
        sizes = [",".join(map(str, meta.maxes(res))) for res in RESOURCES]
        yield "ringtrace_run_sizes_info", [*lab, *sizes, str(meta.tensormap_max or "")], 1
    if fin is not None:
        verdict = fin.verdict
        yield "ringtrace_run_verdict", [*lab, verdict.kind, verdict.severity, utf8(verdict.text)], 1
        log = fin.host_log
        if log is not None and log.failed:  # the latched code: the orchestrator's, else the scheduler's
            code, name = log.failure_code, log.failure_name
            where = "" if log.ring is None else str(log.ring)  # the deadlock report's ring ("" where it names none)
            yield "ringtrace_run_failed", [*lab, "unknown" if code is None else str(code), name or "", where], 1
    peaks = [p for p in s.peaks if p.capacity and used(p)]  # by ring, then resource
    for p in peaks:
        if p.scopes and p.high_water:  # no paired scope on the ring: its peaks are not meaningful
            yield "ringtrace_ring_high_water_ratio", [*lab, str(p.ring), p.resource], \
                p.high_water / usable(p.resource, p.capacity or 1)
    for p in peaks:
        need = proven_need(p, s).value
        if need:
            yield "ringtrace_ring_need_ratio", [*lab, str(p.ring), p.resource], need / (p.capacity or 1)
    if fin is None:
        for p in peaks:
            yield "ringtrace_ring_occupancy_ratio", [*lab, str(p.ring), p.resource], \
                p.live / usable(p.resource, p.capacity or 1)
    yield "ringtrace_run_scopes", lab, s.scopes
    yield "ringtrace_run_records", lab, s.records
    if meta is not None and meta.dropped:
        yield "ringtrace_run_dropped_records", lab, meta.dropped
    if fin is None:
        yield "ringtrace_run_open_scopes", lab, s.open_scopes
        if s.open:
            o = s.open[-1]
            yield "ringtrace_open_innermost_scope_info", [*lab, o.site, str(o.depth), str(o.ring)], 1
    elif s.wedged:
        w = s.wedged[-1]
        yield "ringtrace_wedged_scopes", lab, len(s.wedged)
        yield "ringtrace_wedged_innermost_scope_info", [*lab, w.site, str(w.depth), str(w.ring)], 1
    yield "ringtrace_run_last_record_timestamp_seconds", lab, v.record_at
    for a in fin.advice.advice if fin is not None and fin.advice is not None else ():
        if a.recommended is not None:
            yield "ringtrace_ring_recommended_capacity", [*lab, str(a.ring), a.resource], a.recommended
        elif a.measure_next is not None:
            yield "ringtrace_ring_measure_next_capacity", [*lab, str(a.ring), a.resource], a.measure_next


def _escape(value: str) -> str:
    return value.replace("\\", r"\\").replace("\n", r"\n").replace('"', r'\"')


def run_lines(got: Iterable[Sample]) -> tuple[tuple[bytes, ...], int]:
    """One run's sample lines, one bytes per family of :data:`RUN_FAMILIES` (b"" where it has none), as
    prometheus_client writes them; and how many samples."""
    lines: list[list[str]] = [[] for _ in RUN_FAMILIES]
    n = 0
    for name, values, value in got:
        labels = ",".join(f'{k}="{_escape(v)}"' for k, v in sorted(zip(LABEL_NAMES[name], values, strict=True)))
        lines[INDEX[name]].append(f"{name}{{{labels}}} {floatToGoString(value)}\n")  # type: ignore[no-untyped-call]
        n += 1
    return tuple("".join(rows).encode() for rows in lines), n


def empty_families() -> list[GaugeMetricFamily]:
    """Every per-run family, empty, in :data:`RUN_FAMILIES` order."""
    return [GaugeMetricFamily(name, doc, labels=[*RUN_LABELS, *extra]) for name, doc, extra in RUN_FAMILIES]


def run_families(runs: Iterable[Iterable[Sample]]) -> list[Metric]:
    """Every per-run family holding ``runs``' samples, each run's in the order given (pure; empty families too)."""
    fams = empty_families()
    for got in runs:
        for name, values, value in got:
            fams[INDEX[name]].add_metric(values, value)
    return list(fams)
