"""The one registry of sinks: each output declared once.

A :class:`SinkSpec` says what an output is called, which commands use it, its flags (each setting a
field of the one :class:`~ringtrace.config.Config`), when the configuration asks for it, how it is
built, which figures it adds to ``/metrics`` and what ``convert`` says of it at the end.  From
:data:`SINKS`:

* the parser adds each command's sink flags (:class:`SinkFlags`; help texts name the Config default:
  ``{default}``),
* ``watch`` and ``demo`` (:func:`ringtrace.reading.service.assemble`) and ``convert`` build their sinks
  (:func:`build_sinks`),
* ``docs/generate.py`` writes the sinks table of ``docs/reference.md``, and the settings table names
  each sink's settings.

Why here, in ``reading/``: the registry reads :class:`Config`, and the sinks import nothing from the
configuration (the layering contract in ``pyproject.toml``), so the sinks stay plain classes and the
registry, which knows both, sits above them.  The sink modules are imported only when a command builds
them (a node agent with ``--events`` alone carries no gRPC, protobuf or aiohttp), so the parser may
import this module at every start.

Config fields are read, not generated: :class:`Config` stays one typed, frozen struct that ``mypy
--strict`` checks at every use and that flags > ``RINGTRACE_*`` > file > defaults fill; a spec names
the fields its flags set, and ``tests/reading/test_registry.py`` holds every flag to a field.
"""


import logging
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any, NamedTuple

from ringtrace.config import Config, literal_choices
from ringtrace.sinks.base import Sink

if TYPE_CHECKING:
    import argparse

DEFAULT_METRICS_ADDR = "127.0.0.1:9464"
WATCHING = ("watch", "demo")
"""The commands that run the live agent (the service)."""


def _fmt(value: object) -> str:
    """A Config default as the help says it: ``30`` for 30.0, ``1e-6`` for 1e-06."""
    if isinstance(value, float):
        text = f"{value:g}"
        mant, e, exp = text.partition("e")
        return f"{mant}e{int(exp)}" if e else text
    return str(value)


class Flag(NamedTuple):
    """One flag of a sink on some of its commands.  ``dest``: the Config field it sets (``convert``'s
    ``-o`` sets ``output``, the command's own argument).  ``help`` may name ``{default}``: the field's
    default in Config.  ``choices``: the field's Literal values."""

    options: tuple[str, ...]
    dest: str
    help: str
    commands: tuple[str, ...]
    metavar: str | None = None
    choices: bool = False
    type: Callable[[str], Any] | None = None
    nargs: str | None = None
    const: object = None
    default: object = None
    switch: bool = False  # a flag without a value that sets the field True (unset: the config decides)

    def add_to(self, p: "argparse.ArgumentParser") -> None:
        kw: dict[str, Any] = {"dest": self.dest}
        default = getattr(Config(), self.dest, None)
        kw["help"] = self.help.format(default=_fmt(default))
        if self.metavar is not None:
            kw["metavar"] = self.metavar
        if self.choices:
            kw["choices"] = literal_choices(self.dest)
        if self.type is not None:
            kw["type"] = self.type
        if self.nargs is not None:
            kw["nargs"] = self.nargs
            kw["const"] = self.const
        if self.default is not None:
            kw["default"] = self.default
        if self.switch:
            kw.update(action="store_true", default=None)
        p.add_argument(*self.options, **kw)


class Context(NamedTuple):
    """What a sink's build may use besides the Config: the command, ``convert``'s ``-o``, and the live
    agent's figures (late-bound: the fan-out and the app are made after the sinks)."""

    command: str
    output: str = ""
    sink_errors: Callable[[], Mapping[str, int]] = dict
    reader: Callable[[], Mapping[str, int]] = dict


def _nothing(cfg: Config, ctx: Context) -> str:
    return ""


class SinkSpec(NamedTuple):
    """One output, declared once (see the module docstring)."""

    name: str
    commands: tuple[str, ...]
    wanted: Callable[[Config, Context], bool]
    build: Callable[[Config, Context], Sink]
    """Raises OSError (an output that cannot be written) or ValueError (an unusable setting)."""
    flags: tuple[Flag, ...] = ()
    note: Callable[[Config, Context], str] = _nothing
    """The line a person reads at start (where the output goes); "" for none."""
    where: Callable[[Config, Context], str] = _nothing
    """What a setup error names (the file, the endpoint)."""
    metrics: Callable[[Sink], object] | None = None
    """A Prometheus collector of the sink's own figures, registered when metrics are served."""
    outcome: Callable[[Sink, int], tuple[list[str], list[str], bool]] | None = None
    """``convert``: (lines for stdout, errors, failed) once the runs (their number given) were read."""
    doc: str = ""
    title: str = ""
    """How a setup error names the output ("OTLP export"); the name when empty."""

    def flags_for(self, command: str) -> tuple[Flag, ...]:
        return tuple(f for f in self.flags if command in f.commands)


class SetupError(Exception):
    """A sink could not be built: ``spec`` says which, ``where`` what it names, ``error`` why."""

    def __init__(self, spec: SinkSpec, where: str, error: OSError | ValueError) -> None:
        super().__init__(str(error))
        self.spec = spec
        self.where = where
        self.error = error


# -- the sinks ----------------------------------------------------------------------------------------


def _events(cfg: Config, ctx: Context) -> Sink:
    from ringtrace.sinks.events import EventsSink, StdoutStream

    if cfg.events == "-":
        return EventsSink(StdoutStream(), owns=True, name="standard output")
    return EventsSink.open(cfg.events)


def _perfetto(cfg: Config, ctx: Context) -> Sink:
    from ringtrace.sinks.perfetto import PerfettoSink

    return PerfettoSink(Path(ctx.output), cfg.perfetto_format)


def _perfetto_dir(cfg: Config, ctx: Context) -> Sink:
    from ringtrace.sinks.perfetto import PerfettoDirSink

    Path(cfg.perfetto_dir).mkdir(parents=True, exist_ok=True)
    return PerfettoDirSink(Path(cfg.perfetto_dir), cfg.perfetto_format)


def _report_dir(cfg: Config, ctx: Context) -> Sink:
    from ringtrace.report import ReportDirSink

    Path(cfg.report_dir).mkdir(parents=True, exist_ok=True)
    return ReportDirSink(Path(cfg.report_dir), cfg.headroom)


def otlp_wanted(cfg: Config, ctx: Context | None = None) -> bool:
    """``--otlp-endpoint``, or a standard OTEL_EXPORTER_OTLP_(TRACES_)ENDPOINT variable."""
    env = dict(cfg.otel_env)
    return bool(cfg.otlp_endpoint or env.get("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT")
                or env.get("OTEL_EXPORTER_OTLP_ENDPOINT"))


def _otlp(cfg: Config, ctx: Context) -> Sink:
    """``--otlp-*`` settings, ``OTEL_EXPORTER_OTLP_*`` for the rest; ValueError for an unusable variable."""
    from ringtrace.sinks.otlp import OtlpSink

    return OtlpSink(cfg.otlp_endpoint or None, cfg.otlp_protocol, cfg.otlp_tick, cfg.otlp_max_spans,
                    env=dict(cfg.otel_env))


def _otlp_metrics(sink: Sink) -> object:
    from ringtrace.sinks.otlp import OtlpSink

    assert isinstance(sink, OtlpSink)
    return sink.collector()


def _otlp_outcome(sink: Sink, runs: int) -> tuple[list[str], list[str], bool]:
    from ringtrace.sinks.otlp import OtlpSink

    assert isinstance(sink, OtlpSink)
    return sink.outcome(), [], bool(sink.spans_failed or sink.spans_dropped_queue_full)


def _perfetto_outcome(sink: Sink, runs: int) -> tuple[list[str], list[str], bool]:
    from ringtrace.sinks.perfetto import PerfettoSink

    assert isinstance(sink, PerfettoSink)
    if sink.error is not None:
        return [], [f"{sink.path}: cannot write: {sink.error.strerror or sink.error}"], True
    return [f"wrote {sink.path}: {runs} source(s); open it in https://ui.perfetto.dev"], [], False


def _watch_log(cfg: Config, ctx: Context) -> Sink:
    from ringtrace.sinks.console import WatchLogSink

    return WatchLogSink(logging.getLogger("ringtrace.watch"))


def _prometheus(cfg: Config, ctx: Context) -> Sink:
    from ringtrace.sinks.prometheus import PrometheusSink

    return PrometheusSink(series_ttl=cfg.series_ttl, sink_errors=ctx.sink_errors, reader=ctx.reader,
                          series_budget=cfg.series_budget, advice=cfg.metrics_advice,
                          state_dir=Path(cfg.state_dir) if cfg.state_dir else None)


OTLP_FLAGS = (
    Flag(("--otlp-endpoint",), "otlp_endpoint", "send scopes as OpenTelemetry spans (OTEL_EXPORTER_OTLP_* variables "
         "are honoured)", ("watch", "convert", "demo"), metavar="URL"),
    Flag(("--otlp-protocol",), "otlp_protocol", "default {default}", ("watch", "convert", "demo"), choices=True),
    Flag(("--otlp-tick",), "otlp_tick", "seconds per record on the span time axis (default {default})",
         ("watch", "convert", "demo"), type=float),
    Flag(("--otlp-max-spans",), "otlp_max_spans", "spans kept per run (default {default})",
         ("watch", "convert", "demo"), type=int),
)

SINKS: tuple[SinkSpec, ...] = (
    SinkSpec("events", WATCHING, lambda cfg, ctx: bool(cfg.events), _events,
             (Flag(("--events",), "events", "write one JSON line per finished run", ("watch",), metavar="FILE|-"),),
             note=lambda cfg, ctx: f"events: {cfg.events}" if cfg.events != "-" else "",
             where=lambda cfg, ctx: cfg.events,
             doc="one JSON line per finished run (the summary's file object, its reason and run_key), written once"),
    SinkSpec("perfetto", ("convert",), lambda cfg, ctx: bool(ctx.output), _perfetto,
             (Flag(("-o", "--output"), "output", "the Perfetto trace to write (e.g. run.pftrace)", ("convert",),
                   metavar="FILE"),
              Flag(("--format",), "perfetto_format", "proto (native TrackEvent, default) or chrome-json (small traces)",
                   ("convert",), choices=True)),
             where=lambda cfg, ctx: ctx.output, outcome=_perfetto_outcome,
             doc="every run read into one Perfetto trace"),
    SinkSpec("perfetto-dir", WATCHING, lambda cfg, ctx: bool(cfg.perfetto_dir), _perfetto_dir,
             (Flag(("--perfetto-dir",), "perfetto_dir", "write one Perfetto trace per finished run here", ("watch",),
                   metavar="DIR"),
              Flag(("--perfetto-dir",), "perfetto_dir", "one Perfetto trace per run (default: DIR/traces)", ("demo",),
                   metavar="DIR"),
              Flag(("--perfetto-format",), "perfetto_format", "{default} (default) or chrome-json", ("watch",),
                   choices=True)),
             note=lambda cfg, ctx: f"perfetto traces (one per finished run): {cfg.perfetto_dir} (open in "
                                   "https://ui.perfetto.dev)",
             where=lambda cfg, ctx: cfg.perfetto_dir, doc="one Perfetto trace file per finished run"),
    SinkSpec("report-dir", WATCHING, lambda cfg, ctx: bool(cfg.report_dir), _report_dir,
             (Flag(("--report-dir",), "report_dir", "write one offline HTML report per finished run here", ("watch",),
                   metavar="DIR"),),
             note=lambda cfg, ctx: f"HTML reports (one per finished run): {cfg.report_dir}",
             where=lambda cfg, ctx: cfg.report_dir, doc="one offline HTML report per finished run"),
    SinkSpec("otlp", ("watch", "convert", "demo"), otlp_wanted, _otlp, OTLP_FLAGS,
             note=lambda cfg, ctx: f"OpenTelemetry spans: {cfg.otlp_endpoint or 'OTEL_EXPORTER_OTLP_* endpoint'} "
                                   f"({cfg.otlp_protocol})",
             where=lambda cfg, ctx: cfg.otlp_endpoint or "OTEL_EXPORTER_OTLP_*", metrics=_otlp_metrics,
             outcome=_otlp_outcome, title="OTLP export",
             doc="one OpenTelemetry trace per finished run, over OTLP (gRPC or HTTP)"),
    SinkSpec("log", WATCHING, lambda cfg, ctx: not cfg.quiet, _watch_log,
             doc="one line per finished run on stderr (its verdict); --quiet leaves it out"),
    SinkSpec("prometheus", WATCHING, lambda cfg, ctx: bool(cfg.metrics_addr), _prometheus,
             (Flag(("--metrics-addr",), "metrics_addr",
                   f"serve Prometheus metrics (flag alone: {DEFAULT_METRICS_ADDR}; 0.0.0.0:9464 to be scraped)",
                   ("watch",), metavar="HOST:PORT", nargs="?",
                   const=DEFAULT_METRICS_ADDR),
              Flag(("--metrics-addr",), "metrics_addr", f"serve Prometheus metrics (default {DEFAULT_METRICS_ADDR})",
                   ("demo",), metavar="HOST:PORT", nargs="?", const=DEFAULT_METRICS_ADDR,
                   default=DEFAULT_METRICS_ADDR),
              Flag(("--web-config",), "web_config", "TLS / basic auth for /metrics (exporter-toolkit format)",
                   ("watch",), metavar="FILE"),
              Flag(("--series-ttl",), "series_ttl", "seconds a finished run's series stay (default {default})",
                   ("watch",), type=float),
              Flag(("--series-budget",), "series_budget", "finished runs' series exposed at most; past it the "
                   "oldest runs' go first (default {default}; 0: no cap)", ("watch",), metavar="N", type=int),
              Flag(("--metrics-advice",), "metrics_advice", "also expose each finished run's advice (recommended "
                   "and measure-next capacities)", ("watch",), switch=True)),
             where=lambda cfg, ctx: cfg.metrics_addr,
             doc="the metrics the server serves on /metrics (with the figures of the other sinks and the reader)"),
)
"""Every output, in the order they are built (and their counters listed)."""

BY_NAME: dict[str, SinkSpec] = {s.name: s for s in SINKS}


def build_sinks(cfg: Config, ctx: Context) -> list[tuple[SinkSpec, Sink]]:
    """The sinks ``ctx.command`` builds from ``cfg``, in :data:`SINKS` order; raises :class:`SetupError`
    (closing those already built)."""
    built: list[tuple[SinkSpec, Sink]] = []
    for spec in SINKS:
        if ctx.command not in spec.commands or not spec.wanted(cfg, ctx):
            continue
        try:
            built.append((spec, spec.build(cfg, ctx)))
        except (OSError, ValueError) as err:
            for _, sink in built:
                sink.close()
            raise SetupError(spec, spec.where(cfg, ctx), err) from err
    return built


class SinkFlags:
    """Adds a command's sink flags to its parser, in the places the parser gives: :meth:`add` the flags
    of the named sinks (the flags that turn an output on first, then their settings), :meth:`rest` those
    of every other sink of the command (a new sink's flags need no change in the parser)."""

    def __init__(self, parser: "argparse.ArgumentParser", command: str) -> None:
        self.parser = parser
        self.command = command
        self.done: set[str] = set()

    def add(self, *names: str) -> None:
        specs = [BY_NAME[n] for n in names]
        flags = [s.flags_for(self.command) for s in specs]
        for f in [fs[0] for fs in flags if fs] + [f for fs in flags for f in fs[1:]]:
            f.add_to(self.parser)
        self.done.update(names)

    def rest(self) -> None:
        self.add(*(s.name for s in SINKS if self.command in s.commands and s.name not in self.done
                   and s.flags_for(self.command)))
