"""``ringtrace advise`` and ``ringtrace diff``: reading, then the pure ``advise``/``diff`` stages, then output.

Also the "trees at a glance" overview that ``summary``, ``check`` and ``advise`` print first when
they were given more than one source.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from collections.abc import Sequence
from typing import Any

from rich.console import Console
from rich.table import Table
from rich.text import Text

from ringtrace.analysis.advise import (
    ProgramAnswer,
    RunFacts,
    advice_json,
    advise_programs,
    advise_runs,
    fmt,
    program_json,
    run_config_json,
    snippet,
)
from ringtrace.analysis.diff import RingSide, TreeDiff
from ringtrace.config import Config
from ringtrace.model.records import Advice, Finding, RunAdvice, RunFinished
from ringtrace.model.runtime import error_name

EXIT_OK, EXIT_FAIL, EXIT_INPUT = 0, 1, 2


def add_parsers(sub: Any, command: Any, shared: Any) -> None:
    """The ``advise`` and ``diff`` subcommands (``command`` makes one, ``shared`` adds the shared flags)."""
    p = command(sub, "advise", "ring sizes from every run of a program: the proof, the answer or the next run")
    p.add_argument("paths", nargs="*", metavar="PATH",
                   help="scope_stats files, host logs or directories to search: every run of a program is evidence")
    p.add_argument("--headroom", type=float, help="share added over the need (default 0.1)")
    p.add_argument("--each", action="store_true", default=None,
                   help="also one answer per file (the table's per-file sections; JSON always has files[])")
    p.add_argument("--format", choices=("table", "json"), help="table (default) or json")
    p.add_argument("--host-log", action="append", dest="host_logs", default=[], metavar="FILE",
                   help="the runtime's host log of a run (repeatable, globs allowed): its deadlock report says "
                        "which resource was short")
    shared(p)
    p = command(sub, "diff", "what changed between two runs (files or trees matched by labels)")
    p.add_argument("paths", nargs=2, metavar="PATH", help="A (before) and B (after): files or directories")
    p.add_argument("--format", choices=("table", "json"), help="table (default) or json")
    p.add_argument("--fail-on-regression", type=float, metavar="RATIO",
                   help="exit 1 when any ratio grew by more than RATIO (e.g. 0.05)")
    shared(p)


def facts(fins: Sequence[RunFinished]) -> list[RunFacts]:
    return [RunFacts(f.source.path, f.source.labels, f.summary, f.host_log, f.wedge_causes) for f in fins]


def cmd_advise(args: argparse.Namespace, cfg: Config, out: Console, err: Console) -> int:
    from ringtrace.cli import common

    headroom = cfg.headroom
    if not 0 <= headroom <= 10:
        common.err_line(err, f"--headroom {headroom}: must be between 0 and 10")
        return EXIT_INPUT
    summary, ok = common.read_inputs(args.paths, cfg, [], err, args.host_logs)
    fins = list(summary.finished)  # a run known from its host log alone is evidence too
    run_facts = facts(fins)
    programs = advise_programs(run_facts, headroom)
    files = [f for f in fins if f.source.path]
    advice = advise_runs([rf for rf in run_facts if rf.path], headroom)
    if cfg.format == "json":
        sys.stdout.write(json.dumps(advise_json(files, advice, programs), indent=1) + "\n")
    else:
        for pa in programs:
            render_program(out, pa)
        if args.each:
            if len(files) > 1:
                render_overview(out, files, advice)
            for fin in files:
                render_advice(out, fin, advice[files.index(fin)])
    return EXIT_OK if ok else EXIT_INPUT


def advise_json(fins: Sequence[RunFinished], advice: Sequence[RunAdvice],
                programs: Sequence[ProgramAnswer] = ()) -> dict[str, Any]:
    """``advise --format json``: ``{"programs": [...], "files": [{path, labels, advice, run_config, ...}]}``."""
    files = []
    for fin, ra in zip(fins, advice, strict=True):
        lab = fin.source.labels
        files.append({"path": fin.source.path,
                      "labels": {"run": lab.run, "rank": lab.rank, "dispatch": lab.dispatch, "program": lab.program},
                      "advice": advice_json(ra.advice), "run_config": run_config_json(ra),
                      "kernel_fixes": list(ra.kernel_fixes)})
    return {"programs": [program_json(pa) for pa in programs], "files": files}


def _what(a: Advice) -> str:
    if a.recommended is not None:
        verb = "keep" if a.recommended == a.capacity else "shrink to" if a.shrink else "set"
        return f"{verb} {fmt(a.resource, a.recommended)}"
    if a.measure_next is not None:
        return f"measure at {fmt(a.resource, a.measure_next)}"
    return "-"


def render_program(console: Console, pa: ProgramAnswer) -> None:
    """A program's answer first: its bracket per ring and resource, then the RunConfig to run next."""
    state = "final" if pa.final else "blocked" if pa.blocked else "measure"
    console.print(Text(f"{pa.program}: {pa.runs} run(s), {state}", style="bold"))
    for text in pa.blocked:
        console.print(Text(f"  {text}", style="bold red"))
    for text in pa.notes:
        console.print(Text(f"  note: {text}", style="yellow"))
    if pa.advice:
        table = Table(show_edge=False, pad_edge=False, box=None, header_style="bold")
        for col in ("ring", "resource", "lower", "upper", "estimate", "advice"):
            table.add_column(col, justify="left" if col in ("resource", "advice") else "right")
        for a in pa.advice:
            table.add_row(str(a.ring), a.resource, fmt(a.resource, a.lower_bound), fmt(a.resource, a.upper_bound),
                          fmt(a.resource, a.estimate), _what(a))
        console.print(table)
        for a in pa.advice:
            console.print(Text(f"  ring {a.ring} {a.resource}: {a.reason}"))
    if pa.run_config:
        label = "RunConfig (final sizes)" if pa.final else "RunConfig for the next run (a measurement)"
        console.print(f"  {label}:", markup=False)
        for key, value in pa.run_config:
            console.print(Text(f"    {snippet(key, value)}"))
    elif not pa.blocked:
        console.print("  RunConfig: compile defaults (nothing to change)", markup=False)
    console.print()


def render_advice(console: Console, fin: RunFinished, ra: RunAdvice) -> None:
    console.print(Text(fin.source.path, style="bold"))
    if not ra.advice:
        console.print("  no ring in use with a paired scope: nothing to advise", markup=False)
        console.print()
        return
    table = Table(show_edge=False, pad_edge=False, box=None, header_style="bold")
    for col in ("ring", "resource", "capacity", "basis", "lower", "upper", "estimate", "advice"):
        table.add_column(col, justify="left" if col in ("resource", "basis", "advice") else "right")
    for a in ra.advice:
        what = _what(a)
        table.add_row(str(a.ring), a.resource, fmt(a.resource, a.capacity), a.basis, fmt(a.resource, a.lower_bound),
                      fmt(a.resource, a.upper_bound), fmt(a.resource, a.estimate), what)
    console.print(table)
    for a in ra.advice:
        console.print(Text(f"  ring {a.ring} {a.resource}: {a.reason}"))
    for fix in ra.kernel_fixes:
        console.print(Text(f"  kernel-side first: {fix}", style="yellow"))
    if ra.run_config:
        label = "RunConfig for the final sizes" if ra.final else "RunConfig for the next measurement run"
        console.print(f"  {label}:", markup=False)
        for key, value in ra.run_config:
            console.print(Text(f"    {snippet(key, value)}"))
    else:
        console.print("  RunConfig: nothing to change", markup=False)
    console.print()


# -- trees at a glance -------------------------------------------------------------------------------


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
        cause = fin.wedge_causes[-1] if fin.wedge_causes else None
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


def add_details(p: argparse.ArgumentParser) -> None:
    p.add_argument("--details", action="store_true", default=None,
                   help="with several sources: details for every source, not only those with errors or warnings")


def glance(console: Console, fins: Sequence[RunFinished], details: bool | None,
           gate: dict[int, bool] | None = None) -> list[RunFinished]:
    """With more than one source: print the overview (``gate``: ``check``'s PASS per ``id(fin)``);
    returns the sources to show in detail."""
    if len(fins) <= 1:
        return list(fins)
    render_overview(console, fins, [f.advice for f in fins], gate)
    return sorted((f for f in fins if details or any(problem_counts(f))), key=problem_order)


# -- diff -------------------------------------------------------------------------------------------


def cmd_diff(args: argparse.Namespace, cfg: Config, out: Console, err: Console) -> int:
    from ringtrace.analysis.diff import match
    from ringtrace.cli import common

    limit = args.fail_on_regression
    if limit is not None and limit < 0:
        common.err_line(err, f"--fail-on-regression {limit}: must be >= 0")
        return EXIT_INPUT
    a, ok_a = common.read_inputs([args.paths[0]], cfg, [], err)
    b, ok_b = common.read_inputs([args.paths[1]], cfg, [], err)
    tree = match(a.finished, b.finished, limit)
    if cfg.format == "json":
        sys.stdout.write(json.dumps(diff_json(tree), indent=1) + "\n")
    else:
        render_diff(out, tree)
    if not (ok_a and ok_b):
        return EXIT_INPUT
    return EXIT_FAIL if any(p.regressions for p in tree.pairs) else EXIT_OK


def _side_json(side: RingSide | None) -> dict[str, Any] | None:
    if side is None:
        return None
    return {"capacity": side.capacity, "high_water": side.high_water, "alloc": side.alloc,
            "live_at_exit": side.live_at_exit,
            "high_water_ratio": None if side.high_water_ratio is None else round(side.high_water_ratio, 6),
            "alloc_ratio": None if side.alloc_ratio is None else round(side.alloc_ratio, 6),
            "live_at_exit_ratio": None if side.live_at_exit_ratio is None else round(side.live_at_exit_ratio, 6),
            "high_water_site": side.high_water_site}


def diff_json(tree: TreeDiff) -> dict[str, Any]:
    """``diff --format json``: ``{"pairs": [...], "unmatched": [...]}`` (README)."""
    def finding(f: Finding) -> dict[str, Any]:
        return {"rule": f.rule, "severity": f.severity, "message": f.message}
    pairs = []
    for p in tree.pairs:
        lab = p.labels
        pairs.append({"a": p.a, "b": p.b,
                      "labels": {"run": lab.run, "rank": lab.rank, "dispatch": lab.dispatch, "program": lab.program},
                      "rings": [{"ring": d.ring, "resource": d.resource, "before": _side_json(d.before),
                                 "after": _side_json(d.after)} for d in p.rings],
                      "findings_added": [finding(f) for f in p.findings_added],
                      "findings_removed": [finding(f) for f in p.findings_removed],
                      "scopes": {"before": p.scopes_before, "after": p.scopes_after},
                      "notes": list(p.notes), "regressions": list(p.regressions)})
    return {"pairs": pairs, "unmatched": list(tree.unmatched)}


def _short(resource: str, n: int | None) -> str:
    """A figure in a few characters (``768.0K``, ``1.5M``; counts as they are): one diff row per ring."""
    if n is None:
        return "-"
    text = fmt(resource, n)
    return text.replace(" KiB", "K").replace(" MiB", "M").replace(" GiB", "G").replace(" B", "B")


def _arrow(resource: str, before: int | None, after: int | None) -> str:
    """``before→after`` (the figure alone when it did not change); the JSON has the exact values."""
    if before == after:
        return _short(resource, after)
    return f"{_short(resource, before)}→{_short(resource, after)}"


def _pct_arrow(before: float | None, after: float | None) -> str:
    def pct(x: float | None) -> str:
        return "-" if x is None else f"{100 * x:.0f}%"
    if before is not None and after is not None and round(before, 3) == round(after, 3):
        return pct(after)
    return f"{pct(before)}→{pct(after)}" if before != after else "-"


def render_diff(console: Console, tree: TreeDiff) -> None:
    for p in tree.pairs:
        console.print(Text(f"A {p.a}\nB {p.b}", style="bold"))
        table = Table(show_edge=False, pad_edge=False, box=None, header_style="bold")
        for col in ("ring", "resource", "capacity", "high water", "use", "pinned (alloc)", "live at exit"):
            table.add_column(col, justify="left" if col == "resource" else "right", no_wrap=True)
        for d in p.rings:
            b, a = d.before, d.after
            table.add_row(str(d.ring), d.resource,
                          _arrow(d.resource, b.capacity if b else None, a.capacity if a else None),
                          _arrow(d.resource, b.high_water if b else None, a.high_water if a else None),
                          _pct_arrow(b.high_water_ratio if b else None, a.high_water_ratio if a else None),
                          _arrow(d.resource, b.alloc if b else None, a.alloc if a else None),
                          _arrow(d.resource, b.live_at_exit if b else None, a.live_at_exit if a else None))
        console.print(table)
        for d in p.rings:
            if d.before and d.after and d.before.high_water_site != d.after.high_water_site:
                console.print(Text(f"  ring {d.ring} {d.resource} peak site: {d.before.high_water_site} -> "
                                   f"{d.after.high_water_site}"))
        console.print(f"  scopes {p.scopes_before} -> {p.scopes_after}", markup=False)
        for f in p.findings_added:
            console.print(Text(f"  + {f.severity} {f.rule}: {f.message}", style="red" if f.severity == "error" else ""))
        for f in p.findings_removed:
            console.print(Text(f"  - {f.severity} {f.rule}: {f.message}", style="green"))
        for note in p.notes:
            console.print(Text(f"  note: {note}", style="yellow"))
        for reg in p.regressions:
            console.print(Text(f"  REGRESSION {reg}", style="bold red"))
        console.print()
    for u in tree.unmatched:
        console.print(Text(f"unmatched {u}", style="yellow"))
