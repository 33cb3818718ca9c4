"""Wedged scopes' span events say what ``summary`` says, for any thresholds: the exporter reads the
run's ``wedge_causes`` (diagnosed once, with the configured ``--near``/``--wedge`` and the host log)
instead of diagnosing again with the defaults."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from ringtrace.model.records import HostLog
from ringtrace.reading.oneshot import read_files
from ringtrace.sinks import FanOut
from ringtrace.sinks.otlp import OtlpSink
from ringtrace.stages.diagnose import Thresholds, wedge_causes
from tests._support.otlp_receiver import OtlpReceiver
from tests._support.samples import FLOW
from tests._support.sinks import Collect

# (near, wedge) pairs; the last ones move which resource or code the wedge is blamed on
THRESHOLDS = [(0.8, 0.5), (0.5, 0.9), (0.95, 0.2), (0.3, 0.3)]


@pytest.fixture
def rx() -> Iterator[OtlpReceiver]:
    with OtlpReceiver() as receiver:
        yield receiver


@pytest.mark.parametrize(("near", "wedge"), THRESHOLDS)
def test_wedged_span_events_agree_with_the_summary(rx: OtlpReceiver, near: float, wedge: float) -> None:
    th = Thresholds(near=near, wedge=wedge)
    col = Collect()
    sink = OtlpSink(rx.endpoint("grpc"), "grpc")
    try:
        assert not read_files([FLOW], FanOut([col, sink]), th)
        assert sink.drain(60)
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
