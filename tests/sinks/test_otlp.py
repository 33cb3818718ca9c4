"""The OTLP sink against a real receiver (gRPC and HTTP/protobuf on 127.0.0.1), fed by the real reader.

What is proven: one trace per run with the reader's nesting as parent/child, names and
attributes, ERROR on wedged scopes, deterministic ids, the ``max_spans`` policy, the standard
``OTEL_*`` variables, 100,000 spans with zero loss, a receiver down at start or restarted in the
middle of a run (every kept span exported or counted as failed), a full queue that never blocks
the reader, and the direct wire encoder equal to the SDK's encoder.  Time is injected: retries
use a fake ``sleep``/``clock``, never the wall clock.
"""

from __future__ import annotations

import json
import socket
import threading
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

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

from ringtrace import sim
from ringtrace.diagnose import Thresholds
from ringtrace.layout import find_sources
from ringtrace.readfiles import read_files
from ringtrace.records import (
    RESOURCES,
    RunFinished,
    RunProgress,
    RunStarted,
    Scope,
    SinkEvent,
    Source,
    Usage,
)
from ringtrace.sinks import FanOut
from ringtrace.sinks._otlp_select import METRICS, Budget
from ringtrace.sinks._otlp_spans import (
    EncodedBatch,
    RunIds,
    SpanData,
    SpanEvent,
    TimeAxis,
    WireEncoder,
    build_spans,
)
from ringtrace.sinks.otlp import OtlpSink, Protocol, RetryPolicy, http_traces_url
from tests.conftest import SAMPLES, encode_lines, meta, rec
from tests.otlp_receiver import OtlpReceiver, ReceivedSpan

PROTOCOLS: tuple[Protocol, ...] = ("grpc", "http/protobuf")
FAILED = SAMPLES / "failed"
FLOW = FAILED / "NestedScopes_window4_flow_control_deadlock/dfx_outputs/scope_stats/scope_stats.jsonl"
SMALL_NESTED = SAMPLES / "outputs/NestedScopes_small_20261130_101702/scope_stats/scope_stats.jsonl"


# -- helpers ------------------------------------------------------------------------------------------


class Collect:
    """What the reader said, per source: seen_at, every paired scope, the finished run."""

    name = "collect"

    def __init__(self) -> None:
        self.seen: dict[str, float] = {}
        self.scopes: dict[str, list[Scope]] = {}
        self.finished: dict[str, RunFinished] = {}
        self.last_line: dict[str, int] = {}

    def receive(self, event: SinkEvent) -> None:
        path = event.source.path
        if isinstance(event, RunStarted):
            self.seen[path] = event.seen_at
            self.scopes[path] = []
            self.last_line[path] = 1
        elif isinstance(event, RunProgress):
            self.scopes[path] += [e for e in event.events if isinstance(e, Scope)]
            if event.records:
                self.last_line[path] = event.records[-1].line
        else:
            self.finished[path] = event

    def flush(self) -> None:
        pass

    def close(self) -> None:
        pass


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
    assert len(traces) == len(col.finished) == 8
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
    """Per (ring, resource, metric): the first scope reaching the maximum (the pairer's rule)."""
    best: dict[tuple[int, int, int], tuple[int, Scope]] = {}
    for sc in scopes:
        for r, usage in enumerate(sc.usage):
            if usage is None:
                continue
            for m, name in enumerate(METRICS):
                v = getattr(usage, name)
                key = (sc.ring, r, m)
                if key not in best or v > best[key][0]:
                    best[key] = (v, sc)
    return {k: v[1] for k, v in best.items()}


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
    return out


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


# -- receiver down, restarted, failing exporters --------------------------------------------------------------


@pytest.mark.parametrize("protocol", PROTOCOLS)
def test_receiver_down_at_start_then_up(protocol: Protocol) -> None:
    rx = OtlpReceiver().start()
    rx.stop()  # ports known, nobody listening

    def start_first(n: int) -> None:
        if n == 1:
            rx.start()

    fake = FakeTime(hook=start_first)
    sink = make_sink(rx, protocol, timeout=0.5, batch_size=128, sleep=fake.sleep, clock=fake.clock)
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
                     retry=RetryPolicy(attempts=3, first_delay=1.0))
    try:
        col = convert([SMALL_NESTED, FAILED], sink)
    finally:
        sink.close()
    kept = kept_spans(col)
    batches = sum(-(-(1 + len(f.summary.wedged) + len(col.scopes[p])) // 512) for p, f in col.finished.items())
    assert (sink.spans_exported, sink.spans_failed) == (0, kept)
    assert sink.spans_exported + sink.spans_failed == kept
    assert fake.sleeps == [1.0, 2.0] * batches and sink.export_requests == 3 * batches
    assert (sink.runs_exported, sink.runs_failed) == (0, 3) and sink.internal_errors == 0


def test_retries_stop_at_max_elapsed(rx: OtlpReceiver) -> None:
    rx.refuse_next(1000)
    fake = FakeTime()
    sink = make_sink(rx, "grpc", timeout=0.5, sleep=fake.sleep, clock=fake.clock,
                     retry=RetryPolicy(attempts=10, first_delay=1.0, max_delay=4.0, max_elapsed=6.5))
    try:
        convert([FLOW], sink)
    finally:
        sink.close()
    assert fake.sleeps == [1.0, 2.0]  # a third retry would start at 1 + 2 + 4 = 7 s > 6.5 s
    assert (sink.spans_failed, sink.spans_exported) == (6, 0)


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


def test_close_gives_up_promptly_and_counts_pending_as_failed() -> None:
    rx = OtlpReceiver().start()
    rx.stop()
    sink = make_sink(rx, "grpc", timeout=0.5, flush_timeout=0.2, retry=RetryPolicy(first_delay=60.0))
    col = convert([FAILED], sink, flush=False)
    sink.close()  # the worker sleeps on the stop event: close wakes it; nothing waits 60 s
    assert (sink.spans_exported, sink.spans_failed) == (0, kept_spans(col))
    assert sink.pending_spans == 0


class Exploding(SpanExporter):
    def __init__(self) -> None:
        self.calls = 0

    def export(self, spans: Sequence[ReadableSpan]) -> SpanExportResult:
        self.calls += 1
        raise RuntimeError("boom")

    def shutdown(self) -> None:
        pass


def test_a_raising_exporter_is_counted_never_raised() -> None:
    boom = Exploding()
    fake = FakeTime()
    sink = OtlpSink(None, "grpc", exporter_factory=lambda: boom, sleep=fake.sleep, clock=fake.clock,
                    retry=RetryPolicy(attempts=2))
    col = convert([FAILED], sink)
    sink.close()
    assert boom.calls == 4 and sink.spans_failed == kept_spans(col) and sink.internal_errors == 0


def test_receive_survives_garbage_and_unknown_runs() -> None:
    sink = OtlpSink(None, "grpc", exporter_factory=Exploding)
    try:
        sink.receive(object())  # type: ignore[arg-type]
        assert sink.internal_errors == 0  # unknown event types are ignored
        src = Source("never/started.jsonl")
        broken = Scope("x", None, 1, 3, 4, 0, (None, None, None))  # type: ignore[arg-type]
        sink.receive(RunProgress(src, (), (broken,), ()))
        assert sink.internal_errors == 1  # a malformed scope: logged and counted, not raised
    finally:
        sink.close()


# -- encoding, endpoints, environment ---------------------------------------------------------------------


def sample_batches() -> Iterator[EncodedBatch]:
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
        yield EncodedBatch(enc, ids.trace_id, spans)


def test_wire_encoder_equals_the_sdk_encoder_on_samples() -> None:
    n = 0
    for batch in sample_batches():
        ours = ExportTraceServiceRequest.FromString(batch.payload)
        assert ours == encode_spans(list(batch))
        n += len(batch)
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
    batch = EncodedBatch(WireEncoder(Resource({"k": "v"}), InstrumentationScope("ringtrace")), ids.trace_id, spans)
    assert ExportTraceServiceRequest.FromString(batch.payload) == encode_spans(list(batch))


@pytest.mark.parametrize("protocol", PROTOCOLS)
def test_stock_sdk_exporter_receives_the_same_spans(rx: OtlpReceiver, protocol: Protocol) -> None:
    """The EncodedBatch is a Sequence[ReadableSpan]: a stock exporter sends it via the SDK encoder."""

    def received(factory: Callable[[], SpanExporter] | None) -> list[tuple[Any, ...]]:
        rx.clear()
        sink = OtlpSink(rx.endpoint(protocol), protocol, exporter_factory=factory)
        try:
            convert([FAILED, SMALL_NESTED], sink)
        finally:
            sink.close()
        return sorted((s.trace_id, s.span_id, s.parent_id, s.name, s.start, s.end, json.dumps(s.attrs, sort_keys=True),
                       s.status_code, s.status_message, tuple(e.name for e in s.events)) for s in rx.spans())

    stock: Callable[[], SpanExporter] = ((lambda: StockGrpc(endpoint=rx.grpc_endpoint)) if protocol == "grpc"
                                         else (lambda: StockHttp(endpoint=http_traces_url(rx.http_endpoint))))
    fast = received(None)
    assert len(fast) > 600 and received(stock) == fast


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


@pytest.mark.parametrize("protocol", PROTOCOLS)
def test_standard_otel_environment_is_honoured(rx: OtlpReceiver, protocol: Protocol,
                                               monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_ENDPOINT", rx.endpoint(protocol))
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_HEADERS", "x-ringtrace-test=yes,authorization=Bearer%20t0ken")
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_COMPRESSION", "gzip")
    monkeypatch.setenv("OTEL_RESOURCE_ATTRIBUTES", "deployment.environment=ci,team=rings")
    sink = OtlpSink(None, protocol)  # no endpoint given: the exporter reads OTEL_EXPORTER_OTLP_ENDPOINT
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
    if protocol == "grpc":  # gRPC's per-message compression is not visible to a servicer: ask the exporter
        assert sink.exporter._compression == grpc.Compression.Gzip  # type: ignore[attr-defined]
    res = rx.spans()[0].resource
    assert (res["deployment.environment"], res["team"], res["service.name"]) == ("ci", "rings", "ringtrace")


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
