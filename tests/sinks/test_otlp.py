"""The OTLP sink against a real receiver (gRPC and HTTP/protobuf on 127.0.0.1), fed by the real reader.

What is proven: one trace per run with the reader's nesting as parent/child, names and
attributes, ERROR on wedged scopes, deterministic ids, the ``max_spans`` policy, the standard
``OTEL_*`` variables, 100,000 spans with zero loss, the direct wire encoder equal to the SDK's
encoder and our transports delivering what the SDK's stock exporters deliver; and under faults:
a receiver down at start, throughout or restarted mid-run, retryable answers retried with capped,
jittered backoff, non-retryable ones (INVALID_ARGUMENT, HTTP 400, ...) failed at once, partial
successes, a blackholed endpoint, a full queue: every kept span is exported or counted as failed
or dropped, counters move while retrying, and shutdown (flush + close, and SIGTERM to a ``watch``
process) stays within its budget.  Retry waits use a fake ``sleep``/``clock`` where possible.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any, NamedTuple

import grpc
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from opentelemetry.exporter.otlp.proto.common.trace_encoder import encode_spans
from opentelemetry.exporter.otlp.proto.grpc.trace_exporter import OTLPSpanExporter as StockGrpc
from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter as StockHttp
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.sdk.trace.export import SpanExporter, SpanExportResult
from opentelemetry.sdk.util.instrumentation import InstrumentationScope

from ringtrace.demo import sim
from ringtrace.model.records import (
    RESOURCES,
    RunProgress,
    Scope,
    Source,
    Usage,
)
from ringtrace.reading.oneshot import read_files
from ringtrace.sinks import FanOut
from ringtrace.sinks.otlp import OtlpSink, Protocol, RetryPolicy, http_traces_url
from ringtrace.sinks.otlp._export import Attempt, resolve
from ringtrace.sinks.otlp._select import METRICS, Budget
from ringtrace.sinks.otlp._spans import (
    RunIds,
    SpanData,
    SpanEvent,
    TimeAxis,
    WireEncoder,
    build_spans,
)
from ringtrace.sources.paths import find_sources
from ringtrace.stages.diagnose import Thresholds
from tests._support.otlp_receiver import OK, Blackhole, Fault, OtlpReceiver, ReceivedSpan, Tls
from tests._support.otlp_view import to_readable
from tests._support.samples import FAILED, FLOW, SAMPLES
from tests._support.scope_stats import encode_lines, meta, rec
from tests._support.scopes import mark_peaks
from tests._support.sinks import Collect

PROTOCOLS: tuple[Protocol, ...] = ("grpc", "http/protobuf")
SMALL_NESTED = SAMPLES / "outputs/NestedScopes_small_20261130_101702/scope_stats/scope_stats.jsonl"


# -- helpers ------------------------------------------------------------------------------------------


class FakeTime:
    """Injected ``sleep``/``clock``: sleeping advances the clock and may run a hook; nothing waits."""

    def __init__(self, hook: Callable[[int], None] | None = None) -> None:
        self.now = 0.0
        self.sleeps: list[float] = []
        self.hook = hook

    def clock(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.sleeps.append(seconds)
        self.now += seconds
        if self.hook is not None:
            self.hook(len(self.sleeps))


def convert(paths: Sequence[Path], sink: OtlpSink, flush: bool = True) -> Collect:
    files, errors = find_sources([str(p) for p in paths])
    assert not errors
    col = Collect()
    fan = FanOut([col, sink])
    assert not read_files(files, fan, Thresholds())
    if flush:
        assert sink.drain(60)
    assert fan.errors == {"collect": 0, "otlp": 0}
    return col


def make_sink(rx: OtlpReceiver, protocol: Protocol, **kw: Any) -> OtlpSink:
    return OtlpSink(rx.endpoint(protocol), protocol, **kw)


def kept_spans(col: Collect) -> int:
    return sum(1 + len(f.summary.wedged) + len(col.scopes[p]) for p, f in col.finished.items())


def by_trace(spans: list[ReceivedSpan]) -> dict[str, list[ReceivedSpan]]:
    out: dict[str, list[ReceivedSpan]] = {}
    for sp in spans:
        out.setdefault(sp.trace_id, []).append(sp)
    return out


def root_of(spans: list[ReceivedSpan]) -> ReceivedSpan:
    roots = [s for s in spans if not s.parent_id]
    assert len(roots) == 1
    return roots[0]


@pytest.fixture
def rx() -> Iterator[OtlpReceiver]:
    with OtlpReceiver() as receiver:
        yield receiver


def generated_tree(root: Path) -> list[Path]:
    """Every named simulator scenario as an L2 run below ``root``."""
    paths = []
    for name in sim.NAMES:
        path = root / f"{name}_run" / "dfx_outputs" / "scope_stats" / "scope_stats.jsonl"
        path.parent.mkdir(parents=True)
        sim.write_file(path, sim.named(name, seed=7))
        paths.append(path)
    return paths


# -- spans from real and generated runs ------------------------------------------------------------------


def check_run(path: str, spans: list[ReceivedSpan], col: Collect, tick: float) -> None:
    """One trace: the root, every wedged scope, every paired scope; parents, names, attributes, times."""
    fin = col.finished[path]
    s, meta_ = fin.summary, fin.summary.meta
    scopes = col.scopes[path]
    assert len(spans) == 1 + len(s.wedged) + len(scopes)
    root = root_of(spans)
    base = round(col.seen[path] * 1e9)

    def at(line: int) -> int:
        return base + round(line * tick * 1e9)

    lab = fin.source.labels
    assert root.name == fin.source.name
    ra = root.attrs
    assert ra["ringtrace.path"] == path
    assert ra.get("ringtrace.run", "") == lab.run and ra.get("ringtrace.rank", "") == lab.rank
    assert ra.get("ringtrace.dispatch", "") == lab.dispatch
    assert meta_ is not None
    assert (ra["ringtrace.version"], ra["ringtrace.fatal"], ra["ringtrace.dropped"], ra["ringtrace.total"]) == (
        meta_.version, meta_.fatal, meta_.dropped, meta_.total)
    assert ra["ringtrace.complete"] == s.complete
    assert ra["ringtrace.heap_max"] == meta_.heap_max and ra["ringtrace.task_window_max"] == meta_.task_window_max
    assert ra["ringtrace.dep_pool_max"] == meta_.dep_pool_max
    assert ra["ringtrace.wedged"] == bool(s.wedged)
    assert "record line index" in ra["ringtrace.time_axis"] and ra["ringtrace.tick_seconds"] == tick
    assert (ra["ringtrace.spans.kept"], ra["ringtrace.spans.omitted"]) == (len(spans), 0)
    assert root.start == at(1) and root.end == at(col.last_line[path] + 1)
    assert {e.attrs["ringtrace.rule"] for e in root.events} == {f.rule for f in fin.findings}
    assert root.resource["service.name"] == "ringtrace"
    assert root.resource["host.name"] == socket.gethostname()

    by_line = {sp.attrs["ringtrace.line"]: sp for sp in spans if sp is not root}
    assert len(by_line) == len(spans) - 1
    for w in s.wedged:
        sp = by_line[w.line]
        assert sp.name == w.site and sp.status_code == 2 and sp.attrs["ringtrace.wedged"] is True
    for sc in scopes:
        sp = by_line[sc.begin_line]
        parent = by_line.get(sc.parent_line, root) if sc.parent_line else root
        assert sp.parent_id == parent.span_id, (sc, sp)
        assert sp.name == sc.site and sp.status_code == 0 and sp.kind == 1
        a = sp.attrs
        assert (a["ringtrace.depth"], a["ringtrace.ring"], a["ringtrace.end_line"]) == (sc.depth, sc.ring,
                                                                                       sc.end_line)
        assert (sp.start, sp.end) == (at(sc.begin_line), at(sc.end_line))
        for res, usage in zip(RESOURCES, sc.usage, strict=True):
            if usage is None:
                assert f"ringtrace.{res}.high_water" not in a
                continue
            cap = meta_.capacity(res, sc.ring)
            for m in METRICS:
                assert a[f"ringtrace.{res}.{m}"] == getattr(usage, m)
                if cap:
                    assert a[f"ringtrace.{res}.{m}_ratio"] == pytest.approx(getattr(usage, m) / cap)


@pytest.mark.parametrize("protocol", PROTOCOLS)
def test_sample_runs_become_one_trace_each(rx: OtlpReceiver, protocol: Protocol) -> None:
    sink = make_sink(rx, protocol)
    try:
        col = convert([SAMPLES], sink)
    finally:
        sink.close()
    traces = by_trace(rx.spans())
    assert len(traces) == len(col.finished) == 8  # the 8 files (find_sources reads no host log)
    assert sink.spans_exported == kept_spans(col) == sum(map(len, traces.values()))
    assert (sink.spans_failed, sink.dropped_spans, sink.runs_exported) == (0, 0, 8)
    for spans in traces.values():
        check_run(root_of(spans).attrs["ringtrace.path"], spans, col, 1e-6)
    assert {sp.scope for sp in rx.spans()} == {"ringtrace"}


def test_generated_runs_and_tick(rx: OtlpReceiver, tmp_path: Path) -> None:
    paths = generated_tree(tmp_path)
    sink = make_sink(rx, "grpc", tick=2.5e-3)
    try:
        col = convert(paths, sink)
    finally:
        sink.close()
    traces = by_trace(rx.spans())
    assert len(traces) == len(paths)
    for spans in traces.values():
        root = root_of(spans)
        check_run(root.attrs["ringtrace.path"], spans, col, 2.5e-3)
        assert "2.5ms" in root.attrs["ringtrace.time_axis"]
    wedged = [root_of(t) for t in traces.values() if root_of(t).attrs["ringtrace.wedged"]]
    assert len(wedged) == 2  # the wedge and the fatal scenario


def test_wedged_scopes_are_errors_naming_ring_and_resource(rx: OtlpReceiver) -> None:
    sink = make_sink(rx, "http/protobuf")
    try:
        col = convert([FAILED], sink)
    finally:
        sink.close()
    traces = by_trace(rx.spans())
    assert len(traces) == 2
    flow = next(t for t in traces.values() if "window4" in root_of(t).attrs["ringtrace.path"])
    root = root_of(flow)
    fin = col.finished[str(FLOW)]
    assert root.status_code == 2 and "wedged" in root.status_message and root.attrs["ringtrace.wedged"] is True
    wedged = sorted((sp for sp in flow if sp is not root and sp.attrs.get("ringtrace.wedged")),
                    key=lambda sp: sp.attrs["ringtrace.line"])
    assert [sp.attrs["ringtrace.line"] for sp in wedged] == [w.line for w in fin.summary.wedged] and len(wedged) == 5
    assert all(sp.status_code == 2 and sp.end == root.end for sp in wedged)
    assert [sp.parent_id for sp in wedged] == [root.span_id, *(sp.span_id for sp in wedged[:-1])]
    inner = wedged[-1]
    assert inner.attrs["ringtrace.innermost"] is True and "stopped here" in inner.status_message
    (event,) = inner.events
    assert event.name == "ringtrace.wedged"
    # ring 3's task window is 3 of 4 full at the last sample: FLOW_CONTROL_DEADLOCK (diagnose.likely_error)
    assert event.attrs["ringtrace.ring"] == 3 and event.attrs["ringtrace.resource"] == "task_window"
    assert event.attrs["ringtrace.fill_ratio"] == pytest.approx(0.75)
    assert (event.attrs["ringtrace.orch_error_code"], event.attrs["ringtrace.orch_error"]) == (
        3, "FLOW_CONTROL_DEADLOCK")
    heap = next(t for t in traces.values() if "HeapRing" in root_of(t).attrs["ringtrace.path"])
    assert [sp.status_code for sp in heap] == [2, 2]
    (hev,) = next(sp for sp in heap if sp.parent_id).events
    assert hev.attrs["ringtrace.ring"] == 0 and hev.attrs["ringtrace.resource"] in RESOURCES


def test_ids_are_deterministic_across_conversions(rx: OtlpReceiver) -> None:
    def once() -> set[tuple[str, str, str, str]]:
        rx.clear()
        sink = make_sink(rx, "grpc")
        try:
            convert([SAMPLES], sink)
        finally:
            sink.close()
        return {(s.trace_id, s.span_id, s.parent_id, s.name) for s in rx.spans()}

    first, second = once(), once()
    assert first == second and len(first) == 3302
    ids = RunIds("a/scope_stats.jsonl", 0, 1.5)
    assert ids.trace_id == RunIds("a/scope_stats.jsonl", 0, 1.5).trace_id
    assert ids.span_id(7) == RunIds("a/scope_stats.jsonl", 0, 1.5).span_id(7) != ids.span_id(8)
    others = [RunIds("a/scope_stats.jsonl", 1, 1.5), RunIds("a/scope_stats.jsonl", 0, 2.5),
              RunIds("b/scope_stats.jsonl", 0, 1.5)]
    assert len({ids.trace_id, *(o.trace_id for o in others)}) == 4


# -- the budget policy --------------------------------------------------------------------------------


def brute_force_peaks(scopes: list[Scope]) -> dict[tuple[int, int, int], Scope]:
    """Per (ring, resource, metric): the scope holding the run's peak (the last to set its bit)."""
    holders: dict[tuple[int, int, int], Scope] = {}
    for sc in mark_peaks(scopes):
        for bit in range(3 * len(RESOURCES)):
            if sc.sets >> bit & 1:
                holders[sc.ring, bit // 3, bit % 3] = sc
    return holders


def ancestors(sc: Scope, by_line: dict[int, Scope]) -> list[Scope]:
    out = []
    while sc.parent_line in by_line:
        sc = by_line[sc.parent_line]
        out.append(sc)
    return out


def check_policy(scopes: list[Scope], kept: Sequence[Scope], budget: int, wedged_lines: Sequence[int] = ()) -> None:
    by_line = {s.begin_line: s for s in scopes}
    kept_lines = {s.begin_line for s in kept}
    must = set()
    for sc in brute_force_peaks(scopes).values():
        must.add(sc.begin_line)
        must.update(a.begin_line for a in ancestors(sc, by_line))
    assert must <= kept_lines
    room = budget - 1 - len(wedged_lines)
    assert len(kept_lines) == max(len(must), min(len(scopes), room))
    for sc in kept:  # closed under parent (a parent that paired is kept)
        assert sc.parent_line not in by_line or sc.parent_line in kept_lines or sc.parent_line in wedged_lines
    filled = [s.depth for s in kept if s.begin_line not in must]
    left = [s.depth for s in scopes if s.begin_line not in kept_lines]
    if filled and left:
        assert max(filled) <= min(left)  # shallower first
        cut = max(filled)  # within the last depth: in the order they ended
        kept_ends = [s.end_line for s in kept if s.depth == cut and s.begin_line not in must]
        left_ends = [s.end_line for s in scopes if s.depth == cut and s.begin_line not in kept_lines]
        if left_ends:
            assert max(kept_ends) < min(left_ends)


@pytest.mark.parametrize("protocol", PROTOCOLS)
def test_budget_keeps_wedged_peaks_ancestors_then_shallow(rx: OtlpReceiver, tmp_path: Path,
                                                          protocol: Protocol) -> None:
    paths = generated_tree(tmp_path)
    sink = make_sink(rx, protocol, max_spans=40)
    try:
        col = convert(paths, sink)
    finally:
        sink.close()
    traces = by_trace(rx.spans())
    omitted = 0
    for spans in traces.values():
        root = root_of(spans)
        path = root.attrs["ringtrace.path"]
        fin, scopes = col.finished[path], col.scopes[path]
        wedged = [w.line for w in fin.summary.wedged]
        by_line = {sp.attrs["ringtrace.line"]: sp for sp in spans if sp is not root}
        assert set(wedged) <= set(by_line) and all(by_line[w].status_code == 2 for w in wedged)
        kept = [sc for sc in scopes if sc.begin_line in by_line]
        assert len(kept) + len(wedged) + 1 == len(spans)
        check_policy(scopes, kept, 40, wedged)
        for p in fin.summary.peaks:
            if p.scopes:
                peak = by_line[p.high_water_line]
                assert f"ring{p.ring}.{p.resource}.high_water" in peak.attrs["ringtrace.peak"]
        ids = {sp.span_id for sp in spans}
        assert all(sp.parent_id in ids for sp in spans if sp is not root)
        assert root.attrs["ringtrace.spans.omitted"] == len(scopes) - len(kept)
        assert root.attrs["ringtrace.spans.kept"] == len(spans) and root.attrs["ringtrace.spans.max"] == 40
        omitted += len(scopes) - len(kept)
    assert omitted > 0 and sink.spans_dropped_by_budget == omitted == sink.dropped_spans


@st.composite
def runs(draw: st.DrawFn) -> list[Scope]:
    """A random well-nested run: scopes in the order they end, with begin/end/parent lines and usage."""
    out: list[Scope] = []
    line = [2]

    def scope(depth: int, parent: int) -> None:
        begin = line[0]
        line[0] += 1
        for _ in range(draw(st.integers(0, 3 if depth < 4 else 0))):
            scope(depth + 1, begin)
        end = line[0]
        line[0] += 1
        usage = tuple(Usage(*(draw(st.integers(0, 50)) for _ in range(3))) for _ in RESOURCES)
        out.append(Scope(f"s{depth}", depth, min(depth, 3), begin, end, parent, usage))

    for _ in range(draw(st.integers(1, 4))):
        scope(draw(st.integers(0, 1)), 0)
    return mark_peaks(out)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(runs(), st.integers(1, 60))
def test_budget_policy_properties(scopes: list[Scope], max_spans: int) -> None:
    budget = Budget(max_spans)
    for sc in scopes:
        budget.add(sc)
        assert len(budget._fill) <= max_spans  # bounded memory
    sel = budget.select(reserved=1)
    assert list(sel.scopes) == sorted(sel.scopes, key=lambda s: s.begin_line)
    assert sel.offered == len(scopes) and sel.omitted == len(scopes) - len(sel.scopes)
    check_policy(scopes, sel.scopes, max_spans)
    for (ring, r, m), sc in brute_force_peaks(scopes).items():
        assert f"ring{ring}.{RESOURCES[r]}.{METRICS[m]}" in sel.peaks[sc.begin_line]


# -- volume --------------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def big_run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("big") / "big_run" / "dfx_outputs" / "scope_stats" / "scope_stats.jsonl"
    path.parent.mkdir(parents=True)
    sim.write_file(path, sim.Scenario(name="big", loops=(100, 10, 100), tasks=(0, 0, 1, 1),
                                      tensor_bytes=(1024, 4096)))
    return path


@pytest.mark.slow
@pytest.mark.parametrize("protocol", PROTOCOLS)
def test_100k_spans_arrive_with_zero_loss(big_run: Path, protocol: Protocol) -> None:
    with OtlpReceiver(keep=True) as rx:
        sink = make_sink(rx, protocol, max_spans=200_000, max_queued_spans=200_000)
        try:
            col = convert([big_run], sink, flush=False)
            assert sink.drain(600)
        finally:
            sink.close()
        n = kept_spans(col)
        assert n == 101_102 and len(col.scopes[str(big_run)]) == 101_101
        assert (sink.spans_exported, sink.spans_failed, sink.dropped_spans) == (n, 0, 0)
        assert rx.span_count == n
        ids: set[bytes] = set()
        parents: set[bytes] = set()
        for got in rx.received():
            for rs in got.request.resource_spans:
                for ss in rs.scope_spans:
                    for sp in ss.spans:
                        ids.add(sp.span_id)
                        parents.add(sp.parent_span_id)
        assert len(ids) == n  # no duplicates, nothing lost
        assert parents - ids == {b""}  # every parent arrived; one root


# -- receiver down, restarted, refusing, blackholed ------------------------------------------------------------

NO_JITTER = RetryPolicy(first_delay=1.0, jitter=0.0)


@pytest.mark.parametrize("protocol", PROTOCOLS)
def test_receiver_down_at_start_then_up(protocol: Protocol) -> None:
    rx = OtlpReceiver().start()
    rx.stop()  # ports known, nobody listening

    def start_first(n: int) -> None:
        if n == 1:
            rx.start()

    fake = FakeTime(hook=start_first)
    sink = make_sink(rx, protocol, timeout=0.5, batch_size=128, sleep=fake.sleep, clock=fake.clock, retry=NO_JITTER)
    try:
        col = convert([SMALL_NESTED], sink)
        assert fake.sleeps == [1.0] and sink.export_retries == 1
        assert (sink.spans_exported, sink.spans_failed) == (kept_spans(col), 0)
        assert len({s.span_id for s in rx.spans()}) == len(rx.spans()) == kept_spans(col)
    finally:
        sink.close()
        rx.stop()


@pytest.mark.parametrize("protocol", PROTOCOLS)
def test_receiver_down_throughout_counts_failed(protocol: Protocol) -> None:
    rx = OtlpReceiver().start()
    rx.stop()
    fake = FakeTime()
    sink = make_sink(rx, protocol, timeout=0.5, batch_size=512, sleep=fake.sleep, clock=fake.clock,
                     retry=RetryPolicy(attempts=3, first_delay=1.0, jitter=0.0))
    try:
        col = convert([SMALL_NESTED, FAILED], sink)
    finally:
        sink.close()
    kept = kept_spans(col)
    batches = sum(-(-(1 + len(f.summary.wedged) + len(col.scopes[p])) // 512) for p, f in col.finished.items())
    assert (sink.spans_exported, sink.spans_failed) == (0, kept)
    assert fake.sleeps == [1.0, 2.0] * batches and sink.export_requests == 3 * batches
    assert (sink.runs_exported, sink.runs_failed) == (0, 3) and sink.internal_errors == 0


@pytest.mark.parametrize("protocol", PROTOCOLS)
def test_endpoint_down_backs_off_with_jitter_within_the_cap(protocol: Protocol) -> None:
    """Connection refused: exponential delays with jitter, capped by max_delay; the whole batch gives up
    before max_elapsed (the default 10 s), then the next batch starts afresh."""
    rx = OtlpReceiver().start()
    rx.stop()
    fake = FakeTime()
    factors = iter([0.8, 1.2] * 50)
    policy = RetryPolicy()  # the defaults: 0.5 s doubling to 4 s, +-20%, 10 s per batch
    sink = make_sink(rx, protocol, timeout=0.5, batch_size=10_000, sleep=fake.sleep, clock=fake.clock,
                     uniform=lambda lo, hi: lo + (hi - lo) * (next(factors) - 0.8) / 0.4)
    try:
        col = convert([FLOW], sink)
    finally:
        sink.close()
    base = [0.5, 1.0, 2.0, 4.0, 4.0]
    expected = [b * f for b, f in zip(base, [0.8, 1.2] * 3, strict=False)]
    assert fake.sleeps == pytest.approx(expected[:len(fake.sleeps)]) and len(fake.sleeps) >= 3
    assert sum(fake.sleeps) <= policy.max_elapsed < sum(expected[:len(fake.sleeps) + 1])
    assert sink.export_requests == len(fake.sleeps) + 1 and sink.export_retries == len(fake.sleeps)
    assert (sink.spans_failed, sink.spans_exported, sink.pending_spans) == (kept_spans(col), 0, 0)


def test_retries_stop_at_max_elapsed(rx: OtlpReceiver) -> None:
    rx.refuse_next(1000)
    fake = FakeTime()
    sink = make_sink(rx, "grpc", timeout=0.5, sleep=fake.sleep, clock=fake.clock,
                     retry=RetryPolicy(attempts=10, first_delay=1.0, max_delay=4.0, max_elapsed=6.5, jitter=0.0))
    try:
        convert([FLOW], sink)
    finally:
        sink.close()
    assert fake.sleeps == [1.0, 2.0]  # a third retry would start at 1 + 2 + 4 = 7 s > 6.5 s
    assert (sink.spans_failed, sink.spans_exported) == (6, 0)


NON_RETRYABLE = [("grpc", grpc.StatusCode.INVALID_ARGUMENT, 0), ("grpc", grpc.StatusCode.UNAUTHENTICATED, 0),
                 ("grpc", grpc.StatusCode.PERMISSION_DENIED, 0), ("http/protobuf", grpc.StatusCode.OK, 400),
                 ("http/protobuf", grpc.StatusCode.OK, 401), ("http/protobuf", grpc.StatusCode.OK, 413)]


@pytest.mark.parametrize(("protocol", "code", "status"), NON_RETRYABLE)
def test_non_retryable_answers_fail_at_once(rx: OtlpReceiver, protocol: Protocol, code: grpc.StatusCode,
                                            status: int) -> None:
    """INVALID_ARGUMENT, UNAUTHENTICATED, PERMISSION_DENIED / HTTP 400, 401, 413: one request per batch, no
    retry, no wait, counted as failed; the receiver stored nothing."""
    rx.fail_next(1000, code, status)
    slept: list[float] = []
    sink = make_sink(rx, protocol, batch_size=100, sleep=slept.append)
    try:
        col = convert([SMALL_NESTED, FAILED], sink)
        batches = sum(-(-(1 + len(f.summary.wedged) + len(col.scopes[p])) // 100) for p, f in col.finished.items())
        assert (sink.spans_failed, sink.spans_exported, sink.pending_spans) == (kept_spans(col), 0, 0)
        assert (sink.export_requests, sink.export_retries, slept) == (batches, 0, [])
        assert rx.refused == batches and rx.span_count == 0
        assert sink.stats()["runs_failed"] == 3
    finally:
        sink.close()


@pytest.mark.parametrize(("protocol", "code", "status"), [("grpc", grpc.StatusCode.RESOURCE_EXHAUSTED, 0),
                                                          ("grpc", grpc.StatusCode.DEADLINE_EXCEEDED, 0),
                                                          ("http/protobuf", grpc.StatusCode.OK, 429),
                                                          ("http/protobuf", grpc.StatusCode.OK, 408),
                                                          ("http/protobuf", grpc.StatusCode.OK, 502),
                                                          ("http/protobuf", grpc.StatusCode.OK, 504)])
def test_retryable_answers_are_retried(rx: OtlpReceiver, protocol: Protocol, code: grpc.StatusCode,
                                       status: int) -> None:
    rx.fail_next(2, code, status)
    fake = FakeTime()
    sink = make_sink(rx, protocol, sleep=fake.sleep, clock=fake.clock, retry=NO_JITTER)
    try:
        col = convert([FLOW], sink)
    finally:
        sink.close()
    assert fake.sleeps == [1.0, 2.0] and sink.export_retries == 2 and rx.refused == 2
    assert (sink.spans_exported, sink.spans_failed) == (kept_spans(col), 0) == (rx.span_count, 0)


@pytest.mark.parametrize("protocol", PROTOCOLS)
def test_retry_after_lengthens_the_wait_but_not_past_the_cap(rx: OtlpReceiver, protocol: Protocol) -> None:
    """HTTP ``Retry-After`` / gRPC ``RetryInfo`` (status details): waited for, unless it passes the cap."""
    rx.script([Fault(grpc.StatusCode.RESOURCE_EXHAUSTED, 429, retry_after=3.25),
               Fault(grpc.StatusCode.UNAVAILABLE, 503, retry_after=60.0)])
    fake = FakeTime()
    sink = make_sink(rx, protocol, sleep=fake.sleep, clock=fake.clock, retry=NO_JITTER)
    try:
        col = convert([FLOW], sink)
    finally:
        sink.close()
    # 3 s as asked; then 60 s would pass the 10 s cap: the batch fails instead of waiting
    assert fake.sleeps == [3.25] and (sink.spans_failed, sink.spans_exported) == (kept_spans(col), 0)


@pytest.mark.parametrize("protocol", PROTOCOLS)
def test_partial_success_counts_rejected_spans_as_failed(rx: OtlpReceiver, protocol: Protocol) -> None:
    rx.script([Fault(reject=7), OK, Fault(reject=1)])
    sink = make_sink(rx, protocol, batch_size=64)
    try:
        col = convert([SMALL_NESTED], sink)
    finally:
        sink.close()
    kept = kept_spans(col)
    assert (sink.spans_failed, sink.spans_exported) == (8, kept - 8) and rx.rejected == 8
    assert rx.span_count - rx.rejected == sink.spans_exported and sink.export_retries == 0
    assert (sink.runs_failed, sink.runs_exported) == (1, 0)


@pytest.mark.parametrize("protocol", PROTOCOLS)
def test_failed_and_pending_move_while_a_run_is_still_retrying(protocol: Protocol) -> None:
    """Endpoint down, one run of 4+ batches: after each batch gives up, ``failed`` grows and ``pending`` falls,
    before the run's last batch was tried (not only at the end)."""
    rx = OtlpReceiver().start()
    rx.stop()
    seen: list[tuple[int, int]] = []
    sink: OtlpSink | None = None

    def look(_n: int) -> None:
        assert sink is not None
        seen.append((sink.stats()["spans_failed"], sink.stats()["pending_spans"]))

    fake = FakeTime(hook=look)
    sink = make_sink(rx, protocol, timeout=0.5, batch_size=100, sleep=fake.sleep, clock=fake.clock,
                     retry=RetryPolicy(attempts=2, first_delay=1.0, jitter=0.0))
    try:
        col = convert([SMALL_NESTED], sink)
    finally:
        sink.close()
    kept = kept_spans(col)
    assert kept > 300 and len(seen) == -(-kept // 100)  # one retry wait per batch
    assert seen == [(100 * i, kept - 100 * i) for i in range(len(seen))]
    assert (sink.spans_failed, sink.pending_spans) == (kept, 0)


@pytest.mark.parametrize("protocol", PROTOCOLS)
def test_receiver_restarted_mid_run(protocol: Protocol) -> None:
    rx = OtlpReceiver().start()

    def restart(n: int) -> None:
        rx.wait_stopped()
        rx.start()

    fake = FakeTime(hook=restart)
    sink = make_sink(rx, protocol, timeout=0.5, batch_size=100, sleep=fake.sleep, clock=fake.clock)
    try:
        rx.go_down_after(2)  # the third request of the run finds the receiver going down
        col = convert([SMALL_NESTED], sink)
        kept = kept_spans(col)
        assert kept > 300 and rx.starts == 2 and len(fake.sleeps) >= 1
        assert (sink.spans_exported, sink.spans_failed, sink.runs_exported) == (kept, 0, 1)
        spans = rx.spans()
        assert len(spans) == len({s.span_id for s in spans}) == kept
    finally:
        sink.close()
        rx.stop()


def test_full_queue_counts_and_never_blocks_the_reader(rx: OtlpReceiver) -> None:
    gate = threading.Event()
    sink = make_sink(rx, "grpc", timeout=0.5, max_queued_spans=10, sleep=lambda s: gate.wait(30))
    rx.refuse_next(1)  # the worker's first request fails, and it waits in its retry sleep
    done: list[Collect] = []
    reader = threading.Thread(target=lambda: done.append(convert([SAMPLES], sink, flush=False)))
    try:
        reader.start()
        reader.join(30)
        assert not reader.is_alive() and done  # finished while the worker was stuck
        assert sink.stats()["spans_dropped_queue_full"] > 0  # counted while it is stuck, not at the end
        gate.set()
        assert sink.drain(30)
    finally:
        gate.set()
        sink.close()
    kept = kept_spans(done[0])
    assert sink.spans_dropped_queue_full > 0 and sink.spans_failed == 0
    assert sink.spans_exported + sink.spans_dropped_queue_full == kept
    assert rx.span_count == sink.spans_exported


def test_backpressure_mode_waits_and_delivers_everything(rx: OtlpReceiver) -> None:
    sink = make_sink(rx, "http/protobuf", max_queued_spans=10, backpressure=True)
    try:
        col = convert([SAMPLES], sink)
    finally:
        sink.close()
    assert (sink.spans_exported, sink.dropped_spans, sink.spans_failed) == (kept_spans(col), 0, 0)
    assert rx.span_count == kept_spans(col)


def timed_shutdown(sink: OtlpSink, what: str) -> float:
    """flush() then close(), as the app does, in a thread joined with a generous deadline; the time it took."""
    t0 = time.monotonic()
    closer = threading.Thread(target=lambda: (sink.flush(), sink.close()))
    closer.start()
    closer.join(30)
    took = time.monotonic() - t0
    print(f"{what}: flush + close took {took:.2f} s (flush_timeout {sink.flush_timeout} s)")
    assert not closer.is_alive()
    return took


@pytest.mark.parametrize("protocol", PROTOCOLS)
def test_blackholed_endpoint_close_gives_up_within_the_budget(protocol: Protocol,
                                                              caplog: pytest.LogCaptureFixture) -> None:
    """A receiver that accepts TCP and never answers: requests (10 s timeout each) are cut at the flush
    deadline, close adds no second wait, and every kept span is counted as failed, with one log line."""
    with Blackhole() as hole:
        sink = OtlpSink(hole.endpoint, protocol, batch_size=100, flush_timeout=1.0)
        col = convert([SMALL_NESTED, FAILED], sink, flush=False)
        assert hole.wait_for_bytes(1)
        with caplog.at_level(logging.WARNING, "ringtrace.sinks.otlp"):
            timed_shutdown(sink, f"blackhole {protocol}")
    kept = kept_spans(col)
    assert (sink.spans_failed, sink.spans_exported, sink.pending_spans) == (kept, 0, 0)
    assert sink.spans_failed_at_shutdown == kept and sink.export_retries == 0
    lost = [r.getMessage() for r in caplog.records if "spans lost" in r.getMessage()]
    assert len(lost) == 1 and lost[0].startswith(f"otlp: {kept} spans lost")


@pytest.mark.parametrize("protocol", PROTOCOLS)
def test_connect_that_hangs_does_not_hold_up_close(protocol: Protocol) -> None:
    """SYNs dropped (a full backlog): connecting hangs; flush + close still end at the deadline."""
    with Blackhole(accept=False) as hole:
        sink = OtlpSink(hole.endpoint, protocol, flush_timeout=1.0)
        col = convert([FLOW], sink, flush=False)
        timed_shutdown(sink, f"hanging connect {protocol}")
    assert (sink.spans_failed, sink.spans_exported, sink.pending_spans) == (kept_spans(col), 0, 0)
    assert hole.connections == 0


@pytest.mark.parametrize("protocol", PROTOCOLS)
def test_close_during_a_retry_wait_counts_pending_as_failed(protocol: Protocol) -> None:
    rx = OtlpReceiver().start()
    rx.stop()
    sink = make_sink(rx, protocol, timeout=0.5, flush_timeout=0.5,
                     retry=RetryPolicy(first_delay=8.0, max_delay=8.0, max_elapsed=60.0, jitter=0.0))
    col = convert([SMALL_NESTED, FAILED], sink, flush=False)
    timed_shutdown(sink, f"endpoint down {protocol}")  # the worker waits 8 s between tries: flush wakes it
    assert (sink.spans_exported, sink.spans_failed, sink.pending_spans) == (0, kept_spans(col), 0)
    assert sink.export_requests >= 1


def test_close_without_flush_flushes_once(rx: OtlpReceiver) -> None:
    sink = make_sink(rx, "grpc", flush_timeout=30.0)
    col = convert([FAILED], sink, flush=False)
    sink.close()
    sink.close()  # idempotent
    assert sink.spans_exported == kept_spans(col) == rx.span_count


class Boom:
    """A transport whose send raises: a bug must be counted, never kill the worker or reach the reader."""

    def __init__(self) -> None:
        self.calls = 0

    def send(self, payload: bytes, timeout: float) -> Attempt:
        self.calls += 1
        raise RuntimeError("boom")

    def abort(self) -> None:
        pass


def test_a_raising_transport_is_counted_never_raised() -> None:
    boom = Boom()
    fake = FakeTime()
    sink = OtlpSink(None, "grpc", transport=boom, sleep=fake.sleep, clock=fake.clock,
                    retry=RetryPolicy(attempts=2, jitter=0.0))
    col = convert([FAILED], sink)
    sink.close()
    assert boom.calls == 4 and sink.spans_failed == kept_spans(col) and sink.internal_errors == 0


def test_the_sinks_collector_puts_its_counters_on_the_metrics_page() -> None:
    from prometheus_client import generate_latest
    from prometheus_client.openmetrics.exposition import generate_latest as generate_openmetrics

    from ringtrace.sinks.prometheus import PrometheusSink

    fake = FakeTime()
    sink = OtlpSink(None, "grpc", transport=Boom(), sleep=fake.sleep, clock=fake.clock,
                    retry=RetryPolicy(attempts=2, jitter=0.0))
    col = convert([FAILED], sink)
    sink.close()
    prom = PrometheusSink()
    assert b"ringtrace_otlp" not in prom.render("")[0]
    prom.register(sink.collector())
    text, _ = prom.render("")
    assert text == generate_latest(prom.registry)  # render includes a registered collector like a fresh scrape
    om, _ = prom.render("application/openmetrics-text;version=1.0.0")
    assert om == generate_openmetrics(prom.registry)
    page = text.decode()
    assert f'ringtrace_otlp_spans_total{{outcome="failed"}} {float(kept_spans(col))}' in page
    assert f'ringtrace_otlp_spans_total{{outcome="dropped_budget"}} {float(sink.spans_dropped_by_budget)}' in page
    assert kept_spans(col) > 0 and sink.export_retries > 0
    assert 'ringtrace_otlp_spans_total{outcome="exported"} 0.0' in page
    assert f"ringtrace_otlp_export_retries_total {float(sink.export_retries)}" in page
    assert "ringtrace_otlp_pending_spans 0.0" in page


def test_receive_survives_garbage_and_unknown_runs() -> None:
    sink = OtlpSink(None, "grpc", transport=Boom())
    try:
        sink.receive(object())  # type: ignore[arg-type]
        assert sink.internal_errors == 0  # unknown event types are ignored
        src = Source("never/started.jsonl")
        broken = Scope("x", None, 1, 3, 4, 0, (None, None, None))  # type: ignore[arg-type]
        sink.receive(RunProgress(src, (), (broken,), ()))
        assert sink.internal_errors == 1  # a malformed scope: logged and counted, not raised
    finally:
        sink.close()


faults = st.one_of(st.just(OK), st.builds(Fault, st.sampled_from([grpc.StatusCode.UNAVAILABLE,
                                                                  grpc.StatusCode.INVALID_ARGUMENT]),
                                          st.sampled_from([503, 400])),
                   st.builds(Fault, reject=st.integers(1, 200)))


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.lists(faults, max_size=12), st.sampled_from(PROTOCOLS), st.integers(20, 400), st.integers(50, 2000),
       st.integers(1, 3))
def test_no_silent_loss_under_any_faults(rx: OtlpReceiver, script: list[Fault], protocol: Protocol,
                                         batch_size: int, max_queued: int, attempts: int) -> None:
    """Whatever the receiver answers: every kept span is exported, failed or dropped (queue), exactly once;
    what the receiver stored minus what it rejected is what was counted as exported."""
    rx.clear()
    rx.script(script)
    fake = FakeTime()
    sink = make_sink(rx, protocol, batch_size=batch_size, max_queued_spans=max_queued, sleep=fake.sleep,
                     clock=fake.clock, retry=RetryPolicy(attempts=attempts, jitter=0.0))
    try:
        col = convert([SMALL_NESTED, FAILED], sink)
    finally:
        sink.close()
    s = sink.stats()
    assert s["spans_exported"] + s["spans_failed"] + s["spans_dropped_queue_full"] == kept_spans(col)
    assert rx.span_count - rx.rejected == s["spans_exported"] and s["pending_spans"] == 0
    assert s["runs_exported"] + s["runs_failed"] <= len(col.finished)


# -- the agent stops on time ---------------------------------------------------------------------------------


@pytest.mark.slow
@pytest.mark.parametrize(("protocol", "endpoint"), [("grpc", "blackhole"), ("http/protobuf", "blackhole"),
                                                    ("grpc", "down"), ("http/protobuf", "400")])
def test_watch_exits_on_sigterm_within_the_budget(tmp_path: Path, protocol: Protocol, endpoint: str) -> None:
    """``ringtrace watch --otlp-endpoint`` that cannot deliver: SIGTERM -> exit 0 well before a generous
    deadline (the app's budget is 4.5 s; the old code took 8-13 s), the loss said in one log line."""
    tree = tmp_path / "tree"
    for i, src in enumerate((SMALL_NESTED, SMALL_NESTED)):
        dst = tree / f"run{i}" / "dfx_outputs" / "scope_stats" / "scope_stats.jsonl"
        dst.parent.mkdir(parents=True)
        dst.write_bytes(src.read_bytes())
    col = Collect()
    files, _ = find_sources([str(tree)])
    read_files(files, FanOut([col]), Thresholds())
    kept = kept_spans(col)
    events = tmp_path / "events.jsonl"
    with contextlib.ExitStack() as stack:
        hole = stack.enter_context(Blackhole()) if endpoint == "blackhole" else None
        rx = stack.enter_context(OtlpReceiver()) if endpoint != "blackhole" else None
        if rx is not None and endpoint == "down":
            rx.stop()
        if rx is not None and endpoint == "400":
            rx.fail_next(1000, grpc.StatusCode.INVALID_ARGUMENT, 400)
        url = hole.endpoint if hole is not None else rx.endpoint(protocol) if rx is not None else ""
        env = {k: v for k, v in os.environ.items() if not k.startswith("OTEL_")}
        proc = subprocess.Popen([sys.executable, "-m", "ringtrace", "watch", str(tree), "--otlp-endpoint", url,
                                 "--otlp-protocol", protocol, "--events", str(events)],
                                env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
        try:
            deadline = time.monotonic() + 60
            tick = threading.Event()
            while not (events.exists() and len(events.read_text().splitlines()) == 2):  # both runs finished
                assert proc.poll() is None and time.monotonic() < deadline, "watch did not finish the runs"
                tick.wait(0.05)
            if hole is not None:
                assert hole.wait_for_bytes(1)  # the export is under way, and stuck
            t0 = time.monotonic()
            proc.send_signal(signal.SIGTERM)
            _, stderr = proc.communicate(timeout=30)
            took = time.monotonic() - t0
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
    print(f"watch --otlp-endpoint {endpoint} ({protocol}): SIGTERM to exit {took:.2f} s")
    assert proc.returncode == 0, stderr
    assert took < 7.5, f"took {took:.1f} s"  # generous: the budget is 4.5 s
    lost = [line for line in stderr.splitlines() if "spans lost" in line]
    assert len(lost) == 1 and f"otlp: {kept} spans lost" in lost[0], stderr


# -- encoding, endpoints, environment ---------------------------------------------------------------------


class Batch(NamedTuple):
    """The same spans of one trace as our encoder's bytes and as SDK ``ReadableSpan`` objects."""

    payload: bytes
    spans: list[ReadableSpan]


def encoded(enc: WireEncoder, trace_id: bytes, spans: list[SpanData]) -> Batch:
    return Batch(enc.request(trace_id, spans), [to_readable(trace_id, sp, enc.resource, enc.scope) for sp in spans])


def sample_batches() -> Iterator[Batch]:
    res = Resource.create({"service.name": "ringtrace", "n": 3, "list": ("a", "b")})
    enc = WireEncoder(res, InstrumentationScope("ringtrace", "9.9"))
    files, _ = find_sources([str(SAMPLES)])
    col = Collect()
    read_files(files, FanOut([col]), Thresholds())
    for path, fin in col.finished.items():
        budget = Budget(200)
        for sc in col.scopes[path]:
            budget.add(sc)
        ids = RunIds(path, 0, col.seen[path])
        spans = build_spans(fin, budget.select(1 + len(fin.summary.wedged)), ids, TimeAxis(col.seen[path], 1e-6),
                            1e-6, 200, col.last_line[path])
        yield encoded(enc, ids.trace_id, spans)


def test_wire_encoder_equals_the_sdk_encoder_on_samples() -> None:
    n = 0
    for batch in sample_batches():
        ours = ExportTraceServiceRequest.FromString(batch.payload)
        assert ours == encode_spans(batch.spans)
        n += len(batch.spans)
    assert n > 900  # the budget (200 per run) left out some scopes: peaks/parents still encode


int64 = st.integers(-(2**63), 2**63 - 1)
attr_values = st.one_of(st.booleans(), int64, st.floats(allow_nan=False), st.text(max_size=300),
                        st.lists(int64, max_size=4).map(tuple), st.lists(st.text(max_size=5), max_size=3).map(tuple))
usages = st.one_of(st.none(), st.builds(Usage, *(st.integers(-(2**40), 2**40) for _ in range(3))))


@settings(max_examples=200, deadline=None)
@given(st.dictionaries(st.text(min_size=1, max_size=40), attr_values, max_size=8).map(lambda d: list(d.items())),
       st.tuples(usages, usages, usages), st.tuples(*(st.one_of(st.none(), st.integers(1, 2**40)) for _ in range(3))),
       st.integers(0, 2**63), st.text(max_size=200), st.one_of(st.none(), st.text(max_size=50)), st.booleans())
def test_wire_encoder_equals_the_sdk_encoder_on_any_values(
        attrs: list[tuple[str, Any]], usage: tuple[Usage | None, ...], caps: tuple[int | None, ...], t0: int,
        name: str, error: str | None, as_scope: bool) -> None:
    ids = RunIds("p", 0, 0.0)
    scope = Scope(name, 3, 2, 10**6, 10**7, 5, usage) if as_scope else None
    spans = [SpanData(ids.span_id(1), b"", name, t0, t0 + 5, attrs, error,
                      (SpanEvent("ev", t0, attrs),), scope, caps if as_scope else ()),
             SpanData(ids.span_id(2), ids.span_id(1), "child", t0, t0, [], None)]
    batch = encoded(WireEncoder(Resource({"k": "v"}), InstrumentationScope("ringtrace")), ids.trace_id, spans)
    assert ExportTraceServiceRequest.FromString(batch.payload) == encode_spans(batch.spans)


@pytest.mark.parametrize("protocol", PROTOCOLS)
def test_stock_sdk_exporter_receives_the_same_spans(rx: OtlpReceiver, protocol: Protocol) -> None:
    """The same batches through the SDK's stock exporter (SDK encoder, its transport) and through ours
    (ready bytes, a generic gRPC call / a plain POST): the receiver gets the same spans."""

    def received() -> list[tuple[Any, ...]]:
        out = sorted((s.trace_id, s.span_id, s.parent_id, s.name, s.start, s.end,
                      json.dumps(s.attrs, sort_keys=True), s.status_code, s.status_message,
                      tuple(e.name for e in s.events)) for s in rx.spans())
        rx.clear()
        return out

    batches = list(sample_batches())
    stock: SpanExporter = (StockGrpc(endpoint=rx.grpc_endpoint) if protocol == "grpc"
                           else StockHttp(endpoint=http_traces_url(rx.http_endpoint)))
    try:
        assert all(stock.export(b.spans) is SpanExportResult.SUCCESS for b in batches)
    finally:
        stock.shutdown()
    theirs = received()
    sink = make_sink(rx, protocol)
    try:
        assert all(sink.transport.send(b.payload, 5.0).ok for b in batches)
    finally:
        sink.close()
    assert len(theirs) > 900 and received() == theirs


@pytest.mark.parametrize("protocol", PROTOCOLS)
def test_endpoint_without_scheme_is_plain_http(rx: OtlpReceiver, protocol: Protocol) -> None:
    sink = OtlpSink(rx.endpoint(protocol).removeprefix("http://"), protocol)
    try:
        col = convert([FAILED], sink)
    finally:
        sink.close()
    assert sink.spans_exported == rx.span_count == kept_spans(col)


def test_http_endpoint_gets_the_traces_path() -> None:
    assert http_traces_url("http://h:4318") == "http://h:4318/v1/traces"
    assert http_traces_url("http://h:4318/") == "http://h:4318/v1/traces"
    assert http_traces_url("https://h/otlp/v1/traces") == "https://h/otlp/v1/traces"


def test_settings_follow_flags_then_the_standard_variables() -> None:
    env = {"OTEL_EXPORTER_OTLP_ENDPOINT": "http://base:4318/prefix/", "OTEL_EXPORTER_OTLP_TIMEOUT": "2500",
           "OTEL_EXPORTER_OTLP_HEADERS": "a=1,B=x%20y", "OTEL_EXPORTER_OTLP_COMPRESSION": "gzip"}
    s = resolve(None, "http/protobuf", None, env)
    assert (s.url, s.timeout, s.headers, s.compression, s.tls) == (
        "http://base:4318/prefix/v1/traces", 2.5, (("a", "1"), ("b", "x y")), "gzip", False)
    signal = {**env, "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": "https://sig:9/custom", "OTEL_EXPORTER_OTLP_TRACES_"
              "TIMEOUT": "100", "OTEL_EXPORTER_OTLP_TRACES_HEADERS": "c=3", "OTEL_EXPORTER_OTLP_TRACES_COMPRESSION":
              "none", "OTEL_EXPORTER_OTLP_TRACES_CERTIFICATE": "/ca.pem"}
    s = resolve(None, "http/protobuf", None, signal)  # the signal's variables win; its URL is used as given
    assert (s.url, s.timeout, s.headers, s.compression, s.tls, s.certificate) == (
        "https://sig:9/custom", 0.1, (("c", "3"),), "none", True, "/ca.pem")
    assert resolve("h:4317", "grpc", 0.5, signal).url == "http://h:4317"  # the flag wins; no scheme: plain
    assert resolve("h:4317", "grpc", None, signal).timeout == 0.1
    assert resolve(None, "grpc", None, env).target == "base:4318"
    assert resolve("h", "grpc", None, {"OTEL_EXPORTER_OTLP_INSECURE": "false"}).url == "https://h:443"
    assert resolve("[::1]:4317", "grpc", None, {}).target == "[::1]:4317"
    assert resolve(None, "grpc", None, {}).url == "http://localhost:4317"
    assert resolve(None, "http/protobuf", None, {}).url == "http://localhost:4318/v1/traces"


@pytest.mark.parametrize(("env", "named"), [
    ({"OTEL_EXPORTER_OTLP_COMPRESSION": "brotli"}, "OTEL_EXPORTER_OTLP_COMPRESSION"),
    ({"OTEL_EXPORTER_OTLP_TRACES_TIMEOUT": "soon"}, "OTEL_EXPORTER_OTLP_TRACES_TIMEOUT"),
    ({"OTEL_EXPORTER_OTLP_TIMEOUT": "nan"}, "OTEL_EXPORTER_OTLP_TIMEOUT"),
    ({"OTEL_EXPORTER_OTLP_TIMEOUT": "-5"}, "OTEL_EXPORTER_OTLP_TIMEOUT"),
    ({"OTEL_EXPORTER_OTLP_HEADERS": "novalue"}, "OTEL_EXPORTER_OTLP_HEADERS"),
    ({"OTEL_EXPORTER_OTLP_INSECURE": "maybe"}, "OTEL_EXPORTER_OTLP_INSECURE"),
    ({"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": "ftp://x/y"}, "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT"),
    ({"OTEL_EXPORTER_OTLP_ENDPOINT": "http://h:99999"}, "OTEL_EXPORTER_OTLP_ENDPOINT"),
    ({"OTEL_EXPORTER_OTLP_ENDPOINT": "https://h:4317", "OTEL_EXPORTER_OTLP_CERTIFICATE": "/nonexistent/ca.pem"},
     "OTEL_EXPORTER_OTLP_CERTIFICATE"),
])
def test_unusable_settings_are_errors_naming_the_variable(env: dict[str, str], named: str,
                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    for k in [k for k in os.environ if k.startswith("OTEL_")]:
        monkeypatch.delenv(k)
    for k, v in env.items():
        monkeypatch.setenv(k, v)
    for protocol in PROTOCOLS:
        with pytest.raises(ValueError, match=named):
            OtlpSink(None, protocol, env=os.environ).close()  # the environment, as the Config captures it


@pytest.mark.parametrize("protocol", PROTOCOLS)
def test_standard_otel_environment_is_honoured(rx: OtlpReceiver, protocol: Protocol,
                                               monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_ENDPOINT", rx.endpoint(protocol))
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_HEADERS", "x-ringtrace-test=yes,authorization=Bearer%20t0ken")
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_COMPRESSION", "gzip")
    monkeypatch.setenv("OTEL_RESOURCE_ATTRIBUTES", "deployment.environment=ci,team=rings")
    sink = OtlpSink(None, protocol, env=os.environ)  # no endpoint given: OTEL_EXPORTER_OTLP_ENDPOINT
    try:
        col = convert([FAILED], sink)
    finally:
        sink.close()
    got = rx.received()
    assert got and sum(1 for _ in rx.spans()) == kept_spans(col)
    for r in got:
        assert r.headers["x-ringtrace-test"] == "yes" and r.headers["authorization"] == "Bearer t0ken"
        if protocol == "http/protobuf":
            assert r.headers["content-encoding"] == "gzip"
    assert sink.settings.compression == "gzip"  # gRPC's per-message compression is not visible to a servicer
    res = rx.spans()[0].resource
    assert (res["deployment.environment"], res["team"], res["service.name"]) == ("ci", "rings", "ringtrace")


@pytest.fixture(scope="module")
def pki(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A CA, a server certificate for 127.0.0.1 and a client certificate, made by the openssl CLI."""
    if shutil.which("openssl") is None:
        pytest.skip("openssl CLI not installed")
    d = tmp_path_factory.mktemp("pki")

    def openssl(*args: str) -> None:
        subprocess.run(["openssl", *args], cwd=d, check=True, capture_output=True, timeout=60)

    ec = ["-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes"]
    openssl("req", "-x509", *ec, "-keyout", "ca.key", "-out", "ca.crt", "-days", "2", "-subj", "/CN=otlp-test-ca")
    for name, ext in (("server", "subjectAltName=IP:127.0.0.1\n"), ("client", "extendedKeyUsage=clientAuth\n")):
        (d / f"{name}.ext").write_text(ext)
        openssl("req", *ec, "-keyout", f"{name}.key", "-out", f"{name}.csr", "-subj", f"/CN={name}")
        openssl("x509", "-req", "-in", f"{name}.csr", "-CA", "ca.crt", "-CAkey", "ca.key", "-CAcreateserial",
                "-out", f"{name}.crt", "-days", "2", "-extfile", f"{name}.ext")
    return d


@pytest.mark.parametrize("protocol", PROTOCOLS)
def test_tls_with_client_certificates_from_the_environment(pki: Path, protocol: Protocol,
                                                           monkeypatch: pytest.MonkeyPatch) -> None:
    """An https endpoint: the server is checked against OTEL_EXPORTER_OTLP_CERTIFICATE, and the client shows
    OTEL_EXPORTER_OTLP_CLIENT_CERTIFICATE / _CLIENT_KEY to a receiver that requires one."""
    tls = Tls(pki / "server.crt", pki / "server.key", client_ca=pki / "ca.crt")
    with OtlpReceiver(tls=tls) as rx:
        monkeypatch.setenv("OTEL_EXPORTER_OTLP_TRACES_CERTIFICATE", str(pki / "ca.crt"))
        monkeypatch.setenv("OTEL_EXPORTER_OTLP_CLIENT_CERTIFICATE", str(pki / "client.crt"))
        monkeypatch.setenv("OTEL_EXPORTER_OTLP_CLIENT_KEY", str(pki / "client.key"))
        assert rx.endpoint(protocol).startswith("https://")
        sink = make_sink(rx, protocol, env=os.environ)
        try:
            col = convert([FAILED], sink)
        finally:
            sink.close()
        assert sink.settings.tls and (sink.spans_exported, sink.spans_failed) == (kept_spans(col), 0)
        assert rx.span_count == kept_spans(col)
        monkeypatch.delenv("OTEL_EXPORTER_OTLP_CLIENT_CERTIFICATE")
        monkeypatch.delenv("OTEL_EXPORTER_OTLP_CLIENT_KEY")
        fake = FakeTime()
        anonymous = make_sink(rx, protocol, sleep=fake.sleep, clock=fake.clock, retry=RetryPolicy(attempts=2))
        try:
            convert([FLOW], anonymous)
        finally:
            anonymous.close()
        assert (anonymous.spans_exported, anonymous.spans_failed) == (0, 6)  # no client certificate: refused


def test_runtime_needs_no_sdk_exporter_nor_requests(rx: OtlpReceiver) -> None:
    """The OTLP exporter packages are dev dependencies only (the baselines): with them unimportable, a
    ``convert`` still delivers over both protocols."""
    code = ("import sys; sys.modules['opentelemetry.exporter'] = None; sys.modules['requests'] = None; "
            "from ringtrace.cli import run; sys.argv = ['ringtrace', *sys.argv[1:]]; run()")
    for protocol in PROTOCOLS:
        rx.clear()
        proc = subprocess.run([sys.executable, "-c", code, "convert", str(FLOW), "--otlp-endpoint",
                               rx.endpoint(protocol), "--otlp-protocol", protocol],
                              capture_output=True, text=True, timeout=120)
        assert proc.returncode == 0, proc.stderr
        assert "6 spans exported in 1 trace(s)" in proc.stdout and rx.span_count == 6


def test_otel_service_name_overrides_the_default(rx: OtlpReceiver, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OTEL_SERVICE_NAME", "rings-on-node7")
    sink = make_sink(rx, "grpc")
    try:
        convert([FLOW], sink)
    finally:
        sink.close()
    assert {s.resource["service.name"] for s in rx.spans()} == {"rings-on-node7"}


def test_unpaired_parent_hangs_off_the_root(rx: OtlpReceiver, tmp_path: Path) -> None:
    lines = [meta(total=7), rec("(unknown):0", "begin", 0), rec("a.cpp:1", "begin", 1), rec("b.cpp:2", "begin", 2),
             rec("b.cpp:2", "end", 2), rec("c.cpp:3", "begin", 1),  # a.cpp:1 never ends: abandoned at line 6
             rec("c.cpp:3", "end", 1), rec("(unknown):0", "end", 0)]
    path = tmp_path / "scope_stats.jsonl"
    path.write_bytes(encode_lines(lines))
    sink = make_sink(rx, "grpc")
    try:
        col = convert([path], sink)
    finally:
        sink.close()
    spans = rx.spans()
    assert len(spans) == 1 + len(col.scopes[str(path)]) == 4
    root = root_of(spans)
    b = next(s for s in spans if s.name == "b.cpp:2")
    assert b.parent_id == root.span_id and b.attrs["ringtrace.parent_line"] == 3
    c = next(s for s in spans if s.name == "c.cpp:3")
    top = next(s for s in spans if s.name == "(unknown):0")
    assert c.parent_id == top.span_id and "ringtrace.parent_line" not in c.attrs
