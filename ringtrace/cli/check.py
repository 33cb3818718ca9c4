"""``ringtrace check``: the CI gate over the same reading as ``summary``."""

from __future__ import annotations

import argparse

from rich.console import Console

from ringtrace.cli.common import EXIT_FAIL, EXIT_INPUT, EXIT_OK
from ringtrace.cli.common import err_line as _err
from ringtrace.cli.common import read_inputs as _read
from ringtrace.cli.common import unreadable as _unreadable
from ringtrace.cli.overview import glance
from ringtrace.config import Config
from ringtrace.hostlog import plan as hostlog_cli
from ringtrace.hostlog.parse import is_log_only
from ringtrace.model.records import RunFinished


def check_failures(fin: RunFinished, cfg: Config) -> list[str]:
    """Why ``fin`` fails the gate (empty when it passes)."""
    s = fin.summary
    out: list[str] = []
    for p in s.peaks:  # what is held at a scope exit, as summary's findings judge it (README, "One verdict")
        ratio = p.live_at_exit_ratio
        if p.scopes and p.resource in cfg.resources and ratio is not None and ratio > cfg.max_ratio:
            out.append(f"ring {p.ring} {p.resource}: {100 * ratio:.1f}% of capacity still held when scope "
                       f"{p.live_at_exit_site} exits (limit {100 * cfg.max_ratio:.0f}%)")
    if s.wedged:
        w = s.wedged[-1]
        out.append(f"wedged in {w.site} (depth {w.depth}, ring {w.ring}, line {w.line})")
    if s.meta is not None and s.meta.fatal:
        out.append("fatal: true")
    return out


def run(args: argparse.Namespace, cfg: Config, out: Console, err: Console) -> int:
    try:
        expect = hostlog_cli.parse_expect(args.expect) if args.expect else None
    except hostlog_cli.ExpectError as e:
        _err(err, str(e))
        return EXIT_INPUT
    summary, ok = _read(args.paths, cfg, [], err, args.host_logs)
    failed = False
    verdicts = {id(fin): check_failures(fin, cfg) + hostlog_cli.check_reasons(fin, expect) for fin in summary.finished}
    glance(out, summary.finished, True, {k: not v for k, v in verdicts.items()})  # then a line each
    for fin in summary.finished:
        reasons = verdicts[id(fin)]
        failed = failed or bool(reasons)
        # without its metadata line (fatal flag, capacities) a file cannot be assessed: never "ok"
        unassessed = _unreadable(fin) or (fin.summary.meta is None and not is_log_only(fin))
        if unassessed:
            ok = False
            if not _unreadable(fin):
                reasons.append("not assessed: the metadata line could not be read (fatal flag and capacities unknown)")
        status = "UNREADABLE" if unassessed else "FAIL" if reasons else "ok"
        out.print(f"{status} {hostlog_cli.display_path(fin)}" + "".join(f"\n  {r}" for r in reasons), markup=False,
                  highlight=False)
    if not ok:
        return EXIT_INPUT
    return EXIT_FAIL if failed else EXIT_OK
