"""``ringtrace watch``: the live agent (the service, its outputs and the metrics server) until a signal."""

from __future__ import annotations

import argparse
import errno
import logging

from ringtrace.cli.common import EXIT_INPUT, EXIT_OK, Consoles
from ringtrace.cli.common import err_line as _err
from ringtrace.config import Config
from ringtrace.model.records import utf8


def _stop_before_start(signum: int, frame: object) -> None:
    """SIGTERM/SIGINT while the watcher is still being set up: nothing was emitted, exit 0 as promised."""
    raise SystemExit(EXIT_OK)


def _missing(paths: list[str]) -> str:
    """Why the first of ``paths`` that names nothing now is wrong: no such path, or a pattern whose folder before
    its first wildcard does not exist ("" when every path names something).  A pattern is never expanded here: a
    tree may hold symbolic-link loops, which the watcher's own walk handles."""
    import glob
    import os

    for p in paths:
        parts = p.split(os.sep)
        fixed = os.sep.join(parts[:next((i for i, x in enumerate(parts) if glob.has_magic(x)), len(parts))])
        if not os.path.lexists(fixed or "."):  # a pattern's folder before its first wildcard: never walked here
            return f"{utf8(p)}: no such file or directory" if fixed == p else f"{utf8(fixed)}: no such directory"
    return ""


def run(args: argparse.Namespace, cfg: Config, io: Consoles) -> int:
    import asyncio
    import signal

    if cfg.once:  # a path that is not there now is a mistake, not a root to wait for: --once reads what exists
        missing = _missing(args.paths)
        if missing:
            _err(io.err, f"{missing} (watch --once reads what exists now)")
            return EXIT_INPUT

    for sig in (signal.SIGTERM, signal.SIGINT):  # the app installs its own handlers once it runs
        signal.signal(sig, _stop_before_start)
    signal.signal(signal.SIGHUP, signal.SIG_IGN)  # a rotation or a closed terminal during start-up: nothing to reopen

    from ringtrace.reading.service import assemble

    if not cfg.quiet:  # the start line, one line per finished run, the exit line (in --log-format)
        logging.getLogger("ringtrace.watch").setLevel(logging.INFO)

    try:
        service = assemble(cfg, list(args.paths))
    except (OSError, ValueError) as e:  # a WebConfigError is a ValueError
        _err(io.err, f"cannot set up outputs: {e}")
        return EXIT_INPUT

    async def serve() -> int:
        try:
            await service.start()  # the metrics server binds in the loop that serves it
        except OSError as e:
            if e.errno in (errno.EADDRINUSE, errno.EADDRNOTAVAIL, errno.EACCES):
                _err(io.err, f"--metrics-addr {cfg.metrics_addr}: {e.strerror or e} (another exporter may listen "
                          "there: pick another HOST:PORT, or port 0 for any free one)")
            else:
                _err(io.err, f"cannot set up outputs: {e}")
            return EXIT_INPUT
        return await service.run()

    code = asyncio.run(serve())
    for name, count in service.fanout.errors.items():
        if count:
            _err(io.err, f"sink {name} failed {count} time(s)")
    return code
