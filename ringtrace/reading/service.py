"""Sinks and servers for a watch process, assembled from the configuration.

Used by ``ringtrace watch`` and ``ringtrace demo``: :func:`assemble` builds the fan-out of
every configured sink, the :class:`App`, and the metrics server (not started).  The caller
owns the result and drives it inside its event loop: ``await start()`` (binds; raises OSError
before anything is read), then ``await run()`` (the app, then ``stop()``).

The shutdown budget is the app's (``shutdown_seconds``, default
:data:`ringtrace.reading.app.SHUTDOWN_SECONDS`): :func:`assemble` gives it to the :class:`App`, which
passes its deadline to the fan-out, which passes it to every sink's ``flush(deadline)`` less
:data:`ringtrace.sinks.FLUSH_MARGIN`, so a sink (the OTLP one: its requests) ends its flush, closes and
says what it lost before the app would abandon it.  SIGHUP re-reads the web config (and the app reopens
the sinks' outputs).
"""

from __future__ import annotations

import io
import logging
import os
import sys
from pathlib import Path
from typing import TYPE_CHECKING

from ringtrace.config import Config
from ringtrace.reading.app import SHUTDOWN_SECONDS, App
from ringtrace.sinks import FanOut, Sink
from ringtrace.sinks.console import WatchLogSink
from ringtrace.sinks.events import EventsSink

if TYPE_CHECKING:
    from typing_extensions import Buffer

    from ringtrace.sinks.otlp import OtlpSink
    from ringtrace.sinks.prometheus import PrometheusSink
    from ringtrace.sinks.prometheus.server import MetricsServer

log = logging.getLogger("ringtrace")

class StdoutStream(io.FileIO):
    """``--events -``: standard output through a duplicate of fd 1, unbuffered and without a lock.

    A write blocked on a pipe nobody reads then holds no lock that the interpreter's exit needs
    (``sys.stdout.buffer``'s would abort the exit of a process that abandoned its events sink);
    :meth:`write` completes a short write, so a line is written whole or the write raises.
    """

    def __init__(self) -> None:
        super().__init__(os.dup(sys.stdout.fileno()), "w", closefd=True)

    def write(self, data: Buffer, /) -> int:
        view = memoryview(data).cast("B")
        done = 0
        while done < len(view):
            n = super().write(view[done:])
            if n is None:  # a non-blocking descriptor that is full
                raise BlockingIOError(11, "standard output would block")
            done += n
        return done


class Service:
    """A watch process: the app, its sinks and the metrics server, run in one event loop."""

    def __init__(self, app: App, fanout: FanOut, server: MetricsServer | None, notes: list[str],
                 roots: list[str] | None = None) -> None:
        self.app = app
        self.fanout = fanout
        self.server = server
        self.notes = notes
        self.roots = roots or []
        self._started = False
        if server is not None and app.on_hangup is None:
            app.on_hangup = self.reload

    async def reload(self) -> None:
        """SIGHUP: re-read the web config now if one of its files changed (else at the next request's check)."""
        if self.server is not None and self._started:
            await self.server.current()

    async def start(self) -> None:
        """Start serving metrics in the running loop (raises OSError when the address is taken)."""
        if self._started:
            return
        if self.server is not None:
            await self.server.start()
            scheme = "https" if self.server.tls else "http"
            host = self.server.host if ":" not in self.server.host else f"[{self.server.host}]"
            url = f"{scheme}://{host}:{self.server.port}/metrics"
            self.notes.append(f"metrics: {url}")
            log.info("serving metrics on %s", url)
        self._started = True

    async def run(self) -> int:
        """``start()`` if not done yet, then the app until it stops, then ``stop()``; the app's exit code.
        Says what it watches and where it writes at start, and how it ended at exit (``ringtrace.watch``)."""
        await self.start()
        said = logging.getLogger("ringtrace.watch")
        said.info("watching %s; outputs: %s", ", ".join(self.roots) or "-",
                  "; ".join(self.notes) or "none but this log")
        code = 1
        try:
            code = await self.app.run()
            return code
        finally:
            await self.stop()
            done = next((s for s in self.fanout.sinks if isinstance(s, WatchLogSink)), None)
            said.info("stopped (exit %d)%s", code, f": {done.finished} run(s) finished" if done else "")

    async def stop(self) -> None:
        """Stop serving metrics (idempotent)."""
        if self.server is not None and self._started:
            await self.server.stop()
        self._started = False


def sinks_from_config(cfg: Config) -> tuple[list[Sink], list[str]]:
    """The file/network sinks the configuration asks for, and a note per output for people.

    Each exporter is imported only when configured: a node agent with ``--events`` alone does not
    carry gRPC, protobuf or aiohttp in memory.
    """
    sinks: list[Sink] = []
    notes: list[str] = []
    if cfg.events == "-":
        sinks.append(EventsSink(StdoutStream(), owns=True, name="standard output"))
    elif cfg.events:
        sinks.append(EventsSink.open(cfg.events))
        notes.append(f"events: {cfg.events}")
    if cfg.perfetto_dir:
        from ringtrace.sinks.perfetto import PerfettoDirSink

        Path(cfg.perfetto_dir).mkdir(parents=True, exist_ok=True)
        sinks.append(PerfettoDirSink(Path(cfg.perfetto_dir), cfg.perfetto_format))
        notes.append(f"perfetto traces (one per finished run): {cfg.perfetto_dir} (open in https://ui.perfetto.dev)")
    if cfg.report_dir:
        from ringtrace.report import ReportDirSink

        Path(cfg.report_dir).mkdir(parents=True, exist_ok=True)
        sinks.append(ReportDirSink(Path(cfg.report_dir), cfg.headroom))
        notes.append(f"HTML reports (one per finished run): {cfg.report_dir}")
    if otlp_wanted(cfg):
        sinks.append(otlp_sink(cfg))
        notes.append(f"OpenTelemetry spans: {cfg.otlp_endpoint or 'OTEL_EXPORTER_OTLP_* endpoint'} "
                     f"({cfg.otlp_protocol})")
    return sinks, notes


def otlp_sink(cfg: Config, *, backpressure: bool = False) -> OtlpSink:
    """The OTLP sink ``watch``/``convert`` use: ``--otlp-*`` settings, ``OTEL_EXPORTER_OTLP_*`` for the rest.

    ``convert`` passes ``backpressure=True`` (a file reader may wait; the live reader never does).
    Raises ``ValueError`` for an unusable ``OTEL_EXPORTER_OTLP_*`` value (named in the message).
    """
    from ringtrace.sinks.otlp import OtlpSink

    return OtlpSink(cfg.otlp_endpoint or None, cfg.otlp_protocol, cfg.otlp_tick, cfg.otlp_max_spans,
                    backpressure=backpressure, env=dict(cfg.otel_env))


def otlp_wanted(cfg: Config) -> bool:
    """``--otlp-endpoint``, or a standard OTEL_EXPORTER_OTLP_(TRACES_)ENDPOINT variable."""
    env = dict(cfg.otel_env)
    return bool(cfg.otlp_endpoint or env.get("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT")
                or env.get("OTEL_EXPORTER_OTLP_ENDPOINT"))


def assemble(cfg: Config, roots: list[str], extra: list[Sink] | None = None,
             shutdown_seconds: float = SHUTDOWN_SECONDS) -> Service:
    """Everything a watch process needs; raises OSError / WebConfigError / ValueError for unusable outputs.

    ``shutdown_seconds`` is the one shutdown budget, the app's (see the module docstring)."""
    sinks, notes = sinks_from_config(cfg)
    if not cfg.quiet:  # one line per finished run on stderr
        sinks.append(WatchLogSink(logging.getLogger("ringtrace.watch")))
    fanout = FanOut([*(extra or []), *sinks])
    prom: PrometheusSink | None = None
    otlp: OtlpSink | None = next((s for s in sinks if s.name == "otlp"), None)  # type: ignore[assignment]
    if cfg.metrics_addr:
        from ringtrace.sinks.prometheus import PrometheusSink

        prom = PrometheusSink(series_ttl=cfg.series_ttl, sink_errors=lambda: fanout.errors,
                              reader=lambda: {"files_watched": app.tailer.watched, "read_errors": app.tailer.faults,
                                              "in_flight_bytes": app.in_flight.level})
        if otlp is not None:
            prom.register(otlp.collector())
        fanout.add(prom)
        prom.register(fanout.collector())  # ringtrace_sink_events_dropped_total{sink}, _stuck, _queued_events
    app = App(cfg, roots, fanout, shutdown_seconds=shutdown_seconds, stuck_seconds=cfg.sink_stuck_timeout)
    server = None
    if prom is not None:
        prom.register(app.watch_collector())  # ringtrace_inotify_* (the file-system watcher)
        from ringtrace.sinks.prometheus.server import MetricsServer

        server = MetricsServer(cfg.metrics_addr, prom.render, ready=app.readiness,
                               web_config=Path(cfg.web_config) if cfg.web_config else None)
    return Service(app, fanout, server, notes, roots)
