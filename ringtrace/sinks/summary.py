"""The summary sink: finished runs -> the per-file report (JSON object or a readable table).

``file_object`` is the one JSON shape of a finished run, shared by ``summary --format json``
and the events sink.  The sink keeps only :class:`RunFinished` events (O(files) memory).
"""

from __future__ import annotations

from typing import Any

import msgspec
from rich.console import Console
from rich.markup import escape
from rich.padding import Padding
from rich.table import Table
from rich.text import Text

from ringtrace.analysis.advise import advice_json
from ringtrace.model.records import WANT_SUMMARIES, HostLog, Problem, RunFinished, SinkEvent
from ringtrace.stages.diagnose import describe_log, fmt_amount

_STYLE = {"error": "bold red", "warning": "yellow", "info": "cyan"}


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
             "scopes": p.scopes}
            for p in s.peaks if p.scopes
        ],
        "tensormap": {"capacity": s.tensormap.capacity, "peak": s.tensormap.peak, "peak_site": s.tensormap.peak_site},
        "wedged": [{"site": w.site, "depth": w.depth, "ring": w.ring, "line": w.line} for w in s.wedged],
        "findings": [{"rule": f.rule, "severity": f.severity, "message": f.message,
                      **({"confirmed": f.confirmed} if f.rule == "wedged" else {})} for f in fin.findings],
        "problems": _problems(fin.problems),
        "host_log": host_log_object(fin.host_log),
        "advice": advice_json(fin.advice.advice) if fin.advice is not None else [],
    }


def host_log_object(log: HostLog | None) -> dict[str, Any] | None:
    """The ``host_log`` member of a file object (README "Host logs"); None where the log does not say."""
    if log is None:
        return None
    sizes = log.ring_sizes
    d = log.deadlock
    return {
        "path": log.path, "rank": log.rank, "failed": log.failed,
        "orch_error_code": log.orch_error_code, "code_source": log.code_source, "error_name": log.error_name,
        "sched_error_code": log.sched_error_code, "sched_error_name": log.sched_error_name,
        "sched_sub_class": log.sched_sub_class, "runtime_status": log.runtime_status,
        "error_detail": log.error_detail, "error_hint": log.error_hint,
        "ring": log.ring, "requested_bytes": log.requested_bytes,
        "ring_sizes": None if sizes is None else {
            "task_window": list(sizes.task_window), "heap": list(sizes.heap), "dep_pool": list(sizes.dep_pool)},
        "deadlock": None if d is None else {**msgspec.to_builtins(d), "resource": d.resource, "capacity": d.capacity,
                                            "pool": d.pool},
        "fatal_lines": list(log.fatal_lines), "run_status": list(log.run_status), "not_written": list(log.not_written),
        "problems": _problems(log.problems),
    }


class SummarySink:
    """Collects finished runs for a final report.  ``receive`` only appends; never blocks."""

    name = "summary"
    wants = WANT_SUMMARIES

    def __init__(self) -> None:
        self.finished: list[RunFinished] = []

    def receive(self, event: SinkEvent) -> None:
        if isinstance(event, RunFinished):
            self.finished.append(event)

    def flush(self) -> None:
        pass

    def close(self) -> None:
        pass

    def to_json(self) -> dict[str, Any]:
        return {"files": [file_object(f) for f in self.finished]}


def _sentence(console: Console, text: Text) -> None:
    """A finding or note: indented two columns and wrapped at the console's width (not 300 wide)."""
    console.print(Padding(text, (0, 0, 0, 2), expand=False), soft_wrap=False, highlight=False)


def render_run(console: Console, fin: RunFinished) -> None:
    """One run as a header, a per-ring table, wedged scopes and findings."""
    s, meta = fin.summary, fin.summary.meta
    log = fin.host_log
    name = fin.source.display_path or (f"(no scope_stats file; host log {log.path})" if log else "")
    head = f"[bold]{escape(name)}[/bold]"  # paths and sites are data, never markup
    if meta is not None:
        head += (f"\n  version {meta.version}  records {s.records}/{meta.total}  dropped {meta.dropped}  "
                 f"fatal {str(meta.fatal).lower()}  complete {str(s.complete).lower()}")
    records = bool(fin.source.path) or log is None  # a run known from its host log alone has no figures
    if records:
        head += (f"\n  scopes {s.scopes}  max depth {s.max_depth}  unmatched begins {s.unmatched_begins}  "
                 f"ends {s.unmatched_ends}  parse errors {s.parse_errors}")
    console.print(head)
    if log is not None:  # sentences: wrapped at the console's width
        said = describe_log(log) if log.failed else "no failure reported"
        _sentence(console, Text(f"host log {log.path}: {said}"))
        if log.ring_sizes is not None:
            rs = log.ring_sizes
            _sentence(console, Text(f"host log ring sizes: task_window={list(rs.task_window)} heap={list(rs.heap)} "
                                    f"dep_pool={list(rs.dep_pool)}"))
    table = Table(show_edge=False, pad_edge=False, box=None, header_style="bold")
    for col in ("ring", "resource", "capacity", "high water", "use", "live at exit", "largest alloc", "peak site"):
        table.add_column(col, justify="left" if col in ("resource", "peak site") else "right",
                         overflow="fold")  # a narrow terminal wraps a site, never cuts its line number
    for p in s.peaks:
        if not p.scopes:
            continue
        ratio = p.high_water_ratio
        use = "n/a" if ratio is None else f"{100 * ratio:.1f}%"
        style = "red" if ratio is not None and ratio >= 1 else "yellow" if ratio is not None and ratio >= 0.8 else ""
        table.add_row(str(p.ring), p.resource, "?" if p.capacity is None else fmt_amount(p.resource, p.capacity),
                      fmt_amount(p.resource, p.high_water), f"[{style}]{use}[/]" if style else use,
                      fmt_amount(p.resource, p.live_at_exit), fmt_amount(p.resource, p.alloc), Text(p.high_water_site))
    tm = s.tensormap
    table.add_row("-", "tensormap", "?" if tm.capacity is None else str(tm.capacity), str(tm.peak),
                  "n/a" if not tm.capacity else f"{100 * tm.peak / tm.capacity:.1f}%", "", "", Text(tm.peak_site))
    if records:
        console.print(table)
    if s.wedged:
        console.print("  [bold red]wedged scopes[/] (outermost first; the last is where the run stopped):")
        for w in s.wedged:
            console.print(f"    line {w.line}: {w.site}  depth {w.depth}  ring {w.ring}", markup=False)
    for f in fin.findings:
        line = Text(f.severity, style=_STYLE[f.severity])
        line.append(f" {f.rule}: {f.message}")
        _sentence(console, line)
    shown = fin.problems[:10]
    for prob in shown:
        console.print(f"  {prob.severity} {fin.source.path}:{prob.line}: {prob.message}", markup=False,
                      highlight=False)
    if s.parse_errors > sum(prob.severity == "error" for prob in shown):
        console.print(f"  ({s.parse_errors} parse errors in all)")
    console.print()
