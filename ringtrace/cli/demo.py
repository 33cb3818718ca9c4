"""``ringtrace demo``: the simulator writes build trees live, and every output follows them."""

from __future__ import annotations

import argparse

from ringtrace.cli.common import EXIT_INPUT, Consoles
from ringtrace.cli.common import err_line as _err
from ringtrace.config import Config


def run(args: argparse.Namespace, cfg: Config, io: Consoles) -> int:
    from ringtrace.demo.run import run_demo

    try:
        return run_demo(cfg, args.dir, args.pace, io.out, args.serve)
    except (OSError, ValueError) as e:  # a WebConfigError is a ValueError
        _err(io.err, f"cannot set up outputs: {e}")
        return EXIT_INPUT
