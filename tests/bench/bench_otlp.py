"""Benchmark: spans per second the OTLP sink delivers to a local receiver, and CPU per 1,000 spans.

    .venv/bin/python -m tests.bench.bench_otlp [--spans 100000] [--protocol grpc|http/protobuf|both]

A synthetic run (``ringtrace.demo.sim``) with about ``--spans`` scopes is read through the real reader
into :class:`OtlpSink` (``max_spans`` raised so every scope is a span); the receiver
(``tests/_support/otlp_receiver.py``) runs in a process of its own, so the CPU measured here is the
exporter's.  Figures:

* ``ours``: from the end of reading (the run is handed to the sink's worker) until ``flush()``
  returns and the receiver has counted every span: spans/s and CPU seconds per 1,000 spans
  (``time.process_time`` of this process; only the worker runs in that phase).  The sink sends
  its ready protobuf bytes through public transport APIs (a generic gRPC unary call, an HTTP
  POST with ``http.client``);
* ``receive()``: the reader-side cost of the sink, CPU of reading with the sink minus without;
* baselines in the same run, on the same spans: (a) the same spans as SDK ``ReadableSpan`` objects
  exported with the stock ``OTLPSpanExporter`` (the SDK encoder), 512 per request: the other
  public-API design; (b) the SDK's tracer API with the default ``BatchSpanProcessor``, which also
  shows how many spans its bounded queue drops (the silent loss the sink avoids);
* shutdown: the same run to a blackholed endpoint (accepts TCP, never answers), ``flush(deadline)`` +
  ``close()`` with the 3.5 s ``watch`` gives its sinks: how long it took and what was
  counted as lost.

Ratios are ours / baseline; wall-clock figures depend on the machine's load, the ratios less so.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path
from typing import Any

from opentelemetry import trace as trace_api
from opentelemetry.exporter.otlp.proto.grpc.trace_exporter import OTLPSpanExporter as GrpcExporter
from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter as HttpExporter
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor, SpanExporter
from opentelemetry.sdk.util.instrumentation import InstrumentationScope

from ringtrace.config import Thresholds
from ringtrace.demo import sim
from ringtrace.gather.oneshot import read_files
from ringtrace.model.records import RunFinished, RunProgress, RunStarted, SinkEvent
from ringtrace.sinks import FanOut, Sink
from ringtrace.sinks.otlp import OtlpSink, Protocol, default_resource, http_traces_url
from ringtrace.sinks.otlp._select import Budget
from ringtrace.sinks.otlp._spans import RunIds, SpanData, TimeAxis, build_spans
from tests._support.otlp_receiver import Blackhole
from tests._support.otlp_view import all_attrs, to_readable
from tests._support.sinks import Collect

ROOT = Path(__file__).resolve().parents[2]


class Receiver:
    """``python -m tests._support.otlp_receiver`` in a subprocess; counts via ``GET /stats``."""

    def __init__(self) -> None:
        self.proc = subprocess.Popen([sys.executable, "-m", "tests._support.otlp_receiver"], cwd=ROOT,
                                     stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
        assert self.proc.stdout is not None
        ends = json.loads(self.proc.stdout.readline())
        self.grpc, self.http = str(ends["grpc"]), str(ends["http"])

    def endpoint(self, protocol: str) -> str:
        return self.grpc if protocol == "grpc" else self.http

    def spans(self) -> int:
        with urllib.request.urlopen(f"{self.http}/stats", timeout=10) as resp:
            return int(json.loads(resp.read())["spans"])

    def close(self) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.close()
        self.proc.wait(10)


def make_run(path: Path, spans: int) -> None:
    layers = max(1, spans // 1011)  # each layer: 1 + 10 + 1000 scopes
    sim.write_file(path, sim.Scenario(name="bench", program="bench_model", loops=(layers, 10, 100),
                                      tasks=(0, 0, 1, 1), tensor_bytes=(1024, 4096)))


def ours(path: Path, rx: Receiver, protocol: Protocol, n_max: int) -> dict[str, float]:
    sink = OtlpSink(rx.endpoint(protocol), protocol, max_spans=n_max)
    before = rx.spans()
    fan = FanOut([sink])
    fan.start_oneshot()  # as convert does: the sink exports on its outlet's worker
    c0 = time.process_time()
    read_files([path], fan, Thresholds())
    c1, t1 = time.process_time(), time.perf_counter()
    fan.flush(time.monotonic() + 600)
    t2, c2 = time.perf_counter(), time.process_time()
    fan.close()
    delivered = rx.spans() - before
    stats = sink.stats()
    sink.close()
    assert stats["spans_failed"] == 0 and delivered == stats["spans_exported"], (stats, delivered)
    return {"spans": delivered, "seconds": t2 - t1, "spans_per_s": delivered / (t2 - t1),
            "cpu_per_1000": 1000 * (c2 - c1) / delivered, "read_cpu": c1 - c0}


def shutdown_blackholed(path: Path, protocol: Protocol, n_max: int) -> dict[str, float]:
    """Read the run into a sink aimed at a blackhole, then flush + close as the app does at SIGTERM."""
    with Blackhole() as hole:
        sink = OtlpSink(hole.endpoint, protocol, max_spans=n_max)
        fan = FanOut([sink])
        fan.start_oneshot()
        read_files([path], fan, Thresholds())
        hole.wait_for_bytes(1, 30)
        t0 = time.perf_counter()
        fan.shutdown(time.monotonic() + 4.0)  # what watch gives its sinks' flush: 4.5 s less the reserve and margin
        took = time.perf_counter() - t0
    s = sink.stats()
    return {"seconds": took, "failed": s["spans_failed"], "exported": s["spans_exported"],
            "pending": s["pending_spans"]}


def read_only_cpu(path: Path) -> float:
    c0 = time.process_time()
    read_files([path], FanOut([Collect("null", keep=False)]), Thresholds())
    return time.process_time() - c0


class Capture(Sink):
    """Keeps what the baselines need: the finished run, its selection and its time axis."""

    name = "capture"

    def __init__(self, max_spans: int) -> None:
        self.budget = Budget(max_spans)
        self.max_spans = max_spans
        self.fin: RunFinished | None = None
        self.seen = 0.0
        self.last = 1

    def receive(self, event: SinkEvent) -> None:
        if isinstance(event, RunStarted):
            self.seen = event.seen_at
        elif isinstance(event, RunProgress):
            for ev in event.events:
                if type(ev).__name__ == "Scope":
                    self.budget.add(ev)  # type: ignore[arg-type]
            if event.records:
                self.last = event.records[-1].line
        elif isinstance(event, RunFinished):
            self.fin = event

    def flush(self, deadline: float) -> None:
        pass

    def close(self) -> None:
        pass

    def spans(self) -> tuple[bytes, list[SpanData]]:
        assert self.fin is not None
        ids = RunIds(self.fin.source.path, 0, self.seen)
        return ids.trace_id, build_spans(self.fin, self.budget.select(1), ids, TimeAxis(self.seen, 1e-6), 1e-6,
                                         self.max_spans, self.last)


def stock_exporter(protocol: str, endpoint: str) -> SpanExporter:
    if protocol == "grpc":
        return GrpcExporter(endpoint=endpoint)
    return HttpExporter(endpoint=http_traces_url(endpoint))


def baseline_readable(trace_id: bytes, spans: list[SpanData], rx: Receiver, protocol: str) -> dict[str, float]:
    """Pre-built ReadableSpans through the stock exporter (SDK encoder), 512 per request."""
    res, scope = default_resource(), InstrumentationScope("ringtrace", "bench")
    exporter = stock_exporter(protocol, rx.endpoint(protocol))
    before = rx.spans()
    c0, t0 = time.process_time(), time.perf_counter()
    readable = [to_readable(trace_id, sp, res, scope) for sp in spans]
    for i in range(0, len(readable), 512):
        exporter.export(readable[i:i + 512])
    t1, c1 = time.perf_counter(), time.process_time()
    exporter.shutdown()
    delivered = rx.spans() - before
    return {"spans": delivered, "seconds": t1 - t0, "spans_per_s": delivered / (t1 - t0),
            "cpu_per_1000": 1000 * (c1 - c0) / max(1, delivered)}


def baseline_tracer(spans: list[SpanData], rx: Receiver, protocol: str) -> dict[str, float]:
    """The SDK tracer API + default BatchSpanProcessor (queue 2048, drops when full)."""
    provider = TracerProvider(resource=default_resource())
    provider.add_span_processor(BatchSpanProcessor(stock_exporter(protocol, rx.endpoint(protocol))))
    tracer = provider.get_tracer("ringtrace-bench")
    before = rx.spans()
    c0, t0 = time.process_time(), time.perf_counter()
    root = tracer.start_span("root", start_time=spans[0].start_ns)
    ctx = trace_api.set_span_in_context(root)
    for sp in spans[1:]:
        attrs: dict[str, Any] = dict(all_attrs(sp))
        s = tracer.start_span(sp.name, context=ctx, attributes=attrs, start_time=sp.start_ns)
        s.end(end_time=sp.end_ns)
    root.end(end_time=spans[0].end_ns)
    provider.force_flush(600_000)
    t1, c1 = time.perf_counter(), time.process_time()
    provider.shutdown()
    delivered = rx.spans() - before
    return {"spans": delivered, "lost": len(spans) - delivered, "seconds": t1 - t0,
            "spans_per_s": delivered / (t1 - t0), "cpu_per_1000": 1000 * (c1 - c0) / max(1, delivered)}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--spans", type=int, default=100_000)
    ap.add_argument("--protocol", choices=("grpc", "http/protobuf", "both"), default="both")
    ap.add_argument("--no-tracer-baseline", action="store_true", help="skip the slow BatchSpanProcessor baseline")
    args = ap.parse_args(argv)
    protocols: tuple[Protocol, ...] = ("grpc", "http/protobuf") if args.protocol == "both" else (args.protocol,)
    rx = Receiver()
    try:
        with tempfile.TemporaryDirectory() as tmp:
            path = Path(tmp) / "scope_stats.jsonl"
            make_run(path, args.spans)
            n_max = args.spans * 2
            bare = read_only_cpu(path)
            cap = Capture(n_max)
            read_files([path], FanOut([cap]), Thresholds())
            trace_id, spans = cap.spans()
            print(f"run: {len(spans)} spans ({path.stat().st_size >> 20} MiB, reading alone {bare:.2f} s CPU)")
            for protocol in protocols:
                o = ours(path, rx, protocol, n_max)
                b = baseline_readable(trace_id, spans, rx, protocol)
                print(f"[{protocol}] ours: {o['spans']:.0f} spans in {o['seconds']:.2f} s = {o['spans_per_s']:,.0f} "
                      f"spans/s, {o['cpu_per_1000']:.3f} CPU s per 1,000 spans; receive() adds "
                      f"{o['read_cpu'] - bare:.2f} s CPU to reading ({1e6 * (o['read_cpu'] - bare) / len(spans):.1f} "
                      "us per scope)")
                print(f"[{protocol}] baseline SDK encoder + stock exporter: {b['spans_per_s']:,.0f} spans/s, "
                      f"{b['cpu_per_1000']:.3f} CPU s per 1,000 spans; ratio ours/baseline: "
                      f"{o['spans_per_s'] / b['spans_per_s']:.2f}x spans/s, "
                      f"{b['cpu_per_1000'] / o['cpu_per_1000']:.2f}x less CPU")
                sd = shutdown_blackholed(path, protocol, n_max)
                print(f"[{protocol}] shutdown, blackholed endpoint: flush + close in {sd['seconds']:.2f} s "
                      f"(flush deadline 3.5 s away); {sd['failed']:.0f} spans counted as failed, {sd['exported']:.0f} "
                      f"exported, {sd['pending']:.0f} pending")
                if not args.no_tracer_baseline:
                    t = baseline_tracer(spans, rx, protocol)
                    print(f"[{protocol}] baseline tracer API + BatchSpanProcessor: {t['spans_per_s']:,.0f} spans/s "
                          f"delivered, {t['lost']:.0f} of {len(spans)} spans lost (queue full); ratio "
                          f"ours/baseline: {o['spans_per_s'] / t['spans_per_s']:.2f}x")
    finally:
        rx.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
