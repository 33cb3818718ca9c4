"""Command line: argparse -> Config -> the command.  ``main(argv) -> exit code``.

Exit codes (also in the README):

* 0  success (``check``: every ring under the limit, nothing wedged or fatal)
* 1  ``check`` found a ring over the limit, a wedged scope or a fatal run; ``convert``: spans failed
     to reach the OTLP endpoint; ``demo``: a simulated run was not followed to its end
* 2  usage error, invalid setting, or unreadable input (missing path, directory with neither
     scope_stats files nor a host log, a PATH that is neither, file that cannot be opened, file
     with no readable content; ``check``: a file whose metadata line cannot be read, which it
     cannot assess)
* 130 interrupted (Ctrl-C) for the one-shot commands; ``watch`` exits 0 on SIGINT/SIGTERM
* 141 standard output closed early (``ringtrace summary ... | head``), as for SIGPIPE
"""

from __future__ import annotations

import argparse
import importlib
import json
import logging
import os
import sys
from collections.abc import Sequence

from ringtrace import config as config_mod
from ringtrace.cli.common import EXIT_INPUT, EXIT_INTERRUPTED, EXIT_PIPE, Consoles
from ringtrace.cli.common import err_line as _err
from ringtrace.cli.parser import HELP, build_parser
from ringtrace.config import Config, ConfigError

__all__ = ["HELP", "build_parser", "main", "run"]

COMMANDS: tuple[str, ...] = tuple(HELP)
"""One module per command, ``ringtrace.cli.<name>``, each with ``run(args, cfg, io) -> exit code`` (``io``: its
:class:`~ringtrace.cli.common.Consoles`, made when first printed to): imported when its command runs, so a
command loads only what it uses."""


def _config(args: argparse.Namespace) -> Config:
    return config_mod.build({k: v for k, v in vars(args).items()
                             if k not in ("command", "paths", "dir", "pace", "serve", "output")})


class _JsonFormatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        return json.dumps({"ts": record.created, "level": record.levelname.lower(), "logger": record.name,
                           "msg": record.getMessage()})


def _setup_logging(level: str, fmt: str) -> None:
    handler = logging.StreamHandler(sys.stderr)
    text = logging.Formatter("ringtrace: %(levelname)s: %(message)s")
    handler.setFormatter(_JsonFormatter() if fmt == "json" else text)
    root = logging.getLogger("ringtrace")
    root.handlers[:] = [handler]
    root.setLevel(level.upper())
    root.propagate = False


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    io = Consoles()
    try:
        cfg = _config(args)
    except ConfigError as e:
        _err(io.err, str(e))
        return EXIT_INPUT
    _setup_logging(cfg.log_level, cfg.log_format)
    command = importlib.import_module(f"ringtrace.cli.{args.command}")
    try:
        code: int = command.run(args, cfg, io)
    except KeyboardInterrupt:
        return EXIT_INTERRUPTED
    except BrokenPipeError:  # the reader went away (`| head`): stop quietly
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return EXIT_PIPE
    return code


def run() -> None:
    sys.exit(main())
