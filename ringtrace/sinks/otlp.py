"""The OpenTelemetry sink: every finished run becomes one trace, sent over OTLP (gRPC or HTTP/protobuf).

Spans: a root span per run (the source) and one span per scope, its parent the enclosing scope
(see :mod:`._otlp_spans` for ids, attributes and the time axis, :mod:`._otlp_select` for the
``max_spans`` policy).  Spans are sent when the run finishes (:class:`RunFinished`): the policy
needs the run's final peaks, and a trace arrives whole.

Threads and back-pressure.  :meth:`OtlpSink.receive` runs on the reader's (or app's sink) thread
and only does bookkeeping: it feeds each paired scope to the run's bounded :class:`Budget` and,
at the end of a run, selects the kept scopes and hands the run to a queue bounded by
``max_queued_spans``.  When the queue is full the run is not queued and its spans are counted in
``spans_dropped_queue_full`` (logged) - unless ``backpressure=True`` (``convert``: nothing else
waits on that thread), then ``receive`` waits for room.  The sink's own worker thread builds
the spans, encodes them in batches of ``batch_size`` and exports each batch with the SDK's
``OTLPSpanExporter`` (so ``OTEL_EXPORTER_OTLP_*`` endpoint, headers, certificates, timeout and
compression apply), retrying a failed batch with exponential backoff (:class:`RetryPolicy`,
injectable ``sleep``/``clock``).  Nothing is dropped silently: every kept span ends up in
exactly one of ``spans_exported`` and ``spans_failed``; spans still queued at :meth:`close`
count as failed.  Nothing here raises into the caller.

Memory: per open run O(``max_spans``) (the budget's candidates); queued runs at most
``max_queued_spans`` spans (or one run, if a single run is larger).
"""

from __future__ import annotations

import contextlib
import logging
import socket
import threading
import time
from collections import deque
from collections.abc import Callable, Sequence
from typing import Any, Literal
from urllib.parse import urlparse

import msgspec
from opentelemetry.exporter.otlp.proto.grpc.trace_exporter import OTLPSpanExporter as GrpcSpanExporter
from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter as HttpSpanExporter
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
from opentelemetry.sdk.resources import OTELResourceDetector, Resource
from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.sdk.trace.export import SpanExporter, SpanExportResult
from opentelemetry.sdk.util.instrumentation import InstrumentationScope

from ringtrace.config import Config
from ringtrace.records import RunFinished, RunProgress, RunStarted, Scope, SinkEvent, Source

from ._otlp_select import Budget, Selection
from ._otlp_spans import EncodedBatch, RunIds, TimeAxis, WireEncoder, build_spans

log = logging.getLogger("ringtrace.sinks.otlp")

Protocol = Literal["grpc", "http/protobuf"]
SERVICE_NAME = "ringtrace"


class RetryPolicy(msgspec.Struct, frozen=True):
    """A failed batch is retried after ``first_delay``, doubling up to ``max_delay`` seconds, for at
    most ``attempts`` tries in all and no retry that would start ``max_elapsed`` seconds after the first."""

    attempts: int = 6
    first_delay: float = 1.0
    max_delay: float = 30.0
    max_elapsed: float = 120.0


def _version() -> str:
    try:
        from importlib.metadata import version

        return version("ringtrace")
    except Exception:  # running from a source tree
        return "unknown"


def default_resource() -> Resource:
    """``service.name=ringtrace``, ``service.version``, ``host.name``; ``OTEL_RESOURCE_ATTRIBUTES`` and
    ``OTEL_SERVICE_NAME`` add to it and win (the SDK's ``Resource.create`` plus its env detector)."""
    ours = Resource.create({"service.name": SERVICE_NAME, "service.version": _version(),
                            "host.name": socket.gethostname()})
    return ours.merge(OTELResourceDetector().detect())


def http_traces_url(endpoint: str) -> str:
    """``--otlp-endpoint`` is a base URL like ``OTEL_EXPORTER_OTLP_ENDPOINT``: ``/v1/traces`` is added
    when it has no path; a URL with a path is used as given."""
    return endpoint.rstrip("/") + "/v1/traces" if urlparse(endpoint).path in ("", "/") else endpoint


class _GrpcExporter(GrpcSpanExporter):
    """The SDK's gRPC exporter, sending an :class:`EncodedBatch`'s ready bytes instead of re-encoding."""

    def _translate_data(self, data: Sequence[ReadableSpan]) -> ExportTraceServiceRequest:
        if isinstance(data, EncodedBatch):
            return ExportTraceServiceRequest.FromString(data.payload)
        return super()._translate_data(data)


class _HttpExporter(HttpSpanExporter):
    """The SDK's HTTP exporter (its client: retries, headers, compression, TLS), sending ready bytes.

    Falls back to the stock path (SDK encoder) if this SDK version's internals differ.
    """

    def export(self, spans: Sequence[ReadableSpan]) -> SpanExportResult:
        client: Any = getattr(self, "_client", None)
        if isinstance(spans, EncodedBatch) and client is not None and hasattr(client, "export"):
            if getattr(self, "_shutdown", False):
                return SpanExportResult.FAILURE
            result = client.export(spans.payload)
            return SpanExportResult.SUCCESS if getattr(result, "success", False) else SpanExportResult.FAILURE
        return super().export(spans)


def make_exporter(endpoint: str | None, protocol: Protocol, timeout: float | None = None) -> SpanExporter:
    """The SDK exporter for ``protocol``; ``endpoint``/``timeout`` only when given (else ``OTEL_EXPORTER_OTLP_*``).

    An endpoint without a scheme (``collector:4317``) means ``http://`` (plain text), as a bare
    ``host:port`` would otherwise silently become a TLS connection in the gRPC exporter.
    """
    if endpoint and "://" not in endpoint:
        endpoint = "http://" + endpoint
    if protocol == "grpc":
        return _GrpcExporter(endpoint=endpoint or None, timeout=timeout)
    if protocol == "http/protobuf":
        return _HttpExporter(endpoint=http_traces_url(endpoint) if endpoint else None, timeout=timeout)
    raise ValueError(f"unknown OTLP protocol {protocol!r} (expected grpc or http/protobuf)")


class _RunState:
    __slots__ = ("budget", "last_line", "seen_at")

    def __init__(self, seen_at: float, max_spans: int) -> None:
        self.seen_at = seen_at
        self.budget = Budget(max_spans)
        self.last_line = 1


class _Job:
    """A finished run handed to the worker (which owns ``state`` from then on)."""

    __slots__ = ("fin", "selection", "spans", "state")

    def __init__(self, fin: RunFinished, state: _RunState, selection: Selection, spans: int) -> None:
        self.fin = fin
        self.state = state
        self.selection = selection
        self.spans = spans


class OtlpSink:
    """See the module docstring.  Counters are plain ints, read them at any time (``stats()``)."""

    name = "otlp"

    def __init__(self, endpoint: str | None = None, protocol: Protocol = "grpc", tick: float = 1e-6,
                 max_spans: int = 10_000, exporter_factory: Callable[[], SpanExporter] | None = None, *,
                 timeout: float | None = None, batch_size: int = 512, max_queued_spans: int = 200_000,
                 backpressure: bool = False, retry: RetryPolicy | None = None, flush_timeout: float = 30.0,
                 sleep: Callable[[float], object] | None = None, clock: Callable[[], float] = time.monotonic,
                 wall: Callable[[], float] = time.time, resource: Resource | None = None) -> None:
        if tick <= 0 or max_spans < 1 or batch_size < 1:
            raise ValueError("tick must be > 0, max_spans and batch_size >= 1")
        self.tick = tick
        self.max_spans = max_spans
        self.batch_size = batch_size
        self.max_queued_spans = max_queued_spans
        self.backpressure = backpressure
        self.retry = retry or RetryPolicy()
        self.flush_timeout = flush_timeout
        self._clock = clock
        self._wall = wall
        self._stop = threading.Event()
        self._sleep: Callable[[float], object] = sleep or self._stop.wait
        self.resource = resource or default_resource()
        self._encoder = WireEncoder(self.resource, InstrumentationScope("ringtrace", _version()))
        self.exporter = exporter_factory() if exporter_factory else make_exporter(endpoint, protocol, timeout)
        self._runs: dict[Source, _RunState] = {}
        self._cond = threading.Condition()
        self._jobs: deque[_Job] = deque()
        self._queued = 0  # spans in _jobs plus the job being exported
        self._busy = False
        self._closed = False
        # counters (written under _cond by the worker, under it or on the receive thread otherwise)
        self.spans_exported = 0
        self.spans_failed = 0
        self.spans_dropped_by_budget = 0
        self.spans_dropped_queue_full = 0
        self.runs_exported = 0
        self.runs_failed = 0
        self.export_requests = 0
        self.export_retries = 0
        self.internal_errors = 0
        self._worker = threading.Thread(target=self._work, name="ringtrace-otlp", daemon=True)
        self._worker.start()

    @classmethod
    def from_config(cls, cfg: Config, *, backpressure: bool = False, flush_timeout: float = 30.0) -> OtlpSink:
        """The sink ``watch``/``convert`` use: ``--otlp-*`` settings, ``OTEL_EXPORTER_OTLP_*`` for the rest.

        ``convert`` passes ``backpressure=True`` (a file reader may wait; the live reader never does).
        """
        return cls(cfg.otlp_endpoint or None, cfg.otlp_protocol, cfg.otlp_tick, cfg.otlp_max_spans,
                   backpressure=backpressure, flush_timeout=flush_timeout)

    # -- the reader's side -------------------------------------------------------------------------

    @property
    def dropped_spans(self) -> int:
        """Spans never sent on purpose: left out by ``max_spans`` or because the queue was full."""
        return self.spans_dropped_by_budget + self.spans_dropped_queue_full

    @property
    def pending_spans(self) -> int:
        return self._queued

    def stats(self) -> dict[str, int]:
        """All counters, for the self-metrics."""
        return {k: getattr(self, k) for k in (
            "spans_exported", "spans_failed", "spans_dropped_by_budget", "spans_dropped_queue_full",
            "runs_exported", "runs_failed", "export_requests", "export_retries", "internal_errors",
            "pending_spans")}

    def receive(self, event: SinkEvent) -> None:
        try:
            if type(event) is RunProgress:
                st = self._runs.get(event.source)
                if st is None:
                    st = self._runs[event.source] = _RunState(self._wall(), self.max_spans)
                add = st.budget.add
                for ev in event.events:
                    if type(ev) is Scope:
                        add(ev)
                if event.records:
                    st.last_line = max(st.last_line, event.records[-1].line)
            elif type(event) is RunStarted:
                seen = event.seen_at if event.seen_at > 0 else self._wall()
                self._runs[event.source] = _RunState(seen, self.max_spans)
            elif type(event) is RunFinished:
                st = self._runs.pop(event.source, None) or _RunState(self._wall(), self.max_spans)
                self._finish(event, st)
        except Exception:  # never into the reader
            with self._cond:
                self.internal_errors += 1
            log.exception("otlp sink: cannot handle %s", type(event).__name__)

    def _finish(self, fin: RunFinished, st: _RunState) -> None:
        wedged = len(fin.summary.wedged)
        sel = st.budget.select(reserved=1 + wedged)
        self._check_peaks(fin, st)
        n = 1 + wedged + len(sel.scopes)
        job = _Job(fin, st, sel, n)
        with self._cond:
            self.spans_dropped_by_budget += sel.omitted
            while (self._queued and self._queued + n > self.max_queued_spans and self.backpressure
                   and not self._closed):
                self._cond.wait()
            if self._closed or (self._queued and self._queued + n > self.max_queued_spans):
                self.spans_dropped_queue_full += n
                log.warning("otlp: export queue full (%d spans waiting): %d spans of %s dropped",
                            self._queued, n, fin.source.path)
                return
            self._jobs.append(job)
            self._queued += n
            self._cond.notify_all()

    @staticmethod
    def _check_peaks(fin: RunFinished, st: _RunState) -> None:
        for p in fin.summary.peaks:
            if p.scopes and st.budget.peak_line(p.ring, p.resource) not in (None, p.high_water_line):
                log.debug("otlp: peak scope of ring %d %s differs from the summary's (line %d)", p.ring,
                          p.resource, p.high_water_line)

    # -- the worker ------------------------------------------------------------------------------------

    def _work(self) -> None:
        while True:
            with self._cond:
                while not self._jobs and not self._stop.is_set():
                    self._cond.wait()
                if not self._jobs:
                    return
                job = self._jobs.popleft()
                self._busy = True
            try:
                self._export_run(job)
            except Exception:
                log.exception("otlp: exporting %s failed", job.fin.source.path)
                with self._cond:
                    self.internal_errors += 1
            finally:
                with self._cond:
                    self._busy = False
                    self._queued -= job.spans
                    self._cond.notify_all()

    def _export_run(self, job: _Job) -> None:
        fin, st = job.fin, job.state
        done = 0
        ok = True
        try:
            ids = RunIds(fin.source.path, fin.source.generation, st.seen_at)
            spans = build_spans(fin, job.selection, ids, TimeAxis(st.seen_at, self.tick), self.tick,
                                self.max_spans, st.last_line)
            for i in range(0, len(spans), self.batch_size):
                chunk = spans[i:i + self.batch_size]
                sent = not self._stop.is_set() and self._send(EncodedBatch(self._encoder, ids.trace_id, chunk))
                ok = ok and sent
                with self._cond:
                    if sent:
                        self.spans_exported += len(chunk)
                    else:
                        self.spans_failed += len(chunk)
                done += len(chunk)
        finally:
            with self._cond:
                if done < job.spans:  # an error while building: the rest is lost, and counted
                    self.spans_failed += job.spans - done
                    ok = False
                if ok:
                    self.runs_exported += 1
                else:
                    self.runs_failed += 1

    def _send(self, batch: EncodedBatch) -> bool:
        """Export one batch with retries; True when the receiver took it."""
        policy = self.retry
        delay = policy.first_delay
        started = self._clock()
        for attempt in range(1, policy.attempts + 1):
            with self._cond:
                self.export_requests += 1
            try:
                if self.exporter.export(batch) is SpanExportResult.SUCCESS:
                    return True
            except Exception as err:  # an exporter bug must not kill the worker
                log.warning("otlp: exporter raised: %s", err)
            if (attempt == policy.attempts or self._stop.is_set()
                    or self._clock() - started + delay > policy.max_elapsed):
                break
            log.info("otlp: export of %d spans failed (attempt %d), retrying in %.1fs", len(batch), attempt, delay)
            with self._cond:
                self.export_retries += 1
            self._sleep(delay)
            delay = min(delay * 2, policy.max_delay)
        log.warning("otlp: %d spans could not be exported after %d attempt(s)", len(batch), attempt)
        return False

    # -- end of life -------------------------------------------------------------------------------------

    def flush(self) -> None:
        """The sink contract's flush: :meth:`drain` within ``flush_timeout``."""
        self.drain()

    def drain(self, timeout: float | None = None) -> bool:
        """Wait until every queued run was exported (or failed); False when ``timeout`` (default
        ``flush_timeout``) ran out first.  A wait on a condition, woken by the worker."""
        deadline = time.monotonic() + (self.flush_timeout if timeout is None else timeout)
        with self._cond:
            while self._jobs or self._busy:
                left = deadline - time.monotonic()
                if left <= 0 or not self._worker.is_alive():
                    log.warning("otlp: flush timed out with %d spans waiting", self._queued)
                    return False
                self._cond.wait(left)
        return True

    def close(self) -> None:
        """Drain (bounded by ``flush_timeout``), then stop: spans still queued count as failed, and a
        batch still being retried fails at once (the exporter is shut down, the retry sleep woken)."""
        if self._closed:
            return
        self.drain()
        with self._cond:
            self._closed = True
            self._stop.set()
            for job in self._jobs:
                self.spans_failed += job.spans
                self.runs_failed += 1
                self._queued -= job.spans
            self._jobs.clear()
            self._cond.notify_all()
        with contextlib.suppress(Exception):  # also ends the exporter's own retry wait, if one is running
            self.exporter.shutdown()
        self._worker.join(timeout=5.0)

    def outcome(self) -> list[str]:
        """One line for people (``convert`` prints it): what was sent, left out and lost."""
        s = self.stats()
        line = (f"otlp: {s['spans_exported']} spans exported in {s['runs_exported']} trace(s)"
                f", {s['spans_dropped_by_budget']} left out by --otlp-max-spans")
        if s["spans_failed"] or s["spans_dropped_queue_full"]:
            line += f"; {s['spans_failed']} failed, {s['spans_dropped_queue_full']} dropped (queue full)"
        return [line]
