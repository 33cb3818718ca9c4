"""Advice and host-log facts of a finished run on /metrics: recommended and measure-next capacities (with
``--metrics-advice`` only), ``ringtrace_run_failed{code,error}``; absent while the run is open or where nothing
is known."""

from __future__ import annotations

from ringtrace.model.records import Advice, HostLog, RunAdvice
from ringtrace.sinks.prometheus import PrometheusSink
from tests._support.prometheus import Clock, feed, one, pick, same_as_fresh, series
from tests._support.samples import FLOW, PAGED

ADVICE = RunAdvice(advice=(
    Advice(1, "heap", 1 << 20, None, 1 << 20, 700_000, 788_480, "tight", "tight run"),
    Advice(3, "task_window", 16384, None, 16384, None, None, "oversized", "tail never moved", measure_next=64)))


def test_recommended_and_measure_next_capacities_and_a_failed_run() -> None:
    sink = PrometheusSink(clock=Clock(), advice=True)
    advice = ADVICE
    feed(sink, "/a/scope_stats/scope_stats.jsonl", PAGED.read_bytes(), "a", advice=advice)
    log = HostLog("/b/host.log", orch_error_code=2, error_name="HEAP_RING_DEADLOCK")
    feed(sink, "/b/scope_stats/scope_stats.jsonl", FLOW.read_bytes(), "b", host_log=log)
    s = series(sink)
    assert one(s, "ringtrace_ring_recommended_capacity", run="a", ring="1", resource="heap") == 788_480
    assert not pick(s, "ringtrace_ring_recommended_capacity", ring="3")
    assert one(s, "ringtrace_ring_measure_next_capacity", run="a", ring="3", resource="task_window") == 64
    assert one(s, "ringtrace_run_failed", run="b", code="2", error="HEAP_RING_DEADLOCK") == 1
    assert not pick(s, "ringtrace_run_failed", run="a")
    same_as_fresh(sink)  # the cached lines carry them too, in both formats


def test_a_scheduler_failure_and_a_passing_log_on_metrics() -> None:
    sink = PrometheusSink(clock=Clock())
    sched = HostLog("/c/host.log", orch_error_code=0, sched_error_code=100, error_name="NONE",
                    sched_error_name="SCHEDULER_TIMEOUT")
    feed(sink, "/c/scope_stats/scope_stats.jsonl", PAGED.read_bytes(), "c", host_log=sched)
    passing = HostLog("/d/host.log", orch_error_code=0, sched_error_code=0, error_name="NONE")
    feed(sink, "/d/scope_stats/scope_stats.jsonl", PAGED.read_bytes(), "d", host_log=passing)
    s = series(sink)
    assert one(s, "ringtrace_run_failed", run="c", code="100", error="SCHEDULER_TIMEOUT") == 1
    assert not pick(s, "ringtrace_run_failed", run="d")  # a log that reports no failure is no failed run


def test_advice_stays_off_metrics_unless_asked_for() -> None:
    sink = PrometheusSink(clock=Clock())
    feed(sink, "/a/scope_stats/scope_stats.jsonl", PAGED.read_bytes(), "a", advice=ADVICE)
    s = series(sink)
    assert pick(s, "ringtrace_run_verdict", run="a")
    assert not [n for n, _ in s if n in ("ringtrace_ring_recommended_capacity", "ringtrace_ring_measure_next_capacity")]
