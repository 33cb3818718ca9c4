"""The OpenTelemetry sink: every finished run becomes one trace, sent over OTLP (gRPC or HTTP/protobuf).

A root span per run (the source) and one span per scope, its parent the enclosing scope
(:mod:`._spans`: ids, attributes, the time axis; :mod:`._select`: the ``max_spans`` policy), sent
when the run finishes (:class:`RunFinished`): the policy needs the run's final peaks, and a trace
arrives whole.

An exporter behind the one queue.  As the OpenTelemetry SDK splits a span processor (queue, worker,
flush, shutdown) from its exporter (encode, send, retry), the sink is only the exporter: its queue
and worker are the fan-out's outlet (:mod:`ringtrace.sinks.delivery`; ``blocks = True``, so
``convert`` delivers to it through an outlet too and its requests overlap the reading).
:meth:`OtlpSink.receive` feeds each paired scope to the run's bounded :class:`Budget`; at the end of a
run it builds the kept spans and sends them in batches of ``batch_size`` through a :mod:`._export`
transport, retrying with :class:`RetryPolicy` (the one retry layer), on the outlet's thread.  A
receiver that does not answer holds the outlet: after ``--sink-stuck-timeout`` the sink is stuck and
the outlet sheds what it holds for it; a run that lost events so (:meth:`~OtlpSink.dropped`) is not
sent half: its spans are counted in ``spans_dropped_queue_full``.

No silent loss: every kept span ends up in exactly one of ``spans_exported``, ``spans_failed``
(refused, out of retries, rejected in a partial success, or still undelivered at shutdown) and
``spans_dropped_queue_full``, each counted as it happens (``pending_spans`` falls batch by batch).

Shutdown within a budget: :meth:`~OtlpSink.shutdown_begins` (called from the thread that starts the
shutdown, while the outlet's worker may be inside a request) sets the deadline that no request, retry or
wait passes and cuts a request still in flight at it; the runs still queued behind it then fail at once.
:meth:`~OtlpSink.flush` has nothing left to push (the outlet calls it behind every event);
:meth:`~OtlpSink.close` cuts what is in flight and logs one line saying how many spans were lost.  Nothing
here raises into the caller.

Memory: per open run O(``max_spans``) (the budget's candidates), and the spans of the one run being
sent; what waits is the outlet's (bounded by the reader's in-flight bytes in ``watch``, by the
one-shot window in ``convert``).
"""

from __future__ import annotations

import logging
import math
import random
import socket
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING

from opentelemetry.sdk.resources import OTELResourceDetector, Resource
from opentelemetry.sdk.util.instrumentation import InstrumentationScope

from ringtrace.model.records import RunFinished, RunProgress, RunStarted, Scope, SinkEvent, Source, Wants
from ringtrace.sinks import ringtrace_version
from ringtrace.sinks.base import Sink

from ._export import Attempt, GrpcTransport, HttpTransport, RetryPolicy, Transport, http_traces_url, resolve
from ._export import OtlpProtocol as Protocol
from ._select import Budget, Selection
from ._spans import RunIds, TimeAxis, WireEncoder, build_spans

if TYPE_CHECKING:
    from ._metrics import OtlpCollector

__all__ = ["OtlpSink", "Protocol", "RetryPolicy", "default_resource", "http_traces_url"]

log = logging.getLogger("ringtrace.sinks.otlp")

def default_resource() -> Resource:
    """``service.name=ringtrace``, ``service.version``, ``host.name``; ``OTEL_RESOURCE_ATTRIBUTES`` and
    ``OTEL_SERVICE_NAME`` add to it and win (the SDK's ``Resource.create`` plus its env detector)."""
    ours = Resource.create({"service.name": "ringtrace", "service.version": ringtrace_version(),
                            "host.name": socket.gethostname()})
    return ours.merge(OTELResourceDetector().detect())


@dataclass(slots=True, eq=False)
class _Job:
    """A finished run being exported.  ``left``: its spans not yet counted in any outcome."""

    fin: RunFinished
    selection: Selection
    seen_at: float
    left: int
    failed: bool = False  # some of its spans failed


class OtlpSink(Sink):
    """See the module docstring.  Counters are plain ints, read them at any time (``stats()``).

    ``transport`` replaces the network (tests); ``sleep``/``clock``/``uniform`` drive the retry
    backoff (tests inject them so nothing waits); the shutdown deadline is real time.
    """

    name = "otlp"
    wants = Wants(records=False, events=True)  # the paired scopes; the last line comes with RunFinished
    blocks = True

    def __init__(self, endpoint: str | None = None, protocol: Protocol = "grpc", tick: float = 1e-6,
                 max_spans: int = 10_000, transport: Transport | None = None, *,
                 timeout: float | None = None, batch_size: int = 512, retry: RetryPolicy | None = None,
                 sleep: Callable[[float], object] | None = None,
                 clock: Callable[[], float] = time.monotonic, uniform: Callable[[float, float], float] = random.uniform,
                 wall: Callable[[], float] = time.time, resource: Resource | None = None,
                 env: Mapping[str, str] | None = None) -> None:
        if not (math.isfinite(tick) and tick > 0) or max_spans < 1 or batch_size < 1:
            raise ValueError("tick must be > 0, max_spans and batch_size >= 1")
        self.tick = tick
        self.max_spans = max_spans
        self.batch_size = batch_size
        self.retry = retry or RetryPolicy()
        self._sleep = sleep or self._nap
        self._clock = clock
        self._uniform = uniform
        self._wall = wall
        self.settings = resolve(endpoint, protocol, timeout, env or {})  # the Config read the environment
        self.resource = resource or default_resource()
        self._encoder = WireEncoder(self.resource, InstrumentationScope("ringtrace", ringtrace_version()))
        new = GrpcTransport if self.settings.protocol == "grpc" else HttpTransport
        self.transport = transport or new(self.settings, f"ringtrace/{ringtrace_version()}")
        self._closed = threading.Event()
        self._wake = threading.Event()  # ends a retry wait early: a deadline was set, or close
        # per open run: (the wall clock when the sink first heard of it, its budget)
        self._runs: dict[Source, tuple[float, Budget]] = {}
        self._gaps: set[Source] = set()  # runs that lost events on the outlet (``dropped``)
        self._lock = threading.Lock()  # the counters (scrapes read them) and the deadline (set from another thread)
        self._current: _Job | None = None
        self._deadline: float | None = None  # time.monotonic() when the shutdown's budget ends
        self._cutter: threading.Timer | None = None  # cuts a request still in flight at the deadline
        # counters (written under _lock, except export_requests/export_retries)
        self.spans_exported = 0
        self.spans_failed = 0
        self.spans_failed_at_shutdown = 0  # part of spans_failed
        self.spans_dropped_by_budget = 0
        self.spans_dropped_queue_full = 0  # spans of runs that lost events while the sink was stuck
        self.runs_exported = 0
        self.runs_failed = 0
        self.export_requests = 0
        self.export_retries = 0
        self.internal_errors = 0
        self.pending_spans = 0  # the uncounted spans of the run being exported

    @property
    def dropped_spans(self) -> int:
        """Spans never sent on purpose: left out by ``max_spans`` or because the sink was stuck."""
        return self.spans_dropped_by_budget + self.spans_dropped_queue_full

    def stats(self) -> dict[str, int]:
        """All counters by name (read at any time)."""
        return {k: getattr(self, k) for k in (
            "spans_exported", "spans_failed", "spans_dropped_by_budget", "spans_dropped_queue_full",
            "runs_exported", "runs_failed", "export_requests", "export_retries", "internal_errors",
            "pending_spans")}

    def collector(self) -> OtlpCollector:
        """The counters as Prometheus families (``ringtrace_otlp_*``), read at each scrape; for the
        Prometheus sink's :meth:`~ringtrace.sinks.prometheus.PrometheusSink.register`."""
        from ._metrics import OtlpCollector  # prometheus_client only when metrics are served

        return OtlpCollector(self.stats)

    # -- the outlet's side -------------------------------------------------------------------------

    def receive(self, event: SinkEvent) -> None:
        try:
            if type(event) is RunProgress:
                run = self._runs.get(event.source)
                if run is None:
                    run = self._runs[event.source] = (self._wall(), Budget(self.max_spans))
                add = run[1].add
                for ev in event.events:
                    if type(ev) is Scope:
                        add(ev)
            elif type(event) is RunStarted:  # a new run of the source replaces the old one
                self._runs[event.source] = (self._wall(), Budget(self.max_spans))
                self._gaps.discard(event.source)
            elif type(event) is RunFinished:  # its seen_at is the RunStarted's
                run = self._runs.pop(event.source, None)
                heard, budget = run if run is not None else (self._wall(), Budget(self.max_spans))
                self._finish(event, event.seen_at if event.seen_at > 0 else heard, budget)
        except Exception:  # never into the reader
            with self._lock:
                self.internal_errors += 1
            log.exception("otlp sink: cannot handle %s", type(event).__name__)

    def dropped(self, source: Source) -> None:
        """The outlet shed events of ``source``'s run (the sink was stuck): its trace would be partial."""
        self._gaps.add(source)

    def _finish(self, fin: RunFinished, seen_at: float, budget: Budget) -> None:
        """Select the run's scopes and export them (or count them dropped: the run lost events)."""
        wedged = len(fin.summary.wedged)
        if fin.source in self._gaps:
            self._gaps.discard(fin.source)
            kept = min(fin.summary.scopes, max(0, self.max_spans - 1 - wedged))  # the spans it would have kept
            n = 1 + wedged + kept
            with self._lock:
                self.spans_dropped_by_budget += fin.summary.scopes - kept
                self.spans_dropped_queue_full += n
            log.warning("otlp: %d spans of %s dropped: the sink was stuck and lost some of the run's events",
                        n, fin.source.path)
            return
        sel = budget.select(reserved=1 + wedged)
        n = 1 + wedged + len(sel.scopes)
        job = _Job(fin, sel, seen_at, n)
        with self._lock:
            self.spans_dropped_by_budget += sel.omitted
            self.pending_spans += n
            self._current = job
        try:
            self._export_run(job)
        except Exception:
            log.exception("otlp: exporting %s failed", fin.source.path)
            with self._lock:
                self.internal_errors += 1
        finally:
            with self._lock:
                self._count(job, 0, job.left, at_shutdown=False)
                self._current = None

    # -- exporting ---------------------------------------------------------------------------------------

    def _time_left(self) -> float:
        """Seconds until the shutdown deadline (inf before one is set; 0 once closed)."""
        if self._closed.is_set():
            return 0.0
        deadline = self._deadline
        return math.inf if deadline is None else deadline - time.monotonic()

    def _nap(self, seconds: float) -> None:
        """The retry wait: ends early when a deadline is set or close stops the sink."""
        self._wake.wait(min(seconds, self._time_left()))
        self._wake.clear()

    def _count(self, job: _Job, delivered: int, failed: int, *, at_shutdown: bool) -> None:
        """Count ``delivered + failed`` of ``job``'s spans (under ``_lock``); the last ones end the run."""
        if not job.left:
            return
        self.spans_exported += delivered
        self.spans_failed += failed
        if at_shutdown:
            self.spans_failed_at_shutdown += failed
        job.left -= delivered + failed
        self.pending_spans -= delivered + failed
        job.failed = job.failed or failed > 0
        if not job.left:
            if job.failed:
                self.runs_failed += 1
            else:
                self.runs_exported += 1

    def _export_run(self, job: _Job) -> None:
        """Build the run's spans and send them batch by batch; what the deadline leaves fails at shutdown."""
        fin = job.fin
        # a run's key (path + file identity) names it across restarts: re-sent spans keep their ids
        # a run known from its host log alone has no path: the log and the run's labels name it
        path = fin.source.path or f"{fin.host_log.path if fin.host_log else ''}\0{fin.source.name}"
        ids = RunIds(fin.key, 0, 0.0) if fin.key else RunIds(path, fin.source.generation, job.seen_at)
        spans = [] if self._time_left() <= 0 else build_spans(
            fin, job.selection, ids, TimeAxis(job.seen_at, self.tick), self.tick, self.max_spans,
            max(fin.last_line, 1))
        for i in range(0, len(spans), self.batch_size):
            if self._time_left() <= 0:
                break
            chunk = spans[i:i + self.batch_size]
            delivered = self._deliver(self._encoder.request(ids.trace_id, chunk), len(chunk))
            with self._lock:
                shutting_down = self._deadline is not None or self._closed.is_set()
                self._count(job, delivered, len(chunk) - delivered, at_shutdown=shutting_down)
        with self._lock:
            self._count(job, 0, job.left, at_shutdown=True)

    def _deliver(self, payload: bytes, n: int) -> int:
        """Send one batch of ``n`` spans with :attr:`retry`; how many were delivered.  No try or wait
        goes past the policy's ``max_elapsed`` or the shutdown deadline; non-retryable answers fail at once."""
        p = self.retry
        started = self._clock()
        delay = p.first_delay
        attempt = 0
        while True:
            budget = min(p.max_elapsed - (self._clock() - started), self._time_left())
            if budget <= 0:
                return 0
            attempt += 1
            self.export_requests += 1
            try:
                got = self.transport.send(payload, min(self.settings.timeout, budget))
            except Exception as err:  # a transport bug must not kill the worker
                got = Attempt(False, True, f"{type(err).__name__}: {err}")
            if got.ok:
                if got.rejected:
                    log.warning("otlp: the receiver rejected %d of %d spans: %s", got.rejected, n, got.reason)
                return max(0, n - got.rejected)
            if self._time_left() <= 0:
                return 0  # cut at the deadline: the sink's closing line says it
            if not got.retryable:
                log.warning("otlp: %d spans refused, not retried: %s", n, got.reason)
                return 0
            wait = delay * self._uniform(1 - p.jitter, 1 + p.jitter) if p.jitter else delay
            wait = max(wait, got.retry_after or 0.0)
            elapsed = self._clock() - started
            if attempt >= p.attempts or elapsed + wait > p.max_elapsed or wait >= self._time_left():
                log.warning("otlp: %d spans failed after %d attempt(s) in %.1fs: %s", n, attempt, elapsed,
                            got.reason)
                return 0
            log.info("otlp: export of %d spans failed (attempt %d: %s), retrying in %.2fs", n, attempt,
                     got.reason, wait)
            self.export_retries += 1
            self._sleep(wait)
            delay = min(delay * 2, p.max_delay)

    # -- end of life -------------------------------------------------------------------------------------

    def shutdown_begins(self, deadline: float) -> None:
        """The deadline (``time.monotonic()``; the earliest one given wins) that no request, retry or wait
        passes from now on; a request still in flight then is cut.  Called from the thread that shuts down
        (the outlet's worker may be inside an export), before ``flush`` is queued behind the events."""
        with self._lock:
            if self._closed.is_set():
                return
            self._deadline = deadline if self._deadline is None else min(self._deadline, deadline)
            deadline = self._deadline
            if self._cutter is not None:
                self._cutter.cancel()
            self._cutter = threading.Timer(max(0.0, deadline - time.monotonic()), self._cut)
            self._cutter.daemon = True
            self._cutter.start()
        self._wake.set()

    def _cut(self) -> None:
        """The deadline passed: cut a request still waiting for its answer (later ones fail at once)."""
        with self._lock:
            busy = self._current is not None
        if busy:
            self._abort()

    def _abort(self) -> None:
        try:
            self.transport.abort()
        except Exception as err:
            log.debug("otlp: abort: %s", err)

    def flush(self, deadline: float) -> None:
        """The sink contract's flush: nothing is buffered (every run was sent in its ``receive``, and the
        outlet calls flush behind them).  Ends the shutdown deadline's hold when it was kept: later runs
        get the full retry policy again."""
        with self._lock:
            if self._cutter is not None:
                self._cutter.cancel()
                self._cutter = None
            self._deadline = None

    def close(self) -> None:
        """Stop: a request in flight is cut, and one log line says how many spans were lost."""
        with self._lock:
            if self._closed.is_set():
                return
            self._closed.set()
            if self._cutter is not None:
                self._cutter.cancel()
                self._cutter = None
        self._wake.set()
        self._abort()
        with self._lock:
            lost = self.spans_failed + self.spans_dropped_queue_full
            line = (f"otlp: {lost} spans lost ({self.spans_failed} failed, {self.spans_failed_at_shutdown} of them "
                    f"undelivered at shutdown; {self.spans_dropped_queue_full} dropped while the sink was stuck), "
                    f"{self.spans_exported} exported to {self.settings.url}")
        (log.warning if lost else log.info)(line)

    def outcome(self) -> list[str]:
        """One line for people (``convert`` prints it): what was sent, left out and lost."""
        line = (f"otlp: {self.spans_exported} spans exported in {self.runs_exported} trace(s)"
                f", {self.spans_dropped_by_budget} left out by --otlp-max-spans")
        if self.spans_failed or self.spans_dropped_queue_full:
            line += f"; {self.spans_failed} failed, {self.spans_dropped_queue_full} dropped (the sink was stuck)"
        return [line]
