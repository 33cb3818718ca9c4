"""``ringtrace_run_verdict``: one series per finished run, its labels the run's one verdict
(``RunFinished.verdict``: kind, severity, text), for every sample, every real run in
``tests/fixtures/realruns`` and a real file cut short; none while a run is open; gone with the run's
other series after the TTL; the exposition the server renders says the same."""

from __future__ import annotations

import pytest
from prometheus_client.parser import text_string_to_metric_families

from ringtrace.model.records import RunFinished, SinkEvent, Source
from ringtrace.sinks import FanOut
from ringtrace.sinks.prometheus import PrometheusSink
from ringtrace.sources.paths import source_labels
from ringtrace.stages.run import Run
from tests._support.events import finished
from tests._support.prometheus import Clock, Series, one, pick, series
from tests._support.samples import FLOW, PAGED
from tests._support.verdicts import VERDICT_PATHS, Shown, cut_copy, prometheus_verdicts, verdict_events


@pytest.fixture(scope="module")
def events(tmp_path_factory: pytest.TempPathFactory) -> list[SinkEvent]:
    cut = cut_copy(PAGED, tmp_path_factory.mktemp("cut"), keep=900)
    return verdict_events([*VERDICT_PATHS, cut])


def _labels(fin: RunFinished) -> tuple[str, str, str]:
    lab = fin.source.labels
    return lab.run, lab.rank, lab.dispatch


def test_each_finished_run_exposes_its_verdict(events: list[SinkEvent]) -> None:
    sink = PrometheusSink(clock=Clock())
    FanOut([sink]).receive_all(events)
    shown = prometheus_verdicts(series(sink))
    fins = finished(events)
    assert len({_labels(f) for f in fins}) == len(fins)  # one label set per run: each run's verdict is exposed
    assert shown == {_labels(f): [Shown(f.verdict.kind, f.verdict.severity, f.verdict.text)] for f in fins}
    assert {"wedged", "failed", "cut_short", "test_failed", "near_capacity", "healthy"} <= {
        f.verdict.kind for f in fins}
    # what the server renders (its own encoder, finished runs' lines cached) says the same, in both formats
    for accept in ("", "application/openmetrics-text;version=1.0.0"):
        body, _ = sink.render(accept)
        text = body.decode().replace("# EOF\n", "")
        rendered: Series = {(s.name, frozenset(s.labels.items())): s.value
                            for fam in text_string_to_metric_families(text) for s in fam.samples}
        assert prometheus_verdicts(rendered) == shown


def test_no_verdict_while_open_and_none_after_the_ttl() -> None:
    clock = Clock(0.0)
    sink = PrometheusSink(clock=clock, series_ttl=60.0)
    src = Source(str(FLOW), source_labels(FLOW))
    run = Run(src)
    for ev in run.feed(FLOW.read_bytes()):
        sink.receive(ev)
    lab = {"run": src.labels.run}
    assert not pick(series(sink), "ringtrace_run_verdict")
    assert one(series(sink), "ringtrace_run_open_scopes", **lab) == 5
    clock.now = 30.0
    [fin] = finished(run.finish("idle"))
    sink.receive(fin)
    assert prometheus_verdicts(series(sink)) == {(src.labels.run, "", ""): [
        Shown("wedged", "error", fin.verdict.text)]}
    clock.now = 89.0
    assert pick(series(sink), "ringtrace_run_verdict", kind="wedged", **lab)
    clock.now = 90.0
    assert not pick(series(sink), "ringtrace_run_verdict")
