"""The overview of several sources that ``summary``, ``check`` and ``advise`` lead with: a row per
source, problems first, and the few words each column needs."""

from __future__ import annotations

import re
from collections.abc import Sequence

from rich.console import Console
from rich.table import Table
from rich.text import Text

from ringtrace.analysis.advise import (
    fmt,
)
from ringtrace.model.records import RunAdvice, RunFinished
from ringtrace.model.runtime import error_name


def problem_counts(fin: RunFinished) -> tuple[int, int]:
    """(errors, warnings) among a run's findings and problems."""
    sev = [f.severity for f in fin.findings] + [p.severity for p in fin.problems]
    return sev.count("error"), sev.count("warning")


def one_phrase(ra: RunAdvice | None) -> str:
    """The advice in one phrase, for the overview."""
    if ra is None or not ra.advice:
        return "-"
    grow = [a for a in ra.advice if a.recommended is not None and a.capacity and a.recommended > a.capacity]
    shrink = [a for a in ra.advice if a.shrink]
    measure = [a for a in ra.advice if a.recommended is None and a.measure_next is not None]
    raise_ = [a for a in measure if not a.capacity or (a.measure_next or 0) > a.capacity]
    if raise_:
        a = max(raise_, key=lambda x: (x.basis == "wedged", (x.measure_next or 0) / (x.capacity or 1)))
        more = f" (+{len(measure) - 1} more)" if len(measure) > 1 else ""
        return f"measure ring {a.ring} {a.resource} at {fmt(a.resource, a.measure_next)}{more}"
    if measure:
        return f"measure {len(measure)} smaller size(s)"
    if grow:
        a = max(grow, key=lambda x: (x.recommended or 0) / (x.capacity or 1))
        return f"raise ring {a.ring} {a.resource} to {fmt(a.resource, a.recommended)}"
    if shrink:
        return f"shrink {len(shrink)} ring resource(s)"
    return "sizes fit"


def failure_of(fin: RunFinished) -> str:
    """What stopped the run, in a few words: the host log's code and ring, the wedge diagnosis, or fatal."""
    log = fin.host_log
    if log is not None and log.failed:
        code = log.failure_code
        name = log.failure_name or (f"code {code}" if code is not None else "failed")
        return name + (f" ring {log.ring}" if log.ring is not None else "")
    if fin.summary.wedged:
        cause = fin.wedge_cause
        known = error_name(cause.code) if cause is not None and cause.code is not None else None
        how = "" if known is None else f" {known}" if cause is not None and cause.confirmed else f" likely {known}"
        return f"wedged{how} ring {fin.summary.wedged[-1].ring}"
    if fin.summary.meta is not None and fin.summary.meta.fatal:
        return "fatal"
    return ""


def problem_order(fin: RunFinished) -> tuple[int, int, float, str]:
    """Problems first: errors, then warnings, then the highest use."""
    errors, warnings = problem_counts(fin)
    worst = max((p.high_water_ratio or 0.0 for p in fin.summary.peaks if p.scopes), default=0.0)
    return (-errors, -warnings, -worst, fin.source.name)


def short_names(fins: Sequence[RunFinished]) -> tuple[list[str], str]:
    """Names that tell the rows apart, and what they all share (for the title): ``rank2/d1`` when every
    row is of one run; else the run name less its timestamp where that is still unique."""
    runs = {f.source.labels.run for f in fins}
    out = []
    for f in fins:
        lab = f.source.labels
        tail = "/".join(p for p in (f"rank{lab.rank}" if lab.rank else "", f"d{lab.dispatch}" if lab.dispatch else "")
                        if p)
        out.append(tail or f.source.name)
    if len(runs) == 1 and all(f.source.labels.rank for f in fins):
        return out, next(iter(runs))
    stripped = [re.sub(r"_\d{8}_\d{6}$", "", f.source.labels.run) or f.source.name for f in fins]
    keys = [f"{s}/{t}" if f.source.labels.rank else s for s, t, f in zip(stripped, out, fins, strict=True)]
    if len(set(keys)) == len(keys):
        return keys, ""
    return [f.source.name for f in fins], ""


def render_overview(console: Console, fins: Sequence[RunFinished], advice: Sequence[RunAdvice | None],
                    gate: dict[int, bool] | None = None) -> None:
    """One row per source, problems first: what stopped it, its worst resource, problems, advice (and
    ``check``'s PASS/FAIL).  Columns nobody fills are left out; cells wrap, they are never cut."""
    order = sorted(range(len(fins)), key=lambda i: problem_order(fins[i]))
    names, shared = short_names(fins)
    failures = [failure_of(f) for f in fins]
    cols = ["source", *(["check"] if gate is not None else []), *(["failure"] if any(failures) else []),
            *(["program"] if any(f.source.labels.program for f in fins) else []), "worst", "problems", "advice"]
    table = Table(show_edge=False, pad_edge=False, box=None, header_style="bold", title_justify="left",
                  title=f"{len(fins)} sources" + (f" of {shared}" if shared else ""), collapse_padding=True)
    widest = min(max((len(w) for f in failures for w in f.split()), default=0), 24, console.width // 5)
    for col in cols:  # an error name stays whole where the terminal allows
        table.add_column(col, overflow="fold", ratio={"failure": 3, "advice": 3, "source": 3, "worst": 2}.get(col),
                         no_wrap=col in ("check", "problems"), min_width=widest if col == "failure" else None)
    for i in order:
        fin, ra = fins[i], advice[i]
        errors, warnings = problem_counts(fin)
        worst = max((p for p in fin.summary.peaks if p.scopes and p.high_water_ratio is not None),
                    key=lambda p: p.high_water_ratio or 0.0, default=None)
        style = "bold red" if errors else "yellow" if warnings else ""
        counts = " ".join(x for x in (f"{errors} err" if errors else "", f"{warnings} warn" if warnings else "")
                          if x) or "-"
        cells: dict[str, Text | str] = {
            "source": Text(names[i], style=style),
            "failure": Text(failures[i], style="bold red"),
            "program": Text(fin.source.labels.program),
            "worst": "-" if worst is None or worst.high_water_ratio is None else
                     f"ring {worst.ring} {worst.resource} {100 * worst.high_water_ratio:.0f}%",
            "problems": Text(counts, style=style), "advice": Text(one_phrase(ra))}
        if gate is not None:
            cells["check"] = Text("PASS", style="green") if gate.get(id(fin), True) else Text("FAIL", style="bold red")
        table.add_row(*(cells[c] for c in cols))
    console.print(table)
    console.print()


def glance(console: Console, fins: Sequence[RunFinished], details: bool | None,
           gate: dict[int, bool] | None = None) -> list[RunFinished]:
    """With more than one source: print the overview (``gate``: ``check``'s PASS per ``id(fin)``);
    returns the sources to show in detail."""
    if len(fins) <= 1:
        return list(fins)
    render_overview(console, fins, [f.advice for f in fins], gate)
    return sorted((f for f in fins if details or any(problem_counts(f))), key=problem_order)
