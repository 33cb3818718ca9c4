"""``ringtrace check``: the CI gate over the same reading as ``summary``: a run fails when its verdict's
severity is ``error``, or a limit the user gave (``--max-ratio``, ``--expect``) is crossed."""

from __future__ import annotations

import argparse

from ringtrace.cli.common import EXIT_FAIL, EXIT_INPUT, EXIT_OK, Consoles, display_path
from ringtrace.cli.common import err_line as _err
from ringtrace.cli.common import read_inputs as _read
from ringtrace.cli.expect import ExpectError, expect_reasons, parse_expect
from ringtrace.cli.overview import glance
from ringtrace.cli.text import sentence
from ringtrace.config import Config
from ringtrace.model.records import RunFinished
from ringtrace.model.runtime import fmt_amount
from ringtrace.stages.need import proven_need


def check_failures(fin: RunFinished, cfg: Config) -> list[str]:
    """Why ``fin`` fails the gate (empty when it passes): its verdict, when its severity is ``error``; a
    proven need over ``--max-ratio`` of capacity, when the user gave that limit."""
    out = [fin.verdict.text] if fin.verdict.fails_check else []
    if cfg.max_ratio is None:
        return out
    for p in fin.summary.peaks:
        if p.resource not in cfg.resources or not p.capacity:
            continue
        need = proven_need(p, fin.summary)
        if need.value and need.value / p.capacity > cfg.max_ratio:
            out.append(f"ring {p.ring} {p.resource}: a proven need of {fmt_amount(p.resource, need.value)} is "
                       f"{100 * need.value / p.capacity:.1f}% of capacity (limit {100 * cfg.max_ratio:.0f}%): "
                       f"{need.why}")
    return out


def run(args: argparse.Namespace, cfg: Config, io: Consoles) -> int:
    try:
        expect = parse_expect(args.expect) if args.expect else None
    except ExpectError as e:
        _err(io.err, str(e))
        return EXIT_INPUT
    got = _read(args.paths, cfg, [], io, args.host_logs)
    summary, ok = got.summary, got.ok
    failed = False
    verdicts = {id(fin): check_failures(fin, cfg) + expect_reasons(fin, expect) for fin in summary.finished}
    glance(io.out, summary.finished, True, {k: not v for k, v in verdicts.items()})  # a line each below
    for fin in summary.finished:
        reasons = verdicts[id(fin)]
        failed = failed or bool(reasons)
        # without its metadata line (fatal flag, capacities) a file cannot be assessed: never "ok"
        unassessed = fin.unreadable or (fin.summary.meta is None and not fin.log_only)
        if unassessed:
            ok = False
            if not fin.unreadable:
                reasons.append("not assessed: the metadata line could not be read (fatal flag and capacities unknown)")
        status = "UNREADABLE" if unassessed else "FAIL" if reasons else "ok"
        io.out.print(f"{status} {display_path(fin)}", markup=False, highlight=False,
                     soft_wrap=True)  # one line, whatever its length: a path is never broken (grep FAIL)
        for reason in reasons:  # sentences, wrapped at the console's width
            sentence(io.out, reason)
    if not ok:
        return EXIT_INPUT
    return EXIT_FAIL if failed else EXIT_OK
