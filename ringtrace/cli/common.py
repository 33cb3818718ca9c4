"""What every command shares: the exit codes, its consoles, one error line, and the one read of every input
(files, directories, host logs) into the summary sink plus the command's own sinks.  Blocking I/O: the
commands run nothing else."""

from __future__ import annotations

import sys
import time
from collections.abc import Sequence
from typing import TYPE_CHECKING

from ringtrace.analysis.advise import with_program_advice
from ringtrace.config import Config
from ringtrace.hostlog import plan as hostlog_cli
from ringtrace.hostlog.parse import is_log_only
from ringtrace.model.records import RunFinished
from ringtrace.reading.oneshot import read_files
from ringtrace.sinks import FanOut, Sink
from ringtrace.sinks.summary import SummarySink
from ringtrace.sources.paths import find_inputs

if TYPE_CHECKING:
    from rich.console import Console

EXIT_OK, EXIT_FAIL, EXIT_INPUT, EXIT_INTERRUPTED, EXIT_PIPE = 0, 1, 2, 130, 141
FLUSH_SECONDS = 120.0
"""How long a one-shot command's sinks may take to push out what they hold at the end (OTLP spans,
retries included): the deadline of their ``flush``."""
MAX_PROBLEMS_SHOWN = 20


class Consoles:
    """A command's standard output and error as rich consoles (``run(args, cfg, io)``), each made the first
    time it is asked for (unless given): a command that prints nothing through rich does not import it (~17 ms
    of start-up; ``summary --format json`` writes its JSON itself, and says nothing on stderr about a file read
    cleanly)."""

    def __init__(self, out: Console | None = None, err: Console | None = None) -> None:
        self._out, self._err = out, err

    @property
    def out(self) -> Console:
        """Standard output (:func:`ringtrace.cli.consoles.stdout_console`: 160 columns to a pipe or file, a
        closed pipe raises BrokenPipeError)."""
        if self._out is None:
            from ringtrace.cli.consoles import stdout_console

            self._out = stdout_console()
        return self._out

    @property
    def err(self) -> Console:
        """Standard error."""
        if self._err is None:
            from ringtrace.cli.consoles import stderr_console

            self._err = stderr_console()
        return self._err


def err_line(console: Console, text: str) -> None:
    console.print(f"ringtrace: {text}", markup=False, highlight=False, soft_wrap=True)


def read_inputs(paths: list[str], cfg: Config, sinks: list[Sink], io: Consoles,
          host_logs: Sequence[str] = ()) -> tuple[SummarySink, bool]:
    """Read every input into a summary sink (+ ``sinks``); returns it and whether all input was readable.
    Problems go to ``io.err``, and a progress bar for more than 8 MiB when standard error is a terminal.

    The inputs are ``paths`` (scope_stats files, host logs, directories: :func:`ringtrace.sources.paths.find_inputs`)
    and ``host_logs`` (``--host-log``); the host logs of the runs' folders are found and used as if given
    (:mod:`ringtrace.hostlog.plan`).  A run known from a host log alone is reported like a file."""
    files, plan = hostlog_cli.plan_for_read(host_logs, paths, find_inputs(paths))
    alone = {f for f in files if str(f) in paths}  # a file named on its own is that one run
    errors = list(plan.errors)
    summary = SummarySink()
    fanout = FanOut([summary, *sinks])
    if any(s.blocks for s in sinks):  # a network sink: every sink on an outlet, so sending overlaps reading
        fanout.start_oneshot()
    total = sum(f.stat().st_size for f in files if f.exists())
    if total > 8 << 20 and sys.stderr.isatty() and io.err.is_terminal:
        from rich.progress import Progress

        with Progress(console=io.err, transient=True) as bar:
            task = bar.add_task("reading", total=total)
            errors += read_files(files, fanout, cfg.thresholds, lambda n: bar.advance(task, n), plan.for_file,
                                 alone)
    else:
        errors += read_files(files, fanout, cfg.thresholds, host_logs=plan.for_file, alone=alone)
    fanout.receive_all(hostlog_cli.log_only_events(plan, cfg.thresholds))
    fanout.flush(time.monotonic() + FLUSH_SECONDS)
    fanout.close()
    summary.finished[:] = with_program_advice(summary.finished, cfg.headroom)  # one answer per program
    for text in [*errors, *plan.problems, *plan.notes]:  # the problems and notes alone do not fail the read
        err_line(io.err, text)
    ok = not errors
    for fin in summary.finished:
        report_problems(fin, io)
        if unreadable(fin):
            ok = False
    for name, count in fanout.errors.items():
        if count:
            err_line(io.err, f"sink {name} failed {count} time(s)")
            ok = False
    return summary, ok


def unreadable(fin: RunFinished) -> bool:
    if is_log_only(fin):
        return False
    return any(p.severity == "error" and p.reason in ("empty_file", "unsupported_version", "not_scope_stats")
               for p in fin.problems) or (
        fin.summary.records == 0 and fin.summary.meta is None)


def report_problems(fin: RunFinished, io: Consoles) -> None:
    shown = 0
    for p in fin.problems:
        if shown == MAX_PROBLEMS_SHOWN:
            break
        shown += 1
        where = f"{fin.source.path}:{p.line}" if p.line else fin.source.path
        err_line(io.err, f"{where}: {p.severity}: {p.message}")
    more = fin.summary.parse_errors - sum(1 for p in fin.problems[:shown] if p.severity == "error")
    if more > 0:
        err_line(io.err, f"{fin.source.path}: {more} more parse error(s) not shown")


