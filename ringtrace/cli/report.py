"""``ringtrace report``: one self-contained HTML page of runs."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from ringtrace.cli.common import EXIT_INPUT, EXIT_OK, Consoles
from ringtrace.cli.common import err_line as _err
from ringtrace.cli.common import read_inputs as _read
from ringtrace.config import Config
from ringtrace.files import write_atomic


def run(args: argparse.Namespace, cfg: Config, io: Consoles) -> int:
    from ringtrace.report import ReportCollector, render, report_paths

    collector = ReportCollector()
    got = _read(args.paths, cfg, [collector], io, args.host_logs)
    summary, ok = got.summary, got.ok
    if not summary.finished:
        return EXIT_INPUT
    page = render(collector, cfg.headroom, f"ringtrace report: {report_paths(summary.finished)}")
    if args.output == "-":  # standard output: the page alone
        sys.stdout.write(page)
        sys.stdout.flush()
        return EXIT_OK if ok else EXIT_INPUT
    target = Path(args.output)
    try:
        write_atomic(target, page.encode("utf-8"))
    except OSError as e:
        _err(io.err, f"{args.output}: cannot write: {e.strerror or e}")
        return EXIT_INPUT
    io.out.print(f"wrote {args.output}: {len(summary.finished)} source(s), {len(page.encode()) / 1024:.0f} KiB; "
              "open it in any browser (no network needed)", highlight=False)
    return EXIT_OK if ok else EXIT_INPUT
