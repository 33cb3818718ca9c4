"""``ringtrace report``: one self-contained HTML page per set of runs, small whatever the runs' size.

:class:`ReportCollector` is a sink (receive / flush / close, called from one thread in event order): it
keeps per source the finished run and its bounded picture (:class:`ringtrace.report._source.Picture`), made of
the bands the reader folded while it read the run (``RunFinished.bands``: it asks for them, and for no record
or pair event, through its ``wants``).  :func:`render` turns what it collected into one HTML file of at most
:data:`BUDGET` bytes: no network, no CDN (the page's own script draws inline SVG from the data embedded in
it), so it opens offline.

The page leads with the verdicts (each run's :class:`~ringtrace.model.records.Verdict`, rendered in a few
words; several sources: an overview, problems first, and per multi-rank run a rank x dispatch x ring heatmap
of the proven need's share of capacity), then per program the sizing picture of
:func:`ringtrace.analysis.advise.program_advice`'s answer (``_sizing``), then a section per source: its
charts with axes in its own units (``_source``), or for a failed run without records the ring's state from
its host log.  The numbers shown are the ``summary --format json`` file object and the ``advise --format
json`` program object, embedded as they are.
"""

from __future__ import annotations

import html
import re
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import msgspec

from ringtrace.analysis.advise import program_advice
from ringtrace.files import newest, path_hash, write_atomic
from ringtrace.model.records import Labels, RunFinished, RunStarted, SinkEvent, Wants
from ringtrace.report._page import page
from ringtrace.report._sizing import program_data
from ringtrace.report._source import Picture, resources_data, source_data
from ringtrace.sinks.base import Sink
from ringtrace.sources.paths import distinct_names, run_folder

WIDTH = 600
"""Columns per series kept while reading (about one per pixel of a chart)."""
BUDGET = 2 << 20
"""The page's size ceiling in bytes, at any input size (columns are merged, then charts left out, to fit)."""
MIN_WIDTH = 48
"""Fewest columns a chart is drawn with before charts are left out instead."""
_SEVERITY = {"error": 0, "warning": 1, "info": 2, "ok": 3}


class ReportCollector(Sink):
    """A sink that keeps each source's finished run and bounded picture for :func:`render`; O(sources x width)
    memory.  It reads no records: the reader folds each run's bands (``Wants.bands``, ``RunFinished.bands``)."""

    name = "report"

    def __init__(self, width: int = WIDTH) -> None:
        self.width = width
        self.wants = Wants(records=False, events=False, bands=width)
        self.sources: dict[tuple[str, int], Picture] = {}
        self.order: list[tuple[str, int]] = []

    def _get(self, key: tuple[str, int]) -> Picture:
        src = self.sources.get(key)
        if src is None:
            src = self.sources[key] = Picture(self.width)
            self.order.append(key)
        return src

    def receive(self, event: SinkEvent) -> None:
        key = (event.source.path or (event.host_log.path if isinstance(event, RunFinished) and event.host_log
                                     else ""), event.source.generation)
        if isinstance(event, RunStarted):
            self._get(key)  # the page lists sources in the order they started
        elif isinstance(event, RunFinished):
            self._get(key).finish(event)

    def flush(self, deadline: float) -> None:
        """Nothing is buffered."""

    def close(self) -> None:
        """Nothing to release."""

    def finished(self) -> list[RunFinished]:
        return [f for k in self.order if (f := self.sources[k].finished) is not None]


# -- the page -------------------------------------------------------------------------------------------


def _key(fin: RunFinished) -> str:
    """A run's key in the program answers' ``sources``: its file, or its host log for a log alone."""
    return fin.source.path or (fin.host_log.path if fin.host_log is not None else "")


def _dump(doc: dict[str, Any]) -> bytes:
    """The page's JSON (UTF-8), safe inside a ``<script>`` element: ``<`` (only ever inside a string) as
    ``\\u003c``, so no ``</script>`` or ``<!--`` can end or change it."""
    return msgspec.json.encode(doc).replace(b"<", b"\\u003c")


def _fit(doc: dict[str, Any], runs: Sequence[tuple[Picture, RunFinished]], room: int) -> bytes:
    """``doc`` as JSON of at most ``room`` bytes: the charts' columns merged to fewer, then (least problems
    first) sources' charts left out, then sections cut to their verdict and figures.  Sizes are counted per
    source (a source's JSON is its share of the page's), so the page is serialised a bounded number of times."""
    payload = _dump(doc)
    if len(payload) <= room:
        return payload
    sources: list[dict[str, Any]] = doc["sources"]
    chart_bytes = sum(len(_dump({"c": d["charts"], "t": d["tensormap"]})) for d in sources)
    fixed = len(payload) - chart_bytes
    width = max(MIN_WIDTH, int(WIDTH * max(room - fixed, 0) / max(chart_bytes, 1) * 0.9))
    for i, (pic, fin) in enumerate(runs):
        sources[i] = {**source_data(pic, fin, width), "name": sources[i]["name"]}
    size = len(_dump(doc))
    for cut in (_without_charts, _without_details):
        for i in reversed(range(len(sources))):
            if size <= room:
                return _dump(doc)
            before = len(_dump(sources[i]))
            sources[i] = cut(sources[i])
            size -= before - len(_dump(sources[i]))
    return _dump(doc)


def _without_charts(d: dict[str, Any]) -> dict[str, Any]:
    if not d["charts"] and not d["tensormap"]:
        return d
    return {**d, "charts": [], "tensormap": None, "strings": [], "left_out": "charts"}


def _without_details(d: dict[str, Any]) -> dict[str, Any]:
    f = d["file"]
    kept = {k: f[k] for k in ("path", "verdict", "labels", "version", "records", "total", "dropped", "fatal",
                              "rings", "tensormap", "wedged")}
    return {**d, "left_out": "details", "file": {**kept, "findings": [], "host_log": None, "advice": [],
                                                  "problems": []}}


def render(collector: ReportCollector, headroom: float, title: str = "ringtrace report") -> str:
    """The HTML page of every finished run the collector holds (problems first), with the program answers."""
    runs = [(pic, fin) for k in collector.order if (fin := (pic := collector.sources[k]).finished) is not None]
    runs.sort(key=lambda r: (_SEVERITY.get(r[1].verdict.severity, 2), r[1].source.name, _key(r[1])))
    fins, programs = program_advice([fin for _, fin in runs], headroom)  # each run's advice: its program's
    runs = [(pic, fin) for (pic, _), fin in zip(runs, fins, strict=True)]
    index = {_key(fin): (i, fin) for i, fin in enumerate(fins)}
    names = distinct_names([f.source.name for f in fins],  # runs whose folders share a name told apart
                           [run_folder(f.source.path, f.host_log.path if f.host_log else "") for f in fins])
    doc = {"title": title, "sources": [{**source_data(pic, fin, collector.width), "name": name}
                                       for (pic, fin), name in zip(runs, names, strict=True)],
           "programs": [program_data(p, index) for p in programs], "resources": resources_data()}
    template = page().replace("__TITLE__", html.escape(title))
    payload = _fit(doc, runs, BUDGET - len(template.encode()))
    return template.replace("__DATA__", payload.decode())


def report_paths(fins: Sequence[RunFinished]) -> str:
    """A title for the page: the one source's path, or how many."""
    if len(fins) == 1:
        return fins[0].source.display_path or fins[0].source.name
    return f"{len(fins)} sources"


class ReportDirSink(Sink):
    """``watch --report-dir DIR``: one report per finished run, as the runtime's scene tests write theirs.

    Keeps each open run's bounded picture (:class:`ReportCollector`); at its ``RunFinished`` the page is
    written to ``DIR/<name>.html`` (a temporary name, then renamed: a reader never sees half a page) and
    the run's picture is dropped.  Called from its own worker (the fan-out's outlet); a page that cannot
    be written raises, so the fan-out counts it."""

    name = "report-dir"

    def __init__(self, directory: Path, headroom: float, width: int = WIDTH) -> None:
        self.directory = directory
        self.headroom = headroom
        self.collector = ReportCollector(width)
        self.wants = self.collector.wants
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
        write_atomic(target, page.encode("utf-8"))
        self.written.append(target)

    def flush(self, deadline: float) -> None:
        """Pages are written at each run's finish."""

    def close(self) -> None:
        """Open runs' pictures are dropped (a run not finished has no page)."""
        self.collector = ReportCollector(self.collector.width)


def page_file_name(fin: RunFinished) -> str:
    """``<run>[-rank<N>][-d<K>]-<path hash>.html``: unique per source file, readable by label."""
    digest = path_hash(fin.source.path or (fin.host_log.path if fin.host_log else ""))
    return f"{page_stem(fin.source.labels)}-{digest}.html"


def page_stem(lab: Labels) -> str:
    """The part of :func:`page_file_name` the labels make: ``<run>[-rank<N>][-d<K>]``."""
    parts = [lab.run or "run", f"rank{lab.rank}" if lab.rank else "", f"d{lab.dispatch}" if lab.dispatch else ""]
    return re.sub(r"[^\w.-]+", "_", "-".join(p for p in parts if p)).strip("._") or "run"


_PAGE_NAME = re.compile(r"(.+)-[0-9a-f]{8}\.html")


def find_page(directory: Path, labels: Labels) -> Path | None:
    """The page :class:`ReportDirSink` wrote in ``directory`` for the run ``labels`` name (of several, from
    different source paths, the newest); None when there is none."""
    stem = page_stem(labels)
    return newest(directory, lambda name: (m := _PAGE_NAME.fullmatch(name)) is not None and m[1] == stem)
