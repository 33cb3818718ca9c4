"""``ringtrace advise``: ring sizes from every run of a program (tables and JSON)."""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence
from typing import Any

from rich.console import Console
from rich.text import Text

from ringtrace.analysis.advise import (
    ProgramAnswer,
    action,
    advice_json,
    evidence,
    fmt,
    program_advice,
    program_json,
    run_config_json,
    snippet,
)
from ringtrace.cli.common import EXIT_INPUT, EXIT_OK, Consoles
from ringtrace.cli.overview import (
    render_overview,
)
from ringtrace.cli.text import Column, print_table, sentence
from ringtrace.config import Config
from ringtrace.model.records import RunAdvice, RunFinished


def run(args: argparse.Namespace, cfg: Config, io: Consoles) -> int:
    from ringtrace.cli import common

    headroom = cfg.headroom
    if not 0 <= headroom <= 10:
        common.err_line(io.err, f"--headroom {headroom}: must be between 0 and 10")
        return EXIT_INPUT
    got = common.read_inputs(args.paths, cfg, [], io, args.host_logs)
    fins, programs = got.runs, got.programs  # each run's advice and its program's answer: one pass (gather)
    if args.program:  # the user says they are one program: each run's advice is that program's
        fins, programs = program_advice(fins, headroom, args.program)
    fins = [f for f in fins if evidence(f)]  # a run known from its host log alone is evidence too
    if got.runs and not fins:
        common.err_line(io.err, "nothing to advise from: no run read holds a scope record or a host log's failure")
        return EXIT_INPUT
    files = [f for f in fins if f.source.path]
    advice = [f.advice or RunAdvice() for f in files]
    if cfg.format == "json":
        sys.stdout.write(json.dumps(advise_json(files, advice, programs), indent=1) + "\n")
    else:
        for pa in programs:
            render_program(io.out, pa)
        if args.each:
            if len(files) > 1:
                render_overview(io.out, files, advice)
            for fin in files:
                render_advice(io.out, fin, advice[files.index(fin)])
    return EXIT_OK if got.ok else EXIT_INPUT


def advise_json(fins: Sequence[RunFinished], advice: Sequence[RunAdvice],
                programs: Sequence[ProgramAnswer] = ()) -> dict[str, Any]:
    """``advise --format json``: ``{"programs": [...], "files": [{path, labels, advice, run_config, ...}]}``."""
    files = []
    for fin, ra in zip(fins, advice, strict=True):
        lab = fin.source.labels
        files.append({"path": fin.source.path,
                      "labels": {"run": lab.run, "rank": lab.rank, "dispatch": lab.dispatch, "program": lab.program},
                      "advice": advice_json(ra.advice), "run_config": run_config_json(ra),
                      "kernel_fixes": list(ra.kernel_fixes), "evidence": ra.evidence})
    return {"programs": [program_json(pa) for pa in programs], "files": files}


_BOUNDS = (Column("lower", right=True), Column("upper", right=True), Column("estimate", right=True),
           Column("advice", wrap=True))
PROGRAM_COLUMNS = (Column("ring", right=True), Column("resource"), *_BOUNDS)
FILE_COLUMNS = (Column("ring", right=True), Column("resource"), Column("capacity", right=True), Column("basis"),
                *_BOUNDS)


def render_program(console: Console, pa: ProgramAnswer) -> None:
    """A program's answer first: its bracket per ring and resource, then the RunConfig to run next."""
    state = "final" if pa.final else "blocked" if pa.blocked else "measure"
    how = f"; grouped by {pa.grouped_by}" if pa.grouped_by else ""
    sentence(console, Text(f"{pa.program}: {pa.runs} run(s), {state}{how}", style="bold"), indent=0)
    for text in pa.blocked:
        sentence(console, Text(text, style="bold red"))
    for text in pa.notes:
        sentence(console, Text(f"note: {text}", style="yellow"))
    if pa.advice:
        print_table(console, PROGRAM_COLUMNS, [
            [Text(str(a.ring)), Text(a.resource), *(Text(fmt(a.resource, v)) for v in (a.lower_bound, a.upper_bound,
                                                                                       a.estimate)), Text(action(a))]
            for a in pa.advice], keys=2)
        for a in pa.advice:
            sentence(console, f"ring {a.ring} {a.resource}: {a.reason}")
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
    sentence(console, f"advice from {ra.evidence or 'this run' + chr(39) + 's evidence'}")
    if not ra.advice:
        console.print("  no ring in use with a paired scope: nothing to advise", markup=False)
        console.print()
        return
    print_table(console, FILE_COLUMNS, [
        [Text(str(a.ring)), Text(a.resource), Text(fmt(a.resource, a.capacity)), Text(a.basis),
         *(Text(fmt(a.resource, v)) for v in (a.lower_bound, a.upper_bound, a.estimate)), Text(action(a))]
        for a in ra.advice], keys=2)
    for a in ra.advice:
        sentence(console, f"ring {a.ring} {a.resource}: {a.reason}")
    for fix in ra.kernel_fixes:
        sentence(console, Text(f"kernel-side first: {fix}", style="yellow"))
    if ra.run_config:
        label = "RunConfig for the final sizes" if ra.final else "RunConfig for the next measurement run"
        console.print(f"  {label}:", markup=False)
        for key, value in ra.run_config:
            console.print(Text(f"    {snippet(key, value)}"))
    else:
        console.print("  RunConfig: nothing to change", markup=False)
    console.print()
