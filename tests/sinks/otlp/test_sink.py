"""The OTLP sink (:class:`ringtrace.sinks.otlp.OtlpSink`): an exporter behind its outlet (the fan-out's
queue and worker), and its shutdown, against a real receiver fed by the real reader.

What is proven: 100,000 spans with zero loss; a stuck sink (a receiver that does not answer) shed by its
outlet without blocking the reader, its runs that lost events counted as dropped whole, never sent half;
one-shot outlets that wait and deliver everything; shutdown (the fan-out's, and SIGTERM to a ``watch``
process) within its budget with the endpoint blackholed, hanging or down; a raising transport and garbage input counted,
never raised; no silent loss under any faults (every kept span exported, failed or dropped, exactly
once); the standard ``OTEL_*`` environment honoured (headers, compression, resource, service name).
"""

from __future__ import annotations

import contextlib
import logging
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import grpc
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from ringtrace.config import Thresholds
from ringtrace.gather.oneshot import read_files
from ringtrace.model.records import RunProgress, Scope, SinkEvent, Source
from ringtrace.sinks import FanOut
from ringtrace.sinks.otlp import OtlpSink, Protocol, RetryPolicy
from ringtrace.sources.paths import find_sources
from tests._support.otlp import PROTOCOLS, SMALL_NESTED, Boom, FakeTime, convert, deliver, kept_spans, make_sink
from tests._support.otlp_receiver import OK, Blackhole, Fault, OtlpReceiver
from tests._support.samples import FAILED, FLOW, SAMPLES
from tests._support.sinks import Collect
from tests._support.writer import wait_for

# -- volume --------------------------------------------------------------------------------------------


@pytest.mark.slow
@pytest.mark.parametrize("protocol", PROTOCOLS)
def test_100k_spans_arrive_with_zero_loss(big_run: Path, protocol: Protocol) -> None:
    with OtlpReceiver(keep=True) as rx:
        sink = make_sink(rx, protocol, max_spans=200_000)
        try:
            col, fan = deliver([big_run], sink)
            fan.flush(time.monotonic() + 600)
            fan.close()
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


# -- the outlet is the queue ----------------------------------------------------------------------------


def test_a_stuck_sink_is_shed_and_its_runs_are_dropped_whole_never_sent_half(rx: OtlpReceiver) -> None:
    """``watch``'s outlets: the sink waits in a retry (its receiver refused), the reader never waits (submit
    returns), the outlet finds it stuck and sheds; every run that lost events is counted dropped whole."""
    gate = threading.Event()
    sink = make_sink(rx, "grpc", timeout=0.5, sleep=lambda s: gate.wait(30))
    rx.refuse_next(1)  # the first request fails, and the outlet's worker waits in its retry sleep
    col = Collect()
    files, _ = find_sources([str(SAMPLES)])
    read_files(files, FanOut([col]), Thresholds())
    runs: dict[str, list[SinkEvent]] = {}
    for ev in col.events:
        runs.setdefault(ev.source.path, []).append(ev)
    batches = list(runs.values())
    now = [0.0]
    fan = FanOut([sink])
    fan.start(clock=lambda: now[0], stuck_after=5.0)
    try:
        fan.submit(batches[0])
        wait_for(lambda: sink.export_requests >= 1, what="the first request")
        for batch in batches[1:]:
            fan.submit(batch)  # returns at once: the reader never waits for the sink
        now[0] = 10.0
        fan.check()  # stuck: what it holds is shed (its RunFinished kept)
        assert fan.dropped["otlp"] > 0
        gate.set()
        fan.shutdown(now[0] + 30)
    finally:
        gate.set()
        sink.close()
    kept = kept_spans(col)
    assert sink.spans_dropped_queue_full > 0 and sink.spans_failed == 0
    assert sink.spans_exported + sink.spans_dropped_queue_full == kept
    assert rx.span_count == sink.spans_exported and sink.runs_exported >= 1


def test_one_shot_outlets_wait_and_deliver_everything(rx: OtlpReceiver) -> None:
    sink = make_sink(rx, "http/protobuf", batch_size=10)
    try:
        col = convert([SAMPLES], sink)
    finally:
        sink.close()
    assert (sink.spans_exported, sink.dropped_spans, sink.spans_failed) == (kept_spans(col), 0, 0)
    assert rx.span_count == kept_spans(col)


# -- shutdown within the budget ------------------------------------------------------------------------


def shut_down(fan: FanOut, budget: float) -> None:
    """The fan-out's shutdown (the sink told the deadline at once, then flush and close behind its events),
    as the app does, in a thread joined with a deadline against hanging (what the sink does at its deadline
    is what the tests check; how long it takes is not measured)."""
    deadline = time.monotonic() + budget

    def shut() -> None:
        fan.shutdown(deadline)

    closer = threading.Thread(target=shut)
    closer.start()
    closer.join(60)
    assert not closer.is_alive()


@pytest.mark.slow  # waits out real deadlines against real sockets
@pytest.mark.parametrize("protocol", PROTOCOLS)
def test_blackholed_endpoint_close_gives_up_within_the_budget(protocol: Protocol,
                                                              caplog: pytest.LogCaptureFixture) -> None:
    """A receiver that accepts TCP and never answers: requests (10 s timeout each) are cut at the flush
    deadline, close adds no second wait, and every kept span is counted as failed, with one log line."""
    with Blackhole() as hole:
        sink = OtlpSink(hole.endpoint, protocol, batch_size=100)
        col, fan = deliver([SMALL_NESTED, FAILED], sink)
        assert hole.wait_for_bytes(1)
        with caplog.at_level(logging.WARNING, "ringtrace.sinks.otlp"):
            shut_down(fan, 1.0)
    kept = kept_spans(col)
    assert (sink.spans_failed, sink.spans_exported, sink.pending_spans) == (kept, 0, 0)
    assert sink.spans_failed_at_shutdown == kept and sink.export_retries == 0
    lost = [r.getMessage() for r in caplog.records if "spans lost" in r.getMessage()]
    assert len(lost) == 1 and lost[0].startswith(f"otlp: {kept} spans lost")


@pytest.mark.slow  # waits out real deadlines against real sockets
@pytest.mark.parametrize("protocol", PROTOCOLS)
def test_connect_that_hangs_does_not_hold_up_close(protocol: Protocol) -> None:
    """SYNs dropped (a full backlog): connecting hangs; flush + close still end at the deadline."""
    with Blackhole(accept=False) as hole:
        sink = OtlpSink(hole.endpoint, protocol)
        col, fan = deliver([FLOW], sink)
        shut_down(fan, 1.0)
    assert (sink.spans_failed, sink.spans_exported, sink.pending_spans) == (kept_spans(col), 0, 0)
    assert hole.connections == 0


@pytest.mark.slow  # waits out real deadlines against real sockets
@pytest.mark.parametrize("protocol", PROTOCOLS)
def test_close_during_a_retry_wait_counts_pending_as_failed(protocol: Protocol) -> None:
    rx = OtlpReceiver().start()
    rx.stop()
    sink = make_sink(rx, protocol, timeout=0.5,
                     retry=RetryPolicy(first_delay=8.0, max_delay=8.0, max_elapsed=60.0, jitter=0.0))
    col, fan = deliver([SMALL_NESTED, FAILED], sink)
    wait_for(lambda: sink.export_retries >= 1, what="the first try failed, the retry wait began")
    shut_down(fan, 0.5)  # the worker waits 8 s between tries: the deadline wakes it
    assert (sink.spans_exported, sink.spans_failed, sink.pending_spans) == (0, kept_spans(col), 0)
    assert sink.export_requests >= 1


def test_close_without_flush_sends_everything_once(rx: OtlpReceiver) -> None:
    sink = make_sink(rx, "grpc")
    col, fan = deliver([FAILED], sink)
    fan.close()  # queued behind the events: every run was sent first
    sink.close()  # idempotent
    assert sink.spans_exported == kept_spans(col) == rx.span_count


# -- bugs and garbage are counted, nothing is lost silently --------------------------------------------


def test_a_raising_transport_is_counted_never_raised() -> None:
    boom = Boom()
    fake = FakeTime()
    sink = OtlpSink(None, "grpc", transport=boom, sleep=fake.sleep, clock=fake.clock,
                    retry=RetryPolicy(attempts=2, jitter=0.0))
    col = convert([FAILED], sink)
    sink.close()
    assert boom.calls == 4 and sink.spans_failed == kept_spans(col) and sink.internal_errors == 0


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
@given(st.lists(faults, max_size=12), st.sampled_from(PROTOCOLS), st.integers(20, 400), st.integers(1, 3))
@pytest.mark.slow  # waits out real deadlines against real sockets
def test_no_silent_loss_under_any_faults(rx: OtlpReceiver, script: list[Fault], protocol: Protocol,
                                         batch_size: int, attempts: int) -> None:
    """Whatever the receiver answers: every kept span is exported, failed or dropped, exactly once;
    what the receiver stored minus what it rejected is what was counted as exported."""
    rx.clear()
    rx.script(script)
    fake = FakeTime()
    sink = make_sink(rx, protocol, batch_size=batch_size, sleep=fake.sleep,
                     clock=fake.clock, retry=RetryPolicy(attempts=attempts, jitter=0.0))
    try:
        col = convert([SMALL_NESTED, FAILED], sink)
    finally:
        sink.close()
    s = sink.stats()
    assert s["spans_exported"] + s["spans_failed"] + s["spans_dropped_queue_full"] == kept_spans(col)
    assert rx.span_count - rx.rejected == s["spans_exported"] and s["pending_spans"] == 0
    assert s["runs_exported"] + s["runs_failed"] <= len(col.finished)


# -- the standard OTEL_* environment -------------------------------------------------------------------


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


def test_otel_service_name_overrides_the_default(rx: OtlpReceiver, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OTEL_SERVICE_NAME", "rings-on-node7")
    sink = make_sink(rx, "grpc")
    try:
        convert([FLOW], sink)
    finally:
        sink.close()
    assert {s.resource["service.name"] for s in rx.spans()} == {"rings-on-node7"}


# -- the agent stops on time ---------------------------------------------------------------------------


@pytest.mark.slow
@pytest.mark.parametrize(("protocol", "endpoint"), [("grpc", "blackhole"), ("http/protobuf", "blackhole"),
                                                    ("grpc", "down"), ("http/protobuf", "400")])
def test_watch_exits_on_sigterm_within_the_budget(tmp_path: Path, protocol: Protocol, endpoint: str) -> None:
    """``ringtrace watch --otlp-endpoint`` that cannot deliver: SIGTERM -> exit 0, the spans given up at the
    end of the shutdown budget and the loss said in one log line.  (How long the exit takes against the
    4.5 s budget: ``tests/bench/bench_agent.py``; the old code took 8-13 s.)"""
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
            wait_for(lambda: proc.poll() is not None or (events.exists() and len(events.read_text().splitlines()) == 2),
                     timeout=60, what="both runs finished")
            assert proc.poll() is None, "watch ended before SIGTERM"
            if hole is not None:
                assert hole.wait_for_bytes(1)  # the export is under way, and stuck
            proc.send_signal(signal.SIGTERM)
            _, stderr = proc.communicate(timeout=60)  # a deadline against hanging
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
    assert proc.returncode == 0, stderr
    lost = [line for line in stderr.splitlines() if "spans lost" in line]
    assert len(lost) == 1 and f"otlp: {kept} spans lost" in lost[0], stderr
