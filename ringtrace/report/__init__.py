"""``ringtrace report``: one self-contained HTML page per set of runs, small whatever the runs' size.

:class:`ReportCollector` is a sink (receive / flush / close, called from one thread in event order):
it keeps per source a bounded picture of the run (:mod:`ringtrace.report._series`: per pixel column
the min and max occupancy of every ring and resource, the per-scope figures, the tensormap) and the
finished run.  :func:`render` turns what it collected into one HTML file: no network, no CDN (the
page's own script draws inline SVG from the data embedded in it), so it opens offline.  The page
leads with the verdict (wedged, failed, near capacity, healthy) and the advice (the program answer
of :func:`ringtrace.analysis.advise.advise_programs` and its RunConfig); with several sources an overview
(problems first) comes before a section per source.  The numbers shown are the ``summary --format
json`` file object of each run, embedded as is.
"""

from __future__ import annotations

import hashlib
import html
import json
import os
import re
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from ringtrace.analysis.advise import ProgramAnswer, RunFacts, advise_programs, program_json, snippet
from ringtrace.model.records import RESOURCES, WANT_ALL, Record, RunFinished, RunProgress, RunStarted, Scope, SinkEvent
from ringtrace.model.runtime import error_name
from ringtrace.report._page import page
from ringtrace.report._series import Series
from ringtrace.sinks.summary import file_object

WIDTH = 600
"""Columns per chart (one per pixel of the page's chart width)."""


class _Source:
    """What one run's picture needs, bounded by :data:`WIDTH` per series."""

    def __init__(self, width: int, lines: int | None) -> None:
        self.width = width
        self.span = -(-lines // width) if lines else 1  # records per column when the run's length is known
        self.occ: dict[tuple[int, int], Series] = {}  # (ring, resource index) -> head - tail at every record
        self.scope: dict[tuple[int, int, int], Series] = {}  # (ring, resource, figure) -> per scope, at its end
        self.tensormap = Series(width, self.span)
        self.last_line = 0
        self.finished: RunFinished | None = None

    def _series(self, table: dict[Any, Series], key: Any) -> Series:
        s = table.get(key)
        if s is None:
            s = table[key] = Series(self.width, self.span)
        return s

    def records(self, event: RunProgress) -> None:
        """One chunk: grouped per ring, then each series fed a column at a time (C-level min/max)."""
        recs = event.records
        if recs:
            self.tensormap.extend([r.line for r in recs], [r.tensormap for r in recs], recs)
            self.last_line = recs[-1].line
            rings = {r.ring for r in recs}
            for ring in sorted(rings):
                rs: list[Record] = [r for r in recs if r.ring == ring] if len(rings) > 1 else list(recs)
                xs = [r.line for r in rs]
                self._series(self.occ, (ring, 0)).extend(xs, [r.task_window_end - r.task_window_start for r in rs], rs)
                self._series(self.occ, (ring, 1)).extend(xs, [r.heap_end - r.heap_start for r in rs], rs)
                if rs[0].dep_pool_end is not None:
                    self._series(self.occ, (ring, 2)).extend(
                        xs, [(r.dep_pool_end or 0) - (r.dep_pool_start or 0) for r in rs], rs)
        every = [e for e in event.events if type(e) is Scope]
        for ring in sorted({e.ring for e in every}):
            ss = [e for e in every if e.ring == ring]
            xs = [e.end_line for e in ss]
            for i in range(len(RESOURCES)):
                if ss[0].usage[i] is None:
                    continue
                us = [e.usage[i] for e in ss]
                # live at exit is the occupancy band at the scope's end record: not kept twice
                self._series(self.scope, (ring, i, 0)).extend(xs, [u.high_water if u else 0 for u in us], ss)
                self._series(self.scope, (ring, i, 2)).extend(xs, [u.alloc if u else 0 for u in us], ss)


class ReportCollector:
    """A sink that keeps each source's bounded picture for :func:`render`; O(sources x width) memory."""

    name = "report"
    wants = WANT_ALL

    def __init__(self, width: int = WIDTH) -> None:
        self.width = width
        self.sources: dict[tuple[str, int], _Source] = {}
        self.order: list[tuple[str, int]] = []

    def _get(self, key: tuple[str, int], lines: int | None = None) -> _Source:
        src = self.sources.get(key)
        if src is None:
            src = self.sources[key] = _Source(self.width, lines)
            self.order.append(key)
        return src

    def receive(self, event: SinkEvent) -> None:
        key = (event.source.path or (event.host_log.path if isinstance(event, RunFinished) and event.host_log
                                     else ""), event.source.generation)
        if isinstance(event, RunStarted):
            total = event.meta.total if event.meta is not None else None
            self._get(key, total + 1 if total else None)  # the records' lines: 2 .. total + 1
        elif isinstance(event, RunProgress):
            self._get(key).records(event)
        elif isinstance(event, RunFinished):
            self._get(key).finished = event

    def flush(self, deadline: float) -> None:
        """Nothing is buffered."""

    def close(self) -> None:
        """Nothing to release."""

    def finished(self) -> list[RunFinished]:
        return [f for k in self.order if (f := self.sources[k].finished) is not None]


# -- the page -------------------------------------------------------------------------------------------

_SEVERITY = {"error": 0, "warning": 1, "info": 2}


def verdict(fin: RunFinished) -> dict[str, str]:
    """The run's verdict first: ``{"kind": wedged|failed|near|healthy, "text": ...}``."""
    s = fin.summary
    if s.wedged:
        inner = s.wedged[-1]
        cause = fin.wedge_cause
        code = ""
        if cause is not None and cause.code is not None:
            code = (f"; {'confirmed' if cause.confirmed else 'likely'} orch_error_code={cause.code} "
                    f"{error_name(cause.code) or ''}").rstrip()
        return {"kind": "wedged", "text": f"wedged in {inner.site} (depth {inner.depth}, ring {inner.ring}, "
                                          f"line {inner.line}){code}"}
    log = fin.host_log
    if log is not None and log.failed:
        return {"kind": "failed",
                "text": f"failed: the host log reports code {log.failure_code} {log.failure_name or ''}".rstrip()}
    warn = [f for f in fin.findings if f.severity != "info"]
    if any(f.severity == "error" for f in warn):
        return {"kind": "failed", "text": next(f.message for f in warn if f.severity == "error")}
    if warn:
        return {"kind": "near", "text": warn[0].message}
    return {"kind": "healthy", "text": "healthy: every ring completed within its capacity"}


def _strings(table: dict[str, int], text: str) -> int:
    if text not in table:
        table[text] = len(table)
    return table[text]


def _source_data(src: _Source, fin: RunFinished) -> dict[str, Any]:
    strings: dict[str, int] = {}
    x_max = max(src.last_line, 1)
    used = {(p.ring, RESOURCES.index(p.resource)) for p in fin.summary.peaks if p.scopes and (
        p.high_water or p.live or p.alloc or p.live_at_exit)}
    wedged_rings = {w.ring for w in fin.summary.wedged[-1:]}
    charts = []
    for (ring, i), series in sorted(src.occ.items()):
        cols = series.columns(x_max)
        if (ring, i) not in used and not any(c[2] for c in cols) and ring not in wedged_rings:
            continue  # a ring resource with nothing in it is folded away (unless the run wedged on that ring)
        cap = fin.summary.meta.capacity(RESOURCES[i], ring) if fin.summary.meta is not None else None
        figs = {}
        for f, name in ((0, "high_water"), (2, "alloc")):
            s = src.scope.get((ring, i, f))
            figs[name] = [[c[3], c[2], _strings(strings, c[4].site), c[4].depth, c[4].begin_line]
                          for c in (s.columns(x_max) if s is not None else [])]
        charts.append({"ring": ring, "resource": RESOURCES[i], "capacity": cap,
                       "occ": [[c[0], c[1], c[2], c[3], _strings(strings, c[4].site), c[4].depth] for c in cols],
                       **figs})
    tm = [[c[0], c[1], c[2], c[3], _strings(strings, c[4].site), c[4].depth] for c in src.tensormap.columns(x_max)]
    return {"file": file_object(fin), "name": fin.source.name, "verdict": verdict(fin), "x_max": x_max,
            "charts": charts, "tensormap": tm, "strings": list(strings)}


def _program(pa: ProgramAnswer) -> dict[str, Any]:
    obj = program_json(pa)
    obj["snippets"] = [snippet(k, v) for k, v in pa.run_config]
    return obj


def render(collector: ReportCollector, headroom: float, title: str = "ringtrace report") -> str:
    """The HTML page of every finished run the collector holds (problems first), with the program answers."""
    fins = collector.finished()
    programs = advise_programs([RunFacts(f.source.path, f.source.labels, f.summary, f.host_log, f.wedge_causes)
                                for f in fins], headroom)
    data = [_source_data(collector.sources[k], f) for k in collector.order
            if (f := collector.sources[k].finished) is not None]
    rank = {"wedged": 0, "failed": 0, "near": 1, "healthy": 2}
    data.sort(key=lambda d: (rank[d["verdict"]["kind"]], d["name"]))
    doc = {"title": title, "sources": data, "programs": [_program(p) for p in programs]}
    payload = json.dumps(doc, separators=(",", ":")).replace("</", "<\\/")
    return page().replace("__TITLE__", html.escape(title)).replace("__DATA__", payload)


def report_paths(fins: Sequence[RunFinished]) -> str:
    """A title for the page: the one source's path, or how many."""
    if len(fins) == 1:
        return fins[0].source.display_path or fins[0].source.name
    return f"{len(fins)} sources"


class ReportDirSink:
    """``watch --report-dir DIR``: one report per finished run, as the runtime's scene tests write theirs.

    Keeps each open run's bounded picture (:class:`ReportCollector`); at its ``RunFinished`` the page is
    written to ``DIR/<name>.html`` (a temporary name, then renamed: a reader never sees half a page) and
    the run's picture is dropped.  Called from its own worker (the fan-out's outlet); a page that cannot
    be written raises, so the fan-out counts it."""

    name = "report-dir"
    wants = WANT_ALL

    def __init__(self, directory: Path, headroom: float, width: int = WIDTH) -> None:
        self.directory = directory
        self.headroom = headroom
        self.collector = ReportCollector(width)
        self.written: list[Path] = []

    def receive(self, event: SinkEvent) -> None:
        self.collector.receive(event)
        if not isinstance(event, RunFinished):
            return
        keys = [k for k in self.collector.order if self.collector.sources[k].finished is event]
        one = ReportCollector(self.collector.width)
        for k in keys:
            one.sources[k] = self.collector.sources.pop(k)
            one.order.append(k)
            self.collector.order.remove(k)
        page = render(one, self.headroom, f"ringtrace report: {report_paths([event])}")
        target = self.directory / page_file_name(event)
        tmp = target.with_name(f".{target.name}.tmp")
        tmp.write_text(page, encoding="utf-8")
        os.replace(tmp, target)
        self.written.append(target)

    def flush(self, deadline: float) -> None:
        """Pages are written at each run's finish."""

    def close(self) -> None:
        """Open runs' pictures are dropped (a run not finished has no page)."""
        self.collector = ReportCollector(self.collector.width)


def page_file_name(fin: RunFinished) -> str:
    """``<run>[-rank<N>][-d<K>]-<path hash>.html``: unique per source file, readable by label."""
    lab = fin.source.labels
    parts = [lab.run or "run", f"rank{lab.rank}" if lab.rank else "", f"d{lab.dispatch}" if lab.dispatch else ""]
    name = re.sub(r"[^\w.-]+", "_", "-".join(p for p in parts if p)).strip("._") or "run"
    digest = hashlib.blake2s(os.fsencode(fin.source.path or (fin.host_log.path if fin.host_log else "")),
                             digest_size=4).hexdigest()
    return f"{name}-{digest}.html"
