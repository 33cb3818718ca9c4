"""The command line's parser: every command, its flags, ``--help`` text, examples and exit codes.

Imports only what the flags need (the settings' choices): a command's own module is imported by
:func:`ringtrace.cli.main` when that command runs.
"""

from __future__ import annotations

import argparse
from typing import Any

from ringtrace import config as config_mod
from ringtrace.model.runtime import RESOURCES
from ringtrace.reading.registry import SinkFlags


class _Version(argparse.Action):
    """``--version``: the installed version, looked up only when asked (``importlib.metadata`` costs
    tens of milliseconds at every start otherwise)."""

    def __init__(self, option_strings: list[str], dest: str = argparse.SUPPRESS, **kw: Any) -> None:
        super().__init__(option_strings, dest, nargs=0, default=argparse.SUPPRESS, **kw)

    def __call__(self, parser: argparse.ArgumentParser, namespace: argparse.Namespace, values: object,
                 option_string: str | None = None) -> None:
        import sys

        from ringtrace.sinks import ringtrace_version

        sys.stdout.write(f"ringtrace {ringtrace_version()}\n")  # where argparse's own version action writes
        parser.exit()


def _add_paths(p: argparse.ArgumentParser) -> None:
    p.add_argument("paths", nargs="*", metavar="PATH",
                   help="scope_stats files, host logs or directories to search (a run folder's host log is "
                        "found and used)")
    _add_host_log(p)


def _add_host_log(p: argparse.ArgumentParser) -> None:
    p.add_argument("--host-log", action="append", dest="host_logs", default=[], metavar="FILE",
                   help="the runtime's host log of a run, when it is not in the run's folder (repeatable, globs "
                        "allowed): confirms the error code, reports a failed run that left no scope_stats file")


HELP: dict[str, tuple[str, tuple[str, ...], str]] = {
    "summary": ("Per file: its verdict, per-ring peaks (the need the records prove, high water, live at exit, "
                "largest scope), peak sites, wedged scopes, findings and advice.  A run folder's host.log is read too.",
                ("ringtrace summary build_output/", "ringtrace summary --format json outputs/ > runs.json"),
                "0 read; 2 usage error or unreadable input"),
    "check": ("CI gate over the same reading as summary: a run fails when its verdict is an error (wedged, failed, "
              "cut short, a test that failed on numbers) or a limit given here is crossed.",
              ("ringtrace check build_output/ --max-ratio 0.9",
               "ringtrace check outputs/ --expect task_window=16,heap=(0,0,2G,0)"),
              "0 no verdict is an error and no limit is crossed; 1 something failed the gate; "
              "2 usage error or unreadable input"),
    "watch": ("Follow scope_stats files across build trees as they are written, and export each run.",
              ("ringtrace watch build_output/ --metrics-addr 0.0.0.0:9464 --state-dir /var/lib/ringtrace",
               "ringtrace watch outputs/ --once --events runs.jsonl"),
              "0 stopped by SIGINT/SIGTERM or --once done; 2 usage error, an output that cannot be set up, or "
              "with --once a PATH that does not exist"),
    "convert": ("Scope timelines of one or more runs as one Perfetto trace and/or OTLP spans.",
                ("ringtrace convert build_output/ -o run.pftrace",
                 "ringtrace convert outputs/ --otlp-endpoint http://127.0.0.1:4317"),
                "0 written; 1 spans failed to reach the OTLP endpoint; 2 usage error or unreadable input"),
    "report": ("One self-contained HTML page (opens offline): each run's verdict and the advice first, then "
               "per ring and resource the occupancy with its capacity, peak sites and the wedged scope.",
               ("ringtrace report outputs/TestX_20261201_101500/", "ringtrace report build_output/ -o cluster.html"),
               "0 written; 2 usage error, unreadable input or the page cannot be written"),
    "demo": ("Simulate the runtime writing build trees live and follow them with every output.",
             ("ringtrace demo", "ringtrace demo --serve --metrics-addr 127.0.0.1:9464"),
             "0 done; 1 a simulated run was not followed to its end; 2 an output cannot be set up"),
    "advise": ("Ring sizes from every run of a program: what the runs prove, the recommendation, or the next "
               "measurement run as a complete RunConfig.",
               ("ringtrace advise outputs/", "ringtrace advise --format json build_output/ | jq .programs"),
               "0 advised; 2 usage error or unreadable input"),
    "diff": ("What changed between two runs (files, or trees whose sources are matched by labels).",
             ("ringtrace diff before/ after/", "ringtrace diff a.jsonl b.jsonl --fail-on-regression 0.05"),
             "0 compared; 1 a ratio grew by more than --fail-on-regression; 2 usage error or unreadable input"),
}
"""Each command's description, examples and exit codes (its ``--help``)."""


def command(sub: Any, name: str, help_text: str) -> argparse.ArgumentParser:
    """A subcommand whose ``--help`` has its description, examples and exit codes."""
    description, examples, codes = HELP[name]
    epilog = "examples:\n" + "\n".join(f"  {e}" for e in examples) + f"\n\nexit codes: {codes}"
    p: argparse.ArgumentParser = sub.add_parser(name, help=help_text, description=description, epilog=epilog,
                                                formatter_class=argparse.RawDescriptionHelpFormatter)
    return p


def shared_options(p: argparse.ArgumentParser) -> None:
    """The flags every command takes, after its own in ``--help``."""
    g = p.add_argument_group("shared options")
    g.add_argument("--log-level", choices=config_mod.literal_choices("log_level"), help="default warning")
    g.add_argument("--config", metavar="FILE",
                   help="TOML file of settings (flags > RINGTRACE_* environment > this file > defaults)")
    g.add_argument("--log-format", choices=config_mod.literal_choices("log_format"), help="text (default) or json")
    g.add_argument("--near", type=float, help="share of capacity that counts as near capacity, (0, 1] "
                   f"(default {config_mod.Config().near:g})")
    g.add_argument("--idle", type=float, help="a ring whose proven need is at most this share of the loaded "
                   "ring's counts as idle (auto-scope collapse), (0, 1] (default 0.05)")
    g.add_argument("--wedge", type=float,
                   help="a wedge is blamed on a resource at least this full at the last sample, (0, 1] (default 0.5)")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="ringtrace", formatter_class=argparse.RawDescriptionHelpFormatter,
        description="Read the simpler runtime's scope_stats files (and its host logs): per-ring peaks, wedged "
                    "scopes, ring sizing, Perfetto traces, OpenTelemetry spans, Prometheus metrics.",
        epilog="examples:\n  ringtrace summary build_output/\n  ringtrace advise outputs/\n"
               "  ringtrace watch build_output/ --metrics-addr 0.0.0.0:9464\n\n"
               "'ringtrace COMMAND --help' has each command's options, examples and exit codes.")
    parser.add_argument("--version", action=_Version, help="show the version and exit")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    p = command(sub, "summary", "per-ring peaks, wedged scopes and findings per file")
    _add_paths(p)
    p.add_argument("--format", choices=config_mod.literal_choices("format"), help="table (default) or json")
    add_details(p)

    shared_options(p)
    p = command(sub, "check", "CI gate: exit 1 when a run's verdict is an error (failed, wedged, cut short, a "
                              "failed test) or a limit given here is crossed")
    _add_paths(p)
    p.add_argument("--max-ratio", type=float, help="limit on a need the records prove, as a share of capacity "
                                                   "(e.g. 0.9; default: no limit, a need at capacity is a warning)")
    p.add_argument("--resource", action="append", dest="resources", choices=RESOURCES,
                   help="resource to gate on (repeatable; default all)")
    p.add_argument("--expect", action="append", default=[], metavar="RES=SIZE,...",
                   help="ring sizes the run must have used, e.g. task_window=16,heap=(0,0,2G,0) (0: compile "
                        "default); compared with the metadata and the host log's 'Ring buffer sizes'")

    shared_options(p)
    p = command(sub, "watch", "follow scope_stats files across build trees as they are written")
    p.add_argument("paths", nargs="+", metavar="PATH", help="files, directories (searched recursively) or globs")
    p.add_argument("--once", action="store_true", default=None,
                   help="read what exists now, finish it, flush sinks and exit")
    p.add_argument("--quiet", action="store_true", default=None,
                   help="no start, per-run and exit lines on stderr (warnings and errors still are)")
    p.add_argument("--poll", action="store_true", default=None, help="poll instead of file-system events")
    p.add_argument("--poll-interval", type=float, help="seconds between polls in --poll mode (default 0.1)")
    p.add_argument("--rescan-interval", type=float, help="seconds between safety-net rescans (default 10)")
    p.add_argument("--idle-timeout", type=float, help="finish a run unchanged for this long (default 30)")
    p.add_argument("--state-dir", help="remember finished runs across restarts")
    sinks = SinkFlags(p, "watch")  # the outputs' flags: ringtrace.reading.registry
    sinks.add("events")
    p.add_argument("--host-log-glob", metavar="PATTERN",
                   help="the runtime's host log, relative to each run's directory (e.g. 'logs/*.log'), read at its "
                        "finish (default: a run folder's host.log and recognised *.log, as summary finds them)")
    sinks.add("prometheus")
    p.add_argument("--sink-stuck-timeout", type=float,
                   help="seconds an output may hold events without taking any before it is called stuck and "
                        "sheds them; /readyz says 503 meanwhile (default 5)")
    sinks.add("perfetto-dir", "report-dir")
    sinks.rest()

    shared_options(p)
    p = command(sub, "convert", "scope timelines as a Perfetto trace and/or OTLP spans")
    p.add_argument("paths", nargs="+", metavar="PATH", help="scope_stats files or directories (all into one trace)")
    _add_host_log(p)
    sinks = SinkFlags(p, "convert")  # -o (Perfetto), --format, --otlp-*: ringtrace.reading.registry
    sinks.add("perfetto")
    sinks.rest()

    shared_options(p)
    p = command(sub, "report", "one self-contained HTML page of runs (opens offline): verdict and advice first")
    _add_paths(p)
    p.add_argument("-o", "--output", metavar="FILE", default="ringtrace-report.html",
                   help="the HTML file to write (default ringtrace-report.html; - for standard output)")
    p.add_argument("--headroom", type=float, help="share added over the need in the advice (default 0.1)")

    shared_options(p)
    p = command(sub, "demo", "simulate the runtime writing build trees live, and follow them")
    p.add_argument("--dir", default="", help="where to write the build tree (default: a new temporary folder)")
    p.add_argument("--pace", type=float, default=0.15, help="seconds between the simulated writer's steps")
    p.add_argument("--serve", action="store_true", help="keep serving metrics after the demo, until Ctrl-C")
    sinks = SinkFlags(p, "demo")
    sinks.add("prometheus")
    p.add_argument("--idle-timeout", type=float, default=5.0, help="finish a run unchanged for this long")
    sinks.rest()
    shared_options(p)
    add_parsers(sub, command, shared_options)
    return parser


def add_parsers(sub: Any, command: Any, shared: Any) -> None:
    """The ``advise`` and ``diff`` subcommands (``command`` makes one, ``shared`` adds the shared flags)."""
    p = command(sub, "advise", "ring sizes from every run of a program: the proof, the answer or the next run")
    p.add_argument("paths", nargs="*", metavar="PATH",
                   help="scope_stats files, host logs or directories to search: every run of a program is evidence")
    p.add_argument("--headroom", type=float, help="share a final answer keeps over the proven need (default 0.1)")
    p.add_argument("--program", metavar="NAME", default=None,
                   help="every run given is one program, named NAME (else: by label, folder name less its "
                        "timestamp, or the same set of scope sites)")
    p.add_argument("--each", action="store_true", default=None,
                   help="also one answer per file (the table's per-file sections; JSON always has files[])")
    p.add_argument("--format", choices=("table", "json"), help="table (default) or json")
    p.add_argument("--host-log", action="append", dest="host_logs", default=[], metavar="FILE",
                   help="the runtime's host log of a run (repeatable, globs allowed): its deadlock report says "
                        "which resource was short")
    shared(p)
    p = command(sub, "diff", "what changed between two runs (files or trees matched by labels)")
    p.add_argument("paths", nargs=2, metavar="PATH", help="A (before) and B (after): files or directories")
    p.add_argument("--format", choices=("table", "json"), help="table (default) or json")
    p.add_argument("--fail-on-regression", type=float, metavar="RATIO",
                   help="exit 1 when any ratio grew by more than RATIO (e.g. 0.05)")
    shared(p)


def add_details(p: argparse.ArgumentParser) -> None:
    p.add_argument("--details", action="store_true", default=None,
                   help="with several sources: details for every source, not only those with errors or warnings")
