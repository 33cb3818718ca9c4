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
import errno
import json
import logging
import os
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from rich.console import Console

from ringtrace import config as config_mod
from ringtrace.cli import tuning as tuning_cli
from ringtrace.cli.common import EXIT_FAIL, EXIT_INPUT, EXIT_INTERRUPTED, EXIT_OK, EXIT_PIPE
from ringtrace.cli.common import err_line as _err
from ringtrace.cli.common import read_inputs as _read
from ringtrace.cli.common import unreadable as _unreadable
from ringtrace.config import Config, ConfigError
from ringtrace.hostlog import plan as hostlog_cli
from ringtrace.hostlog.parse import is_log_only
from ringtrace.model.records import RESOURCES, RunFinished
from ringtrace.report.text import render_run
from ringtrace.sinks import Sink, ringtrace_version

DEFAULT_METRICS_ADDR = "127.0.0.1:9464"


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
    "summary": ("Per file: per-ring peaks (high water, live at exit, largest scope), peak sites, wedged scopes, "
                "findings and advice.  A run folder's host.log is read too.",
                ("ringtrace summary build_output/", "ringtrace summary --format json outputs/ > runs.json"),
                "0 read; 2 usage error or unreadable input"),
    "check": ("CI gate over the same reading as summary.",
              ("ringtrace check build_output/ --max-ratio 0.9",
               "ringtrace check outputs/ --expect task_window=16,heap=(0,0,2G,0)"),
              "0 every ring under the limit and nothing failed, wedged or fatal; 1 something failed the gate; "
              "2 usage error or unreadable input"),
    "watch": ("Follow scope_stats files across build trees as they are written, and export each run.",
              ("ringtrace watch build_output/ --metrics-addr 0.0.0.0:9464 --state-dir /var/lib/ringtrace",
               "ringtrace watch outputs/ --once --events runs.jsonl"),
              "0 stopped by SIGINT/SIGTERM or --once done; 2 usage error or an output that cannot be set up"),
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
    g.add_argument("--near", type=float, help="share of capacity that counts as near capacity, (0, 1] (default 0.8)")
    g.add_argument("--idle", type=float, help="share under which a ring counts as idle, (0, 1] (default 0.05)")
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
    parser.add_argument("--version", action="version", version=f"ringtrace {ringtrace_version()}")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    p = command(sub, "summary", "per-ring peaks, wedged scopes and findings per file")
    _add_paths(p)
    p.add_argument("--format", choices=config_mod.literal_choices("format"), help="table (default) or json")
    tuning_cli.add_details(p)

    shared_options(p)
    p = command(sub, "check", "CI gate: exit 1 when a ring is over --max-ratio, a scope wedged or a run fatal")
    _add_paths(p)
    p.add_argument("--max-ratio", type=float, help="limit on high_water / capacity (default 0.8)")
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
    p.add_argument("--events", metavar="FILE|-", help="write one JSON line per finished run")
    p.add_argument("--host-log-glob", metavar="PATTERN",
                   help="the runtime's host log, relative to each run's directory (e.g. '*.log'), read at its finish")
    p.add_argument("--metrics-addr", nargs="?", const=DEFAULT_METRICS_ADDR, metavar="HOST:PORT",
                   help=f"serve Prometheus metrics (flag alone: {DEFAULT_METRICS_ADDR}; 0.0.0.0:9464 to be scraped)")
    p.add_argument("--web-config", metavar="FILE", help="TLS / basic auth for /metrics (exporter-toolkit format)")
    p.add_argument("--series-ttl", type=float, help="seconds a finished run's series stay (default 900)")
    p.add_argument("--perfetto-dir", metavar="DIR", help="write one Perfetto trace per finished run here")
    p.add_argument("--report-dir", metavar="DIR", help="write one offline HTML report per finished run here")
    p.add_argument("--perfetto-format", choices=config_mod.literal_choices("perfetto_format"),
                   help="proto (default) or chrome-json")
    _add_otlp(p)

    shared_options(p)
    p = command(sub, "convert", "scope timelines as a Perfetto trace and/or OTLP spans")
    p.add_argument("paths", nargs="+", metavar="PATH", help="scope_stats files or directories (all into one trace)")
    _add_host_log(p)
    p.add_argument("-o", "--output", metavar="FILE", help="the Perfetto trace to write (e.g. run.pftrace)")
    p.add_argument("--format", dest="perfetto_format", choices=config_mod.literal_choices("perfetto_format"),
                   help="proto (native TrackEvent, default) or chrome-json (small traces)")
    _add_otlp(p)

    shared_options(p)
    p = command(sub, "report", "one self-contained HTML page of runs (opens offline): verdict and advice first")
    _add_paths(p)
    p.add_argument("-o", "--output", metavar="FILE", default="ringtrace-report.html",
                   help="the HTML file to write (default ringtrace-report.html)")
    p.add_argument("--headroom", type=float, help="share added over the need in the advice (default 0.1)")

    shared_options(p)
    p = command(sub, "demo", "simulate the runtime writing build trees live, and follow them")
    p.add_argument("--dir", default="", help="where to write the build tree (default: a new temporary folder)")
    p.add_argument("--pace", type=float, default=0.15, help="seconds between the simulated writer's steps")
    p.add_argument("--serve", action="store_true", help="keep serving metrics after the demo, until Ctrl-C")
    p.add_argument("--metrics-addr", nargs="?", const=DEFAULT_METRICS_ADDR, default=DEFAULT_METRICS_ADDR,
                   metavar="HOST:PORT", help=f"serve Prometheus metrics (default {DEFAULT_METRICS_ADDR})")
    p.add_argument("--idle-timeout", type=float, default=5.0, help="finish a run unchanged for this long")
    p.add_argument("--perfetto-dir", metavar="DIR", help="one Perfetto trace per run (default: DIR/traces)")
    _add_otlp(p)
    shared_options(p)
    tuning_cli.add_parsers(sub, command, shared_options)
    return parser


def _add_otlp(p: argparse.ArgumentParser) -> None:
    p.add_argument("--otlp-endpoint", metavar="URL",
                   help="send scopes as OpenTelemetry spans (OTEL_EXPORTER_OTLP_* variables are honoured)")
    p.add_argument("--otlp-protocol", choices=config_mod.literal_choices("otlp_protocol"), help="default grpc")
    p.add_argument("--otlp-tick", type=float, help="seconds per record on the span time axis (default 1e-6)")
    p.add_argument("--otlp-max-spans", type=int, help="spans kept per run (default 10000)")


def _config(args: argparse.Namespace) -> Config:
    return config_mod.build({k: v for k, v in vars(args).items()
                             if k not in ("command", "paths", "dir", "pace", "serve", "output")})


def cmd_summary(args: argparse.Namespace, cfg: Config, out: Console, err: Console) -> int:
    summary, ok = _read(args.paths, cfg, [], err, args.host_logs)
    if cfg.format == "json":
        sys.stdout.write(json.dumps(summary.to_json(), indent=1) + "\n")
    else:
        readable = [f for f in summary.finished if not _unreadable(f)]  # the others: one line on stderr
        for fin in tuning_cli.glance(out, readable, args.details):
            render_run(out, fin)
    return EXIT_OK if ok else EXIT_INPUT


def check_failures(fin: RunFinished, cfg: Config) -> list[str]:
    """Why ``fin`` fails the gate (empty when it passes)."""
    s = fin.summary
    out: list[str] = []
    for p in s.peaks:  # what is held at a scope exit, as summary's findings judge it (README, "One verdict")
        ratio = p.live_at_exit_ratio
        if p.scopes and p.resource in cfg.resources and ratio is not None and ratio > cfg.max_ratio:
            out.append(f"ring {p.ring} {p.resource}: {100 * ratio:.1f}% of capacity still held when scope "
                       f"{p.live_at_exit_site} exits (limit {100 * cfg.max_ratio:.0f}%)")
    if s.wedged:
        w = s.wedged[-1]
        out.append(f"wedged in {w.site} (depth {w.depth}, ring {w.ring}, line {w.line})")
    if s.meta is not None and s.meta.fatal:
        out.append("fatal: true")
    return out


def cmd_check(args: argparse.Namespace, cfg: Config, out: Console, err: Console) -> int:
    try:
        expect = hostlog_cli.parse_expect(args.expect) if args.expect else None
    except hostlog_cli.ExpectError as e:
        _err(err, str(e))
        return EXIT_INPUT
    summary, ok = _read(args.paths, cfg, [], err, args.host_logs)
    failed = False
    verdicts = {id(fin): check_failures(fin, cfg) + hostlog_cli.check_reasons(fin, expect) for fin in summary.finished}
    tuning_cli.glance(out, summary.finished, True, {k: not v for k, v in verdicts.items()})  # then a line each
    for fin in summary.finished:
        reasons = verdicts[id(fin)]
        failed = failed or bool(reasons)
        # without its metadata line (fatal flag, capacities) a file cannot be assessed: never "ok"
        unassessed = _unreadable(fin) or (fin.summary.meta is None and not is_log_only(fin))
        if unassessed:
            ok = False
            if not _unreadable(fin):
                reasons.append("not assessed: the metadata line could not be read (fatal flag and capacities unknown)")
        status = "UNREADABLE" if unassessed else "FAIL" if reasons else "ok"
        out.print(f"{status} {hostlog_cli.display_path(fin)}" + "".join(f"\n  {r}" for r in reasons), markup=False,
                  highlight=False)
    if not ok:
        return EXIT_INPUT
    return EXIT_FAIL if failed else EXIT_OK


def _stop_before_start(signum: int, frame: object) -> None:
    """SIGTERM/SIGINT while the watcher is still being set up: nothing was emitted, exit 0 as promised."""
    raise SystemExit(EXIT_OK)


def cmd_watch(args: argparse.Namespace, cfg: Config, out: Console, err: Console) -> int:
    import asyncio
    import signal

    for sig in (signal.SIGTERM, signal.SIGINT):  # the app installs its own handlers once it runs
        signal.signal(sig, _stop_before_start)
    signal.signal(signal.SIGHUP, signal.SIG_IGN)  # a rotation or a closed terminal during start-up: nothing to reopen

    from ringtrace.reading.service import assemble
    from ringtrace.sinks.prometheus.webconfig import WebConfigError

    if not cfg.quiet:  # the start line, one line per finished run, the exit line (in --log-format)
        logging.getLogger("ringtrace.watch").setLevel(logging.INFO)

    try:
        service = assemble(cfg, list(args.paths))
    except (OSError, WebConfigError, ValueError) as e:
        _err(err, f"cannot set up outputs: {e}")
        return EXIT_INPUT

    async def serve() -> int:
        try:
            await service.start()  # the metrics server binds in the loop that serves it
        except OSError as e:
            if e.errno in (errno.EADDRINUSE, errno.EADDRNOTAVAIL, errno.EACCES):
                _err(err, f"--metrics-addr {cfg.metrics_addr}: {e.strerror or e} (another exporter may listen "
                          "there: pick another HOST:PORT, or port 0 for any free one)")
            else:
                _err(err, f"cannot set up outputs: {e}")
            return EXIT_INPUT
        return await service.run()

    code = asyncio.run(serve())
    for name, count in service.fanout.errors.items():
        if count:
            _err(err, f"sink {name} failed {count} time(s)")
    return code


def cmd_demo(args: argparse.Namespace, cfg: Config, out: Console, err: Console) -> int:
    from ringtrace.demo.run import run_demo
    from ringtrace.sinks.prometheus.webconfig import WebConfigError

    try:
        return run_demo(cfg, args.dir, args.pace, out, args.serve)
    except (OSError, WebConfigError) as e:
        _err(err, f"cannot set up outputs: {e}")
        return EXIT_INPUT


def cmd_convert(args: argparse.Namespace, cfg: Config, out: Console, err: Console) -> int:
    from ringtrace.reading.service import otlp_sink, otlp_wanted
    from ringtrace.sinks.otlp import OtlpSink
    from ringtrace.sinks.perfetto import PerfettoSink

    if not args.output and not otlp_wanted(cfg):
        _err(err, "convert: nothing to write: give -o FILE (Perfetto) and/or --otlp-endpoint URL")
        return EXIT_INPUT
    sinks: list[Sink] = []
    perfetto: PerfettoSink | None = None
    otlp: OtlpSink | None = None
    try:
        if args.output:
            perfetto = PerfettoSink(Path(args.output), cfg.perfetto_format)
            sinks.append(perfetto)
        if otlp_wanted(cfg):
            otlp = otlp_sink(cfg, backpressure=True)
            sinks.append(otlp)
    except OSError as e:
        _err(err, f"{args.output}: cannot write: {e.strerror or e}")
        return EXIT_INPUT
    except ValueError as e:  # the SDK exporter rejects a bad OTEL_EXPORTER_OTLP_* value
        _err(err, f"cannot set up OTLP export: {e}")
        return EXIT_INPUT
    summary, ok = _read(args.paths, cfg, sinks, err, args.host_logs)
    if perfetto is not None:
        if perfetto.error is not None:
            _err(err, f"{args.output}: cannot write: {perfetto.error.strerror or perfetto.error}")
            ok = False
        else:
            out.print(f"wrote {args.output}: {len(summary.finished)} source(s); open it in https://ui.perfetto.dev",
                      highlight=False)
    if otlp is not None:
        for line in otlp.outcome():
            out.print(line, highlight=False)
        if otlp.spans_failed or otlp.spans_dropped_queue_full:
            return EXIT_FAIL
    return EXIT_OK if ok else EXIT_INPUT


def cmd_report(args: argparse.Namespace, cfg: Config, out: Console, err: Console) -> int:
    from ringtrace.report import ReportCollector, render, report_paths

    collector = ReportCollector()
    summary, ok = _read(args.paths, cfg, [collector], err, args.host_logs)
    if not summary.finished:
        return EXIT_INPUT
    page = render(collector, cfg.headroom, f"ringtrace report: {report_paths(summary.finished)}")
    target = Path(args.output)
    tmp = target.with_name(f".{target.name}.tmp")
    try:
        tmp.write_text(page, encoding="utf-8")
        os.replace(tmp, target)
    except OSError as e:
        _err(err, f"{args.output}: cannot write: {e.strerror or e}")
        return EXIT_INPUT
    out.print(f"wrote {args.output}: {len(summary.finished)} source(s), {len(page.encode()) / 1024:.0f} KiB; "
              "open it in any browser (no network needed)", highlight=False)
    return EXIT_OK if ok else EXIT_INPUT


COMMANDS: dict[str, Any] = {"report": cmd_report,
                            "summary": cmd_summary, "check": cmd_check, "convert": cmd_convert, "watch": cmd_watch,
                            "demo": cmd_demo, "advise": tuning_cli.cmd_advise, "diff": tuning_cli.cmd_diff}


class _Console(Console):
    """A console that lets a closed standard output end the command with ``EXIT_PIPE``, not exit 1."""

    def on_broken_pipe(self) -> None:
        self.quiet = True
        raise BrokenPipeError


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
    err = Console(stderr=True)
    # a terminal (or COLUMNS) sets the width; a pipe or file gets 160 columns
    out = _Console(soft_wrap=True, width=None if sys.stdout.isatty() or os.environ.get("COLUMNS") else 160)
    try:
        cfg = _config(args)
    except ConfigError as e:
        _err(err, str(e))
        return EXIT_INPUT
    _setup_logging(cfg.log_level, cfg.log_format)
    try:
        code: int = COMMANDS[args.command](args, cfg, out, err)
    except KeyboardInterrupt:
        return EXIT_INTERRUPTED
    except BrokenPipeError:  # the reader went away (`| head`): stop quietly
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return EXIT_PIPE
    return code


def run() -> None:
    sys.exit(main())

