"""What every command shares: the exit codes, its consoles, one error line, and its runs read from the
paths it was given (:mod:`ringtrace.gather`) with what the read says rendered on standard error."""

from __future__ import annotations

import sys
from collections.abc import Sequence
from typing import TYPE_CHECKING

from ringtrace import gather
from ringtrace.config import Config
from ringtrace.model.records import RunFinished
from ringtrace.sinks import Sink

if TYPE_CHECKING:
    from rich.console import Console

EXIT_OK, EXIT_FAIL, EXIT_INPUT, EXIT_INTERRUPTED, EXIT_PIPE = 0, 1, 2, 130, 141
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
                host_logs: Sequence[str] = ()) -> gather.Gathered:
    """Every run of ``paths`` and ``host_logs`` read (:mod:`ringtrace.gather`) into a summary sink and ``sinks``.
    What the read says goes to ``io.err``, and a progress bar for more than 8 MiB when standard error is a
    terminal."""
    planned = gather.plan(paths, host_logs)
    size = planned.size if sys.stderr.isatty() and io.err.is_terminal else 0  # each file's stat, once, for a bar
    if size > 8 << 20:
        from rich.progress import Progress

        with Progress(console=io.err, transient=True) as bar:
            task = bar.add_task("reading", total=size)
            got = gather.read(planned, cfg.thresholds, sinks, lambda n: bar.advance(task, n))
    else:
        got = gather.read(planned, cfg.thresholds, sinks)
    for text in [*got.errors, *got.notes]:  # the notes alone do not fail the read
        err_line(io.err, text)
    for fin in got.runs:
        report_problems(fin, io)
    for name, count in got.sink_errors.items():
        if count:
            err_line(io.err, f"sink {name} failed {count} time(s)")
    return got


def display_path(fin: RunFinished) -> str:
    """The path a person is shown for ``fin``: its file, or its host log for a run known from the log alone."""
    if fin.log_only and fin.host_log is not None:
        return f"(no scope_stats file; host log {fin.host_log.path})"
    return fin.source.display_path


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


