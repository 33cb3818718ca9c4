"""``ringtrace summary``: per file, the per-ring peaks, peak sites, wedged scopes, findings and advice."""

from __future__ import annotations

import argparse
import json
import sys

from ringtrace.cli.common import EXIT_INPUT, EXIT_OK, Consoles
from ringtrace.cli.common import read_inputs as _read
from ringtrace.config import Config


def run(args: argparse.Namespace, cfg: Config, io: Consoles) -> int:
    got = _read(args.paths, cfg, [], io, args.host_logs)
    summary, ok = got.summary, got.ok
    if cfg.format == "json":
        sys.stdout.write(json.dumps(summary.to_json(), indent=1) + "\n")
    else:  # the tables' modules (rich.table, the report package) only when tables are printed
        from ringtrace.cli.overview import glance
        from ringtrace.cli.text import render_run

        readable = [f for f in summary.finished if not f.unreadable]  # the others: one line on stderr
        for fin in glance(io.out, readable, args.details):
            render_run(io.out, fin, cfg.near)
    return EXIT_OK if ok else EXIT_INPUT
