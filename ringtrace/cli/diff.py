"""``ringtrace diff``: what changed between two runs or trees (tables and JSON)."""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any

from rich.console import Console
from rich.text import Text

from ringtrace.analysis.advise import (
    fmt,
)
from ringtrace.analysis.diff import RingSide, TreeDiff
from ringtrace.cli.common import EXIT_FAIL, EXIT_INPUT, EXIT_OK, Consoles
from ringtrace.cli.text import Column, print_table, sentence
from ringtrace.config import Config
from ringtrace.model.records import Finding


def run(args: argparse.Namespace, cfg: Config, io: Consoles) -> int:
    from ringtrace.analysis.diff import match
    from ringtrace.cli import common

    limit = args.fail_on_regression
    if limit is not None and limit < 0:
        common.err_line(io.err, f"--fail-on-regression {limit}: must be >= 0")
        return EXIT_INPUT
    a = common.read_inputs([args.paths[0]], cfg, [], io)
    b = common.read_inputs([args.paths[1]], cfg, [], io)
    tree = match(a.runs, b.runs, limit)
    if cfg.format == "json":
        sys.stdout.write(json.dumps(diff_json(tree), indent=1) + "\n")
    else:
        render_diff(io.out, tree)
    if not (a.ok and b.ok):
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


DIFF_COLUMNS = (Column("ring", right=True), Column("resource"), Column("capacity", right=True),
                Column("high water", right=True), Column("use", right=True), Column("pinned (alloc)", right=True),
                Column("live at exit", right=True))


def render_diff(console: Console, tree: TreeDiff) -> None:
    for p in tree.pairs:
        console.print(Text(f"A {p.a}\nB {p.b}", style="bold"), soft_wrap=True)
        print_table(console, DIFF_COLUMNS, [
            [Text(str(d.ring)), Text(d.resource),
             *(Text(_arrow(d.resource, getattr(d.before, f, None), getattr(d.after, f, None)))
               for f in ("capacity", "high_water")),
             Text(_pct_arrow(d.before.high_water_ratio if d.before else None,
                             d.after.high_water_ratio if d.after else None)),
             *(Text(_arrow(d.resource, getattr(d.before, f, None), getattr(d.after, f, None)))
               for f in ("alloc", "live_at_exit"))]
            for d in p.rings], keys=2)
        for d in p.rings:
            if d.before and d.after and d.before.high_water_site != d.after.high_water_site:
                sentence(console, f"ring {d.ring} {d.resource} peak site: {d.before.high_water_site} -> "
                                  f"{d.after.high_water_site}")
        console.print(f"  scopes {p.scopes_before} -> {p.scopes_after}", markup=False)
        for f in p.findings_added:
            style = "red" if f.severity == "error" else ""
            sentence(console, Text(f"+ {f.severity} {f.rule}: {f.message}", style=style))
        for f in p.findings_removed:
            sentence(console, Text(f"- {f.severity} {f.rule}: {f.message}", style="green"))
        for note in p.notes:
            sentence(console, Text(f"note: {note}", style="yellow"))
        for reg in p.regressions:
            sentence(console, Text(f"REGRESSION {reg}", style="bold red"))
        console.print()
    for u in tree.unmatched:
        console.print(Text(f"unmatched {u}", style="yellow"))
