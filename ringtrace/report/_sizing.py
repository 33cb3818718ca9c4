"""The sizing picture's data: a program's answer (``advise``) and every run of the program on a size axis.

Per program, :func:`program_data` gives ``program_json`` of its :class:`ProgramAnswer` as is (what ``advise
--format json`` prints: the picture's bracket, estimate and recommended / next size are these numbers, never
recomputed) and, per (ring, resource) of the answer, the runs as points: the run's capacity of that ring and
resource (its metadata; for a run known from its host log alone, the deadlock report's size or the log's
``Ring buffer sizes`` line; a run whose size is not known is left out and counted) and its outcome:

* ``completed`` — the run ran to its end (its verdict is healthy, near capacity, no headroom, or a test that
  failed on numbers: its sizes sufficed);
* ``failed`` — it failed on this ring and resource (its verdict names them; a dep-pool report names no ring:
  then on each ring whose bracket can hold that size, ``ring_named`` false);
* ``other`` — it failed on something else, or its end is unknown: its size here proves nothing.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ringtrace.analysis.advise import ProgramAnswer, program_json, snippet
from ringtrace.model.records import RunFinished

_COMPLETED = ("healthy", "near_capacity", "no_headroom", "test_failed")


def run_capacity(fin: RunFinished, ring: int, resource: str) -> int | None:
    """The capacity of ``resource`` on ``ring`` the run had, as its files state it; None: not stated."""
    meta = fin.summary.meta
    if meta is not None:
        return meta.capacity(resource, ring)
    log = fin.host_log
    if log is None:
        return None
    d = log.deadlock
    if d is not None and d.resource == resource and d.ring == ring and d.capacity:
        return d.capacity
    if log.ring_sizes is not None:
        sizes: tuple[int, ...] = getattr(log.ring_sizes, resource)
        if ring < len(sizes) and sizes[ring] > 0:
            return sizes[ring]
    return None


def _unnamed_capacity(fin: RunFinished, resource: str) -> int | None:
    """A failure report on ``resource`` that names no ring: the size it states."""
    log = fin.host_log
    d = log.deadlock if log is not None else None
    if d is None or d.resource != resource or d.ring is not None:
        return None
    return d.capacity


def _outcome(fin: RunFinished, ring: int, resource: str) -> str:
    v = fin.verdict
    if v.kind in _COMPLETED:
        return "completed"
    if v.kind in ("failed", "wedged") and v.resource == resource and v.ring == ring:
        return "failed"
    return "other"


def program_data(pa: ProgramAnswer, fins: Mapping[str, tuple[int, RunFinished]]) -> dict[str, Any]:
    """The page's data for one program; ``fins``: source key (path, or the host log's for a log alone) ->
    (section index, run)."""
    obj = program_json(pa)
    obj["snippets"] = [snippet(k, v) for k, v in pa.run_config]
    rows = []
    for a in pa.advice:
        points: list[dict[str, Any]] = []
        unknown = 0
        for key in pa.sources:
            hit = fins.get(key)
            if hit is None:
                continue
            index, fin = hit
            v = fin.verdict
            cap = run_capacity(fin, a.ring, a.resource)
            named = True
            if cap is None:
                cap = _unnamed_capacity(fin, a.resource)
                if cap is None or (a.upper_bound is not None and cap >= a.upper_bound):
                    unknown += 1
                    continue
                named = False
            outcome = _outcome(fin, a.ring, a.resource) if named else \
                "failed" if v.kind in ("failed", "wedged") else "other"
            points.append({"run": fin.source.name or key, "section": index, "capacity": cap, "outcome": outcome,
                           "ring_named": named, "code": v.code, "code_name": v.code_name, "kind": v.kind})
        rows.append({"ring": a.ring, "resource": a.resource, "points": points, "unknown": unknown})
    obj["rows"] = rows
    return obj
