"""The overview of several sources that ``summary``, ``check`` and ``advise`` lead with: a row per
source, problems first, and the few words each column needs."""

from __future__ import annotations

import re
from collections.abc import Sequence

from rich.console import Console
from rich.table import Table
from rich.text import Text

from ringtrace.analysis.advise import action
from ringtrace.cli.text import Column, print_trimmed, table_widths
from ringtrace.model.records import Advice, RunAdvice, RunFinished
from ringtrace.sources.paths import distinct_names, run_folder
from ringtrace.stages.need import proven_need


def problem_counts(fin: RunFinished) -> tuple[int, int]:
    """(errors, warnings) among a run's findings and problems."""
    sev = [f.severity for f in fin.findings] + [p.severity for p in fin.problems]
    return sev.count("error"), sev.count("warning")


def one_phrase(ra: RunAdvice | None, fin: RunFinished | None = None) -> str:
    """The advice in one phrase, for the overview: the entry that matters most (the ring and resource the run's
    verdict names, then a raise or a measurement above the run's size, then a shrink), said as
    :func:`ringtrace.analysis.advise.action` says it everywhere."""
    if ra is None or not ra.advice:
        return "-"
    todo = [a for a in ra.advice if action(a) != "-" and not action(a).startswith("keep")]
    if not todo:
        return "keep the sizes"
    v = fin.verdict if fin is not None else None

    def weight(a: Advice) -> tuple[bool, bool, bool, float]:
        named = v is not None and a.resource == v.resource and v.ring in (None, a.ring)
        target = a.recommended if a.recommended is not None else a.measure_next or 0
        return (named, a.capacity is None or target > a.capacity, a.recommended is None, target / (a.capacity or 1))

    top = max(todo, key=weight)
    more = f" (+{len(todo) - 1} more)" if len(todo) > 1 else ""
    return f"ring {top.ring} {top.resource}: {action(top)}{more}"


def need_of(fin: RunFinished) -> tuple[float, str]:
    """The largest need the records prove, as a share of capacity, and ``ring R RES N%`` ("-": none)."""
    best = max(((proven_need(p, fin.summary).value / p.capacity, p) for p in fin.summary.peaks if p.capacity),
               key=lambda x: x[0], default=None)
    if best is None or best[0] <= 0:
        return 0.0, "-"
    return best[0], f"ring {best[1].ring} {best[1].resource} {100 * best[0]:.0f}%"


def problem_order(fin: RunFinished) -> tuple[int, int, float, str]:
    """Problems first: errors, then warnings, then the highest use."""
    errors, warnings = problem_counts(fin)
    return (-errors, -warnings, -need_of(fin)[0], fin.source.name)


def short_names(fins: Sequence[RunFinished]) -> tuple[list[str], str]:
    """Names that tell the rows apart, and what they all share (for the title): ``rank2/d1`` when every
    row is of one run; else the run name less its timestamp where that is still unique; else the run names,
    those that several runs' folders share told apart by their folders' paths (:func:`distinct_names`)."""
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
    folders = [run_folder(f.source.path, f.host_log.path if f.host_log is not None else "") for f in fins]
    return distinct_names([f.source.name for f in fins], folders), ""


def render_overview(console: Console, fins: Sequence[RunFinished], advice: Sequence[RunAdvice | None],
                    gate: dict[int, bool] | None = None) -> None:
    """One row per source, problems first: its verdict (when it is not simply healthy), the largest need
    the records prove, problems, advice (and ``check``'s PASS/FAIL).  Columns nobody fills are left out;
    cells wrap at word boundaries, never inside a word, a name or a number."""
    order = sorted(range(len(fins)), key=lambda i: problem_order(fins[i]))
    names, shared = short_names(fins)
    verdicts = ["" if f.verdict.kind == "healthy" else f.verdict.short for f in fins]
    cols = ["source", *(["check"] if gate is not None else []), *(["verdict"] if any(verdicts) else []),
            *(["program"] if any(f.source.labels.program for f in fins) else []), "proven need", "problems",
            "advice"]
    rows: list[dict[str, Text]] = []
    for i in order:
        fin, ra = fins[i], advice[i]
        errors, warnings = problem_counts(fin)
        style = "bold red" if errors else "yellow" if warnings else ""
        counts = " ".join(x for x in (f"{errors} err" if errors else "", f"{warnings} warn" if warnings else "")
                          if x) or "-"
        cells = {"source": Text(names[i], style=style),
                 "verdict": Text(verdicts[i], style="bold red" if fin.verdict.fails_check else "yellow"),
                 "program": Text(fin.source.labels.program), "proven need": Text(need_of(fin)[1]),
                 "problems": Text(counts, style=style), "advice": Text(one_phrase(ra, fin))}
        if gate is not None:
            cells["check"] = Text("PASS", style="green") if gate.get(id(fin), True) else Text("FAIL", style="bold red")
        rows.append(cells)
    title = f"{len(fins)} sources" + (f" of {shared}" if shared else "")
    columns = [Column(col, wrap=col not in ("check", "problems")) for col in cols]
    room = console.width - (len(cols) - 1)  # one space between columns
    widths = table_widths(columns, [[r[c] for c in cols] for r in rows], room)
    if widths is None:  # too narrow for a table: a block per source
        console.print(Text(title, style="bold"))
        for cells in rows:
            console.print(cells["source"], overflow="ignore", crop=False)
            line = Text()
            for col in cols[1:]:
                if cells[col].plain not in ("", "-"):
                    line.append_text(cells[col]).append("; ")
            line.rstrip()
            for part in (line[:-1] if line.plain.endswith(";") else line).wrap(console, max(20, console.width - 2)):
                part.rstrip()
                console.print(Text("  ").append_text(part), soft_wrap=True)
        console.print()
        return
    table = Table(show_edge=False, pad_edge=False, box=None, header_style="bold", title_justify="left",
                  title=title, collapse_padding=True)
    for col, width in zip(cols, widths, strict=True):
        table.add_column(col, overflow="fold", width=width, no_wrap=col in ("check", "problems"))
    for cells in rows:
        table.add_row(*(cells[c] for c in cols))
    print_trimmed(console, table)
    console.print()


def glance(console: Console, fins: Sequence[RunFinished], details: bool | None,
           gate: dict[int, bool] | None = None) -> list[RunFinished]:
    """With more than one source: print the overview (``gate``: ``check``'s PASS per ``id(fin)``; each run's
    advice pooled over every run of its program given, as ``advise`` pools it); returns the sources to show
    in detail."""
    if len(fins) <= 1:
        return list(fins)
    render_overview(console, fins, [f.advice for f in fins], gate)  # each run's advice: its program's
    return sorted((f for f in fins if details or any(problem_counts(f))), key=problem_order)
