"""One source's part of the page: a bounded picture kept while the run is read, and its data for the page.

:class:`Picture` holds a run's bands (:class:`~ringtrace.model.records.Bands`, folded by the reader as it read
the records: per ring and resource the occupancy, head - tail at every record, and each scope's high water) as
:class:`~ringtrace.stages.bands.Series`: at most ``2 * width`` columns each, whatever the run's length.

:func:`source_data` turns a picture and the run's :class:`RunFinished` into the JSON the page draws:

* ``file``: the run's ``summary --format json`` file object, as is (the page's numbers are those; its
  ``verdict`` is the run's one :class:`~ringtrace.model.records.Verdict`, rendered, never re-decided);
* ``charts``: one per ring and resource that moved (``unused`` lists the others), each with its capacity,
  the proven need (:func:`ringtrace.stages.need.proven_need`, the "use" shown; occupancy is never a need),
  the columns, and the marks: the peak scope and, on the chart the verdict names, the wedge;
* ``failure``: the ring's state at the failure, from the host log's deadlock report (a failed run on the
  runtime's simulator has no records: this is its picture); None when the log states none.
"""

from __future__ import annotations

from typing import Any

from ringtrace.model.records import RESOURCES, Deadlock, HostLog, Peak, RunFinished
from ringtrace.model.runtime import RINGS, SINCE_VERSION, TABLE, error_name
from ringtrace.sinks.summary import file_object
from ringtrace.stages.bands import Series
from ringtrace.stages.need import proven_need


class Picture:
    """One source's slot in the report: its finished run and that run's bands as series, to be merged further
    for a narrower page (in place: only ever coarser)."""

    def __init__(self, width: int) -> None:
        self.width = width
        self.occ: dict[tuple[int, int], Series] = {}  # (ring, resource index) -> head - tail at every record
        self.high: dict[tuple[int, int], Series] = {}  # (ring, resource index) -> each scope's high water, at its end
        self.tensormap = Series(width)
        self.first_line = 0
        self.last_line = 0
        self.finished: RunFinished | None = None

    def finish(self, fin: RunFinished) -> None:
        """The run ended: its bands (none when nobody asked the reader for them, or a run without records)."""
        self.finished = fin
        b = fin.bands
        if b is not None:
            self.occ = {(x.ring, x.resource): Series.of(x, b.width) for x in b.occupancy}
            self.high = {(x.ring, x.resource): Series.of(x, b.width) for x in b.high_water}
            self.tensormap = Series.of(b.tensormap, b.width)
            self.first_line, self.last_line = b.first_line, b.last_line


class _Strings:
    """Sites, once each: the columns refer to them by index."""

    def __init__(self) -> None:
        self.index: dict[str, int] = {}

    def __call__(self, text: str) -> int:
        if text not in self.index:
            self.index[text] = len(self.index)
        return self.index[text]


def _moved(cols: list[list[Any]]) -> bool:
    return any(c[2] for c in cols)


def _chart(pic: Picture, fin: RunFinished, ring: int, i: int, width: int, strings: _Strings) -> dict[str, Any] | None:
    """One ring resource's chart, or None when it never moved (no occupancy, no scope figure, no need)."""
    resource = RESOURCES[i]
    s = fin.summary
    peak = next((p for p in s.peaks if p.ring == ring and p.resource == resource), None)
    x_max = max(pic.last_line, 1)
    occ_s, high_s = pic.occ.get((ring, i)), pic.high.get((ring, i))
    occ = occ_s.columns(x_max, width) if occ_s is not None else []
    high = high_s.columns(x_max, width) if high_s is not None else []
    need = proven_need(peak, s) if peak is not None else None
    if not _moved(occ) and not _moved(high) and not (need and need.value):
        return None
    cap = s.meta.capacity(resource, ring) if s.meta is not None else None
    return {
        "ring": ring, "resource": resource, "capacity": cap,
        "need": need.value if need else 0, "need_why": need.why if need else "",
        "occ": [[c[0], c[1], c[2], c[3], strings(c[4]), c[5]] for c in occ],
        "high": [[c[3], c[2], strings(c[4]), c[5], c[6]] for c in high],
        "marks": _marks(peak, high, fin, ring, resource),
    }


def _marks(peak: Peak | None, high: list[list[Any]], fin: RunFinished, ring: int,
           resource: str) -> list[dict[str, Any]]:
    """The scope sites that matter on this chart: the scope that set the high water; the wedge (labelled on
    the chart the verdict names, drawn on the other charts of its ring without a label)."""
    out: list[dict[str, Any]] = []
    if peak is not None and peak.high_water and peak.high_water_site:
        at = next((c for c in high if c[6] == peak.high_water_line), None)
        end = at[3] if at is not None else peak.high_water_line
        out.append({"kind": "peak", "x": end, "from": peak.high_water_line,
                    "text": f"peak {peak.high_water_site}"})
    v = fin.verdict
    if v.kind == "wedged" and v.line and v.ring == ring:
        label = v.resource in (None, resource)
        out.append({"kind": "wedge", "x": v.line, "text": f"WEDGED {v.site or ''}".strip() if label else ""})
    return out


def _label_once(charts: list[dict[str, Any]], fin: RunFinished) -> None:
    """The wedge's label on exactly one chart: the verdict's resource, else the first chart of its ring."""
    wedges = [m for c in charts for m in c["marks"] if m["kind"] == "wedge"]
    if wedges and not any(m["text"] for m in wedges):
        wedges[0]["text"] = f"WEDGED {fin.verdict.site or ''}".strip()
    labelled = [m for m in wedges if m["text"]]
    for m in labelled[1:]:
        m["text"] = ""


def resources_data() -> dict[str, dict[str, Any]]:
    """What the page calls each resource it draws, from the runtime's table (:data:`TABLE`), and the
    tensormap (one global table, no ring resource): ``words`` for sentences, ``unit`` for axes and
    figures, ``bytes`` when its figures are bytes (B/KiB/MiB/GiB)."""
    rows = {r.name: {"words": r.name.replace("_", " "), "unit": r.unit, "bytes": r.bytes} for r in TABLE}
    return {**rows, "tensormap": {"words": "tensormap", "unit": "entries", "bytes": False}}


def failure_bar(log: HostLog | None) -> dict[str, Any] | None:
    """The ring's state when the run failed, as the host log's deadlock report states it (None: no report, or
    one about no ring resource).  ``used + available <= capacity``; ``held`` is the rest (a wrapped heap's
    skipped end); ``requested`` what the failing request asked (a window: one slot; a pool: its ``needed``)."""
    if log is None or log.deadlock is None or log.deadlock.resource is None:
        return None
    d: Deadlock = log.deadlock
    resource = d.resource
    cap = d.capacity
    used = available = requested = None
    if resource == "heap":
        used, available, requested = d.heap_used, d.heap_available, d.requested_bytes
    elif resource == "task_window":
        used = d.task_active if d.task_active is not None else d.scope_tasks
        if cap is not None and used is not None:
            available = max(0, cap - 1 - used)  # a window of N holds N - 1
        requested = 1
    else:
        used, requested = d.pool_used, d.pool_needed
        if cap is not None and used is not None:
            available = max(0, cap - used)
    code = log.failure_code
    return {"ring": d.ring, "resource": resource, "pool": d.pool, "capacity": cap, "used": used,
            "available": available, "requested": requested, "code": code,
            "code_name": log.failure_name or error_name(code), "title": d.title, "line": d.line,
            "log": log.path, "provable": d.provable}


def source_data(pic: Picture, fin: RunFinished, width: int) -> dict[str, Any]:
    """The page's data for one finished run (see the module docstring); ``width``: columns per series."""
    strings = _Strings()
    charts: list[dict[str, Any]] = []
    unused: list[list[Any]] = []
    has_records = bool(fin.source.path) and fin.summary.meta is not None
    for ring in range(RINGS):
        for i, resource in enumerate(RESOURCES):
            c = _chart(pic, fin, ring, i, width, strings) if has_records else None
            if c is not None:
                charts.append(c)
            elif has_records and (fin.summary.meta is None or fin.summary.meta.version >= SINCE_VERSION[resource]):
                unused.append([ring, resource])
    _label_once(charts, fin)
    tm = None
    cols = pic.tensormap.columns(max(pic.last_line, 1), width)
    if _moved(cols):
        tm = {"ring": None, "resource": "tensormap", "capacity": fin.summary.tensormap.capacity, "need": 0,
              "need_why": "", "marks": [], "high": [],
              "occ": [[c[0], c[1], c[2], c[3], strings(c[4]), c[5]] for c in cols]}
    return {"file": file_object(fin), "name": fin.source.name, "x": [pic.first_line, pic.last_line],
            "charts": charts, "tensormap": tm, "unused": unused, "failure": failure_bar(fin.host_log),
            "strings": list(strings.index)}
