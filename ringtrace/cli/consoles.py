"""The rich consoles the commands print through, made by :class:`ringtrace.cli.common.Consoles` when a command
first prints: importing this module imports rich."""

from __future__ import annotations

import os
import sys

from rich.console import Console


class PipeConsole(Console):
    """A console that lets a closed standard output end the command with ``EXIT_PIPE``, not exit 1."""

    def on_broken_pipe(self) -> None:
        self.quiet = True
        raise BrokenPipeError


def stdout_console() -> Console:
    """Standard output: a terminal (or COLUMNS) sets the width; a pipe or file gets 160 columns."""
    return PipeConsole(soft_wrap=True, width=None if sys.stdout.isatty() or os.environ.get("COLUMNS") else 160)


def stderr_console() -> Console:
    return Console(stderr=True)
