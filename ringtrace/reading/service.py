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

import logging
from pathlib import Path
from typing import TYPE_CHECKING

from ringtrace.config import Config
from ringtrace.reading.app import SHUTDOWN_SECONDS, App
from ringtrace.reading.metrics import ReadingCollector
from ringtrace.reading.registry import Context, SetupError, SinkSpec, build_sinks
from ringtrace.sinks import FanOut, Sink
from ringtrace.sinks.console import WatchLogSink

if TYPE_CHECKING:
    from ringtrace.sinks.prometheus import PrometheusSink
    from ringtrace.sinks.prometheus.server import Files, MetricsServer

log = logging.getLogger("ringtrace")

class Service:
    """A watch process: the app, its sinks and the metrics server, run in one event loop."""

    def __init__(self, app: App, fanout: FanOut, server: MetricsServer | None, notes: list[str],
                 roots: list[str] | None = None, built: list[tuple[SinkSpec, Sink]] | None = None) -> None:
        self.app = app
        self.fanout = fanout
        self.server = server
        self.notes = notes
        self.roots = roots or []
        self.built = built or []
        """The configured sinks, each with its registry entry (:mod:`ringtrace.reading.registry`)."""
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
            done = next((sink for _, sink in self.built if isinstance(sink, WatchLogSink)), None)
            said.info("stopped (exit %d)%s", code, f": {done.finished} run(s) finished" if done else "")

    async def stop(self) -> None:
        """Stop serving metrics (idempotent)."""
        if self.server is not None and self._started:
            await self.server.stop()
        self._started = False


PERFETTO_UI = "https://ui.perfetto.dev"
"""The Perfetto UI's origin: allowed to fetch the traces the metrics server serves (the alerts' trace links)."""


def served_files(cfg: Config) -> dict[str, Files]:
    """What the metrics server serves by run (the alerts' report and trace links): ``/report/...`` from
    ``--report-dir``, ``/trace/...`` from ``--perfetto-dir``, each when configured."""
    from ringtrace.model.records import Labels
    from ringtrace.report import find_page
    from ringtrace.sinks.perfetto import find_trace
    from ringtrace.sinks.prometheus.server import Files

    files: dict[str, Files] = {}
    if cfg.report_dir:
        pages = Path(cfg.report_dir)
        files["report"] = Files(lambda run, rank, dispatch: find_page(pages, Labels(run, rank, dispatch)))
    if cfg.perfetto_dir:
        traces = Path(cfg.perfetto_dir)
        files["trace"] = Files(lambda run, rank, dispatch: find_trace(traces, Labels(run, rank, dispatch)),
                               {"Access-Control-Allow-Origin": PERFETTO_UI})
    return files


def assemble(cfg: Config, roots: list[str], extra: list[Sink] | None = None,
             shutdown_seconds: float = SHUTDOWN_SECONDS, command: str = "watch") -> Service:
    """Everything a watch process needs: ``command``'s sinks from the registry, the app, the metrics server;
    raises OSError / ValueError (a :class:`~ringtrace.reading.registry.SetupError`, a web config's
    ``WebConfigError``) for unusable outputs.  Each exporter is imported only when configured.

    ``shutdown_seconds`` is the one shutdown budget, the app's (see the module docstring)."""
    app: App | None = None
    fanout = FanOut(list(extra or []))

    def reader() -> dict[str, int]:
        assert app is not None
        return {"files_watched": app.tailer.watched, "read_errors": app.tailer.faults,
                "in_flight_bytes": app.in_flight.level}

    try:
        built = build_sinks(cfg, Context(command, sink_errors=lambda: fanout.errors, reader=reader))
    except SetupError as err:
        raise err.error from None
    notes = [note for spec, _ in built if (note := spec.note(cfg, Context(command)))]
    prom: PrometheusSink | None = None
    for spec, sink in built:
        fanout.add(sink)
        if spec.name == "prometheus":
            prom = sink  # type: ignore[assignment]
    if prom is not None:
        for spec, sink in built:
            if spec.metrics is not None:
                prom.register(spec.metrics(sink))  # type: ignore[arg-type]
        prom.register(fanout.collector())  # ringtrace_sink_events_dropped_total{sink}, _stuck, _queued_events
    app = App(cfg, roots, fanout, shutdown_seconds=shutdown_seconds, stuck_seconds=cfg.sink_stuck_timeout)
    server = None
    if prom is not None:
        watch, inodes = app.watch, app.tailer.inodes
        prom.register(ReadingCollector(lambda: watch.tree, lambda: inodes.appended))  # ringtrace_inotify_*, ...
        from ringtrace.sinks.prometheus.server import MetricsServer

        server = MetricsServer(cfg.metrics_addr, prom.chunks, ready=app.readiness,
                               web_config=Path(cfg.web_config) if cfg.web_config else None, files=served_files(cfg))
    return Service(app, fanout, server, notes, roots, built)
