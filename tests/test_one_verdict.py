"""One truth per run: every surface renders the run's one verdict (``RunFinished.verdict``) and decides none.

For every fixture run (the runtime's samples, the real runs in ``tests/fixtures/realruns``, the tuning loops' runs
in ``tests/fixtures/realsim``, the sizing runs, and a real file cut short): ``summary --format json``'s
``verdict``, the events file's line, ``watch``'s log line, the overview's cell, ``check``'s PASS/FAIL and reason,
the report's page data, ``/metrics``' ``ringtrace_run_verdict`` and the Perfetto trace's verdict track say the same
kind, severity and text. (OTLP's root span is checked against a real receiver in ``tests/sinks/otlp``.)
"""

from __future__ import annotations

import io
import json
import logging
import re
from pathlib import Path
from typing import Any

import pytest
from rich.console import Console

from ringtrace.cli.check import check_failures
from ringtrace.cli.overview import render_overview
from ringtrace.config import Config
from ringtrace.model.records import RunFinished, SinkEvent
from ringtrace.report import ReportCollector, render
from ringtrace.sinks import FanOut
from ringtrace.sinks.console import WatchLogSink
from ringtrace.sinks.events import EventsSink
from ringtrace.sinks.perfetto import PerfettoSink
from ringtrace.sinks.perfetto._layout import process_name
from ringtrace.sinks.prometheus import PrometheusSink
from ringtrace.sinks.summary import file_object
from tests._support.events import finished
from tests._support.prometheus import Clock, series
from tests._support.samples import PAGED
from tests._support.verdicts import VERDICT_PATHS, cut_copy, json_verdicts, prometheus_verdicts, verdict_events

REALSIM = Path(__file__).parent / "fixtures" / "realsim" / "loops"
SIZING = Path(__file__).parent / "fixtures" / "sizing"  # runs at exactly their need: no headroom


@pytest.fixture(scope="module")
def events(tmp_path_factory: pytest.TempPathFactory) -> list[SinkEvent]:
    cut = cut_copy(PAGED, tmp_path_factory.mktemp("cut"), keep=900)
    return verdict_events([*VERDICT_PATHS, *sorted(REALSIM.iterdir()), SIZING, cut])


@pytest.fixture(scope="module")
def fins(events: list[SinkEvent]) -> list[RunFinished]:
    out = finished(events)
    kinds = {f.verdict.kind for f in out}
    assert {"wedged", "failed", "cut_short", "test_failed", "no_headroom", "near_capacity", "healthy"} <= kinds
    return out


def _triple(v: Any) -> tuple[str, str, str]:
    return (v["kind"], v["severity"], v["text"]) if isinstance(v, dict) else (v.kind, v.severity, v.text)


def test_summary_json_and_the_events_file_carry_the_verdict(events: list[SinkEvent], fins: list[RunFinished],
                                                           tmp_path: Path) -> None:
    for fin in fins:
        obj = file_object(fin)["verdict"]
        v = fin.verdict
        assert obj == {"kind": v.kind, "severity": v.severity, "text": v.text, "ring": v.ring,
                       "resource": v.resource, "site": v.site, "code": v.code, "code_name": v.code_name,
                       "line": v.line or None}
    path = tmp_path / "events.jsonl"
    sink = EventsSink.open(str(path))
    FanOut([sink]).receive_all(events)
    sink.close()
    lines = [json.loads(line) for line in path.read_text().splitlines()]
    assert [_triple(x["verdict"]) for x in lines] == [_triple(f.verdict) for f in fins]


def test_watchs_line_check_and_the_overview_say_it(fins: list[RunFinished]) -> None:
    records: list[logging.LogRecord] = []

    class Keep(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            records.append(record)

    logger = logging.getLogger("ringtrace.test.one_verdict")
    logger.addHandler(Keep())
    logger.setLevel(logging.INFO)
    FanOut([WatchLogSink(logger)]).receive_all(fins)
    assert len(records) == len(fins)
    for rec, fin in zip(records, fins, strict=True):
        assert f": {fin.verdict.severity}: {fin.verdict.text} (" in rec.getMessage()
        reasons = check_failures(fin, Config())
        assert bool(reasons) == fin.verdict.fails_check and (not reasons or reasons[0] == fin.verdict.text)
    out = io.StringIO()
    render_overview(Console(file=out, width=400), fins, [f.advice for f in fins])
    text = out.getvalue()
    for fin in fins:
        if fin.verdict.kind != "healthy":
            assert fin.verdict.short in text, fin.verdict.short


def test_the_report_renders_each_verdict(events: list[SinkEvent], fins: list[RunFinished]) -> None:
    collector = ReportCollector()
    FanOut([collector]).receive_all(events)
    page = render(collector, 0.1)
    data = json.loads(re.search(r'<script type="application/json" id="data">(.*?)</script>', page, re.S)
                      .group(1))  # type: ignore[union-attr]
    shown = sorted(_triple(s["file"]["verdict"]) for s in data["sources"])
    assert shown == sorted(_triple(f.verdict) for f in fins)


def test_metrics_and_the_trace_say_it(events: list[SinkEvent], fins: list[RunFinished], tmp_path: Path) -> None:
    prom = PrometheusSink(clock=Clock())
    trace = tmp_path / "t.json"
    perfetto = PerfettoSink(trace, "chrome-json")
    FanOut([prom, perfetto]).receive_all(events)
    perfetto.close()
    metrics = prometheus_verdicts(series(prom))
    tracks = json_verdicts(trace)
    for fin in fins:
        lab = fin.source.labels
        assert [tuple(s) for s in metrics[lab.run, lab.rank, lab.dispatch]] == [_triple(fin.verdict)]
        t = tracks[process_name(fin.source)]
        assert (t.kind, t.severity, t.text) == _triple(fin.verdict)
