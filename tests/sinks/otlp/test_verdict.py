"""A run's root span carries its one verdict (``RunFinished.verdict``): status ERROR exactly when the verdict
fails the run (severity ``error``), with the verdict's text as the status message, and the
``ringtrace.verdict.*`` attributes; for every sample, every real run in ``tests/fixtures/realruns`` and a real
file cut short, sent over both protocols to a real OTLP receiver on 127.0.0.1."""

from __future__ import annotations

import pytest

from ringtrace.model.records import SinkEvent
from ringtrace.sinks import FanOut
from ringtrace.sinks.otlp import Protocol
from tests._support.events import finished
from tests._support.otlp import PROTOCOLS, by_trace, make_sink, root_of
from tests._support.otlp_receiver import OtlpReceiver
from tests._support.samples import PAGED
from tests._support.verdicts import VERDICT_PATHS, SpanVerdict, cut_copy, otlp_verdict, verdict_events


@pytest.fixture(scope="module")
def events(tmp_path_factory: pytest.TempPathFactory) -> list[SinkEvent]:
    cut = cut_copy(PAGED, tmp_path_factory.mktemp("cut"), keep=900)
    return verdict_events([*VERDICT_PATHS, cut])


@pytest.mark.parametrize("protocol", PROTOCOLS)
def test_the_root_span_shows_each_runs_verdict(rx: OtlpReceiver, events: list[SinkEvent], protocol: Protocol) -> None:
    sink = make_sink(rx, protocol)
    fan = FanOut([sink])
    try:
        fan.receive_all(events)
    finally:
        sink.close()
    assert fan.errors == {"otlp": 0} and sink.spans_failed == 0
    roots = [root_of(spans) for spans in by_trace(rx.spans()).values()]
    fins = finished(events)
    assert len(roots) == len(fins)  # one trace per run, runs known from a log alone too
    by_run = {(r.attrs["ringtrace.path"], r.name): otlp_verdict(r) for r in roots}
    for fin in fins:
        v = fin.verdict
        want = SpanVerdict(v.kind, v.severity, v.text, v.severity == "error", v.text if v.fails_check else "")
        assert by_run[fin.source.display_path, fin.source.name] == want, fin.source.name
    root = next(r for r in roots if r.attrs["ringtrace.verdict.kind"] == "wedged" and "window4" in r.name)
    assert (root.attrs["ringtrace.verdict.ring"], root.attrs["ringtrace.verdict.code"],
            root.attrs["ringtrace.verdict.code_name"]) == (3, 3, "FLOW_CONTROL_DEADLOCK")
    kinds = {f.verdict.kind for f in fins}
    assert {"wedged", "failed", "cut_short", "test_failed", "near_capacity", "healthy"} <= kinds
    assert sum(r.status_code == 2 for r in roots) == sum(f.verdict.fails_check for f in fins) > 0


def test_a_run_that_did_not_fail_has_an_unset_status(rx: OtlpReceiver, events: list[SinkEvent]) -> None:
    """A near-capacity run (warning) is not an error: the status stays unset, the attributes say why."""
    near = [e for e in events if "LongDummyChain" in e.source.name]
    sink = make_sink(rx, "grpc")
    try:
        FanOut([sink]).receive_all(near)
    finally:
        sink.close()
    [root] = [root_of(s) for s in by_trace(rx.spans()).values()]
    got = otlp_verdict(root)
    assert (got.kind, got.severity, got.error, got.message) == ("near_capacity", "warning", False, "")
    assert root.attrs["ringtrace.verdict.resource"] == "task_window" and "proven need of 7 of 8" in got.text
