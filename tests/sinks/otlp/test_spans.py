"""Spans from runs (:mod:`ringtrace.sinks.otlp._spans`), checked at a real receiver fed by the real reader.

What is proven: one trace per run with the reader's nesting as parent/child, names, attributes and
times; ERROR on wedged scopes, whose span events say what ``summary`` says for any thresholds (the
exporter reads the run's ``wedge_causes``, diagnosed once with the configured ``--near``/``--wedge``
and the host log, instead of diagnosing again with the defaults); deterministic ids; a child of an
unpaired parent hung off the root; and the direct wire encoder (:class:`WireEncoder`) equal to the
SDK's encoder on the samples and on any values.
"""

from __future__ import annotations

import socket
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from opentelemetry.exporter.otlp.proto.common.trace_encoder import encode_spans
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.util.instrumentation import InstrumentationScope

from ringtrace.config import Thresholds
from ringtrace.gather.oneshot import read_files
from ringtrace.model.records import RESOURCES, HostLog, Scope, Usage
from ringtrace.sinks import FanOut
from ringtrace.sinks.otlp import OtlpSink, Protocol
from ringtrace.sinks.otlp._select import METRICS
from ringtrace.sinks.otlp._spans import RunIds, SpanData, SpanEvent, WireEncoder
from ringtrace.stages.diagnose import wedge_causes
from tests._support.otlp import (
    PROTOCOLS,
    by_trace,
    convert,
    encoded,
    generated_tree,
    kept_spans,
    make_sink,
    root_of,
    sample_batches,
)
from tests._support.otlp_receiver import OtlpReceiver, ReceivedSpan
from tests._support.samples import FAILED, FLOW, SAMPLES
from tests._support.scope_stats import encode_lines, meta, rec
from tests._support.sinks import Collect

# -- spans from real and generated runs ----------------------------------------------------------------


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


# -- wedged scopes' events say what the summary says, for any thresholds -------------------------------


# (near, wedge) pairs; the last ones move which resource or code the wedge is blamed on
THRESHOLDS = [(0.8, 0.5), (0.5, 0.9), (0.95, 0.2), (0.3, 0.3)]


@pytest.mark.parametrize(("near", "wedge"), THRESHOLDS)
def test_wedged_span_events_agree_with_the_summary(rx: OtlpReceiver, near: float, wedge: float) -> None:
    th = Thresholds(near=near, wedge=wedge)
    col = Collect()
    sink = OtlpSink(rx.endpoint("grpc"), "grpc")
    try:
        assert not read_files([FLOW], FanOut([col, sink]), th)
    finally:
        sink.close()
    fin = col.finished[str(FLOW)]
    assert len(fin.wedge_causes) == len(fin.summary.wedged) == 5
    finding = next(f for f in fin.findings if f.rule == "wedged")
    inner = fin.wedge_causes[-1]
    assert inner.code == finding.code  # the summary's own words
    if finding.resource is not None:  # (where nothing was full enough the summary names none; the span the fullest)
        assert inner.resource == finding.resource
    events = {sp.attrs["ringtrace.line"]: sp.events[0] for sp in rx.spans()
              if sp.attrs.get("ringtrace.wedged") and "ringtrace.line" in sp.attrs}
    for w, cause in zip(fin.summary.wedged, fin.wedge_causes, strict=True):
        ev = events[w.line]
        assert ev.attrs["ringtrace.resource"] == (cause.resource or "unknown")
        assert ev.attrs.get("ringtrace.orch_error_code") == cause.code
        assert ev.attrs["ringtrace.fill_ratio"] == pytest.approx(cause.fill)


def test_the_thresholds_change_the_causes() -> None:
    """The property above can fail: with other thresholds the causes differ from the defaults'."""
    col = Collect()
    assert not read_files([FLOW], FanOut([col]), Thresholds())
    s, findings = col.finished[str(FLOW)].summary, col.finished[str(FLOW)].findings
    default = wedge_causes(s, findings, Thresholds())
    assert any(wedge_causes(s, findings, Thresholds(near=n, wedge=w)) != default for n, w in THRESHOLDS[1:])


def test_a_host_log_code_reaches_the_innermost_span_event(rx: OtlpReceiver) -> None:
    from ringtrace.stages.diagnose import diagnose

    col = Collect()
    assert not read_files([FLOW], FanOut([col]), Thresholds())
    fin = col.finished[str(FLOW)]
    log = HostLog("/x/host.log", orch_error_code=3, error_name="FLOW_CONTROL_DEADLOCK")
    findings = diagnose(fin.summary, Thresholds(), (), log)
    causes = wedge_causes(fin.summary, findings, Thresholds())
    assert causes[-1].code == 3 and causes[-1].confirmed is True


# -- the wire encoder against the SDK's ----------------------------------------------------------------


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
