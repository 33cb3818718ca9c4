"""The series budget (``--series-budget``): the finished runs' series one agent exposes stay under it, the
oldest finished runs' go first, the agent counts what it dropped and says so in its log once."""

from __future__ import annotations

import logging

import msgspec
import pytest

from ringtrace.config import Config
from ringtrace.model.records import Labels, SinkEvent, Source
from ringtrace.reading.registry import Context, build_sinks
from ringtrace.sinks.prometheus import PrometheusSink
from tests._support.prometheus import Clock, events_of, one, pick, same_as_fresh, series
from tests._support.samples import PAGED


def test_the_oldest_finished_runs_series_go_first(caplog: pytest.LogCaptureFixture) -> None:
    clock = Clock(0.0)
    evs = events_of(PAGED.read_bytes(), Source("/t/r/scope_stats/scope_stats.jsonl"), 1 << 20)
    per_run = len([n for n, lab in series(_fed(PrometheusSink(clock=clock), evs, 1)) if ("run", "r0") in lab])
    sink = PrometheusSink(clock=clock, series_budget=3 * per_run + per_run // 2)  # room for 3.5 runs
    with caplog.at_level(logging.WARNING, logger="ringtrace.sinks.prometheus"):
        _fed(sink, evs, 6, clock)
    s = series(sink)
    assert {dict(k)["run"] for k in pick(s, "ringtrace_run_verdict")} == {"r3", "r4", "r5"}
    assert one(s, "ringtrace_series_dropped_total") == 3 * per_run
    assert one(s, "ringtrace_finished_run_series") == 3 * per_run <= sink.series_budget
    assert one(s, "ringtrace_runs_expired_total") == 0  # not the TTL
    said = [r.message for r in caplog.records if "series budget" in r.message]
    assert len(said) == 1 and "ringtrace_series_dropped_total" in said[0]
    same_as_fresh(sink)


def test_no_cap_keeps_every_finished_run() -> None:
    clock = Clock(0.0)
    evs = events_of(PAGED.read_bytes(), Source("/t/r/scope_stats/scope_stats.jsonl"), 1 << 20)
    s = series(_fed(PrometheusSink(clock=clock, series_budget=0), evs, 30, clock))
    assert len(pick(s, "ringtrace_run_verdict")) == 30 and one(s, "ringtrace_series_dropped_total") == 0


def test_the_flag_and_the_config_key_reach_the_sink() -> None:
    [(_, sink)] = build_sinks(Config(metrics_addr="127.0.0.1:0", series_budget=1234, metrics_advice=True,
                                     quiet=True), Context("watch"))
    assert isinstance(sink, PrometheusSink) and (sink.series_budget, sink.advice) == (1234, True)
    assert Config().series_budget == 300_000  # 10,000 runs of 30 series


def _fed(sink: PrometheusSink, evs: list[SinkEvent], runs: int, clock: Clock | None = None) -> PrometheusSink:
    for i in range(runs):
        if clock is not None:
            clock.now = float(i)
        src = Source(f"/t/r{i}/scope_stats/scope_stats.jsonl", Labels(run=f"r{i}"))
        for ev in evs:
            sink.receive(msgspec.structs.replace(ev, source=src))
    return sink
