"""The summary sink: finished runs -> the per-file JSON object (the readable table is ``cli.text``).

``file_object`` is the one JSON shape of a finished run, shared by ``summary --format json``
and the events sink.  The sink keeps only :class:`RunFinished` events (O(files) memory).
"""

from __future__ import annotations

import threading
from typing import Any

import msgspec

from ringtrace.analysis.advise import advice_json
from ringtrace.model.records import RESOURCES, WANT_SUMMARIES, HostLog, Problem, RunFinished, SinkEvent, Verdict
from ringtrace.sinks.base import Sink
from ringtrace.stages.need import proven_need


def _ratio(x: float | None) -> float | None:
    return None if x is None else round(x, 6)


def _problems(problems: tuple[Problem, ...]) -> list[dict[str, Any]]:
    return [{"line": p.line, "reason": p.reason, "severity": p.severity, "message": p.message} for p in problems]


def file_object(fin: RunFinished) -> dict[str, Any]:
    """The per-file object of ``summary --format json`` (documented in the README)."""
    s, src = fin.summary, fin.source
    meta = s.meta
    return {
        "path": src.display_path or None,  # None: a run known from its host log alone
        "verdict": verdict_object(fin.verdict),
        "labels": {"run": src.labels.run, "rank": src.labels.rank, "dispatch": src.labels.dispatch,
                   "program": src.labels.program},
        "version": meta.version if meta else None,
        "fatal": meta.fatal if meta else None,
        "dropped": meta.dropped if meta else None,
        "total": meta.total if meta else None,
        "records": s.records,
        "complete": s.complete,
        "scopes": s.scopes,
        "max_depth": s.max_depth,
        "unmatched_begins": s.unmatched_begins,
        "unmatched_ends": s.unmatched_ends,
        "parse_errors": s.parse_errors,
        "rings": [
            {"ring": p.ring, "resource": p.resource, "capacity": p.capacity, "high_water": p.high_water,
             "high_water_site": p.high_water_site, "high_water_ratio": _ratio(p.high_water_ratio),
             "live_at_exit": p.live_at_exit, "alloc": p.alloc, "alloc_ratio": _ratio(p.alloc_ratio),
             "proven_need": need.value or None, "need_ratio": _ratio(need.value / p.capacity)
             if need.value and p.capacity else None, "scopes": p.scopes}
            for p in s.peaks if p.scopes for need in (proven_need(p, s),)
        ],
        "tensormap": {"capacity": s.tensormap.capacity, "peak": s.tensormap.peak, "peak_site": s.tensormap.peak_site},
        "wedged": [{"site": w.site, "depth": w.depth, "ring": w.ring, "line": w.line} for w in s.wedged],
        "findings": [{"rule": f.rule, "severity": f.severity, "message": f.message,
                      **({"confirmed": f.confirmed} if f.rule == "wedged" else {})} for f in fin.findings],
        "problems": _problems(fin.problems),
        "host_log": host_log_object(fin.host_log),
        "advice": advice_json(fin.advice.advice) if fin.advice is not None else [],
        "advice_evidence": fin.advice.evidence if fin.advice is not None else "",
    }


def verdict_object(v: Verdict) -> dict[str, Any]:
    """The ``verdict`` member of a file object: the one verdict (``ringtrace.stages.verdict``)."""
    return {"kind": v.kind, "severity": v.severity, "text": v.text, "ring": v.ring, "resource": v.resource,
            "site": v.site, "code": v.code, "code_name": v.code_name, "line": v.line or None}


def host_log_object(log: HostLog | None) -> dict[str, Any] | None:
    """The ``host_log`` member of a file object (README "Host logs"); None where the log does not say."""
    if log is None:
        return None
    sizes = log.ring_sizes
    d = log.deadlock
    return {
        "path": log.path, "rank": log.rank, "failed": log.failed, "test_failure": log.test_failure,
        "orch_error_code": log.orch_error_code, "code_source": log.code_source, "error_name": log.error_name,
        "sched_error_code": log.sched_error_code, "sched_error_name": log.sched_error_name,
        "sched_sub_class": log.sched_sub_class, "runtime_status": log.runtime_status,
        "error_detail": log.error_detail, "error_hint": log.error_hint,
        "ring": log.ring, "requested_bytes": log.requested_bytes,
        "ring_sizes": None if sizes is None else {r: list(sizes.of(r)) for r in RESOURCES},
        "deadlock": None if d is None else {**msgspec.to_builtins(d), "resource": d.resource, "capacity": d.capacity,
                                            "pool": d.pool},
        "fatal_lines": list(log.fatal_lines), "run_status": list(log.run_status), "not_written": list(log.not_written),
        "problems": _problems(log.problems),
    }


class SummarySink(Sink):
    """Collects finished runs for a final report.  ``receive`` only appends; never blocks.
    :meth:`wait_finished` waits (on another thread) until it holds a number of them."""

    name = "summary"
    wants = WANT_SUMMARIES

    def __init__(self) -> None:
        self.finished: list[RunFinished] = []
        self._more = threading.Condition()

    def receive(self, event: SinkEvent) -> None:
        if isinstance(event, RunFinished):
            with self._more:
                self.finished.append(event)
                self._more.notify_all()

    def wait_finished(self, n: int, timeout: float) -> bool:
        """Block until ``n`` runs finished or ``timeout`` seconds passed; whether they did."""
        with self._more:
            return self._more.wait_for(lambda: len(self.finished) >= n, timeout)

    def flush(self, deadline: float) -> None:
        pass

    def close(self) -> None:
        pass

    def to_json(self) -> dict[str, Any]:
        return {"files": [file_object(f) for f in self.finished]}
