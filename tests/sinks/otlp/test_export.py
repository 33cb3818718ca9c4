"""Settings and transports (:mod:`ringtrace.sinks.otlp._export`), against a real receiver (gRPC and
HTTP/protobuf on 127.0.0.1).

What is proven: our transports deliver what the SDK's stock exporters deliver (and need neither
them nor ``requests``); endpoints, the ``/v1/traces`` path and the flags-then-``OTEL_*`` settings,
unusable ones named; TLS with client certificates; and under faults: a receiver down at start,
throughout or restarted mid-run, retryable answers retried with capped, jittered backoff (and
``Retry-After``), non-retryable ones (INVALID_ARGUMENT, HTTP 400, ...) failed at once, partial
successes: every kept span is exported or counted as failed, and the counters move while retrying.
Retry waits use a fake ``sleep``/``clock``.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
from pathlib import Path
from typing import Any

import grpc
import psutil
import pytest
from opentelemetry.exporter.otlp.proto.grpc.trace_exporter import OTLPSpanExporter as StockGrpc
from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter as StockHttp
from opentelemetry.sdk.trace.export import SpanExporter, SpanExportResult

from ringtrace.sinks.otlp import OtlpSink, Protocol, RetryPolicy, http_traces_url
from ringtrace.sinks.otlp._export import SHUTTING_DOWN, Attempt, HttpTransport, resolve
from tests._support.otlp import PROTOCOLS, SMALL_NESTED, FakeTime, convert, kept_spans, make_sink, sample_batches
from tests._support.otlp_receiver import OK, Blackhole, Fault, OtlpReceiver, Tls
from tests._support.samples import FAILED, FLOW
from tests._support.writer import wait_for

# -- our transports, endpoints, settings, TLS ----------------------------------------------------------


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


# -- receiver down, restarted, refusing ----------------------------------------------------------------


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


@pytest.mark.slow  # a real socket whose SYNs are dropped
def test_abort_cuts_a_connect_whose_syns_are_dropped() -> None:
    """A request that began before the shutdown, its connect hanging (a full backlog drops the SYNs): abort
    ends it at once as shutting down (it used to hold the worker for the whole timeout, and the sink was
    abandoned with its spans neither sent nor counted as failed)."""
    with Blackhole(accept=False) as hole:
        transport = HttpTransport(resolve(hole.endpoint, "http/protobuf", 600.0, {}), "test")
        got: list[Attempt] = []
        worker = threading.Thread(target=lambda: got.append(transport.send(b"", 600.0)))
        worker.start()

        def connecting() -> bool:
            return any(c.status == psutil.CONN_SYN_SENT and c.raddr and c.raddr.port == hole.port
                       for c in psutil.Process().net_connections("tcp"))

        wait_for(connecting, what="the connect to hang in SYN_SENT")
        transport.abort()
        worker.join(60)  # against hanging: the connect's own timeout is 600 s
        assert not worker.is_alive() and got == [SHUTTING_DOWN]
        assert transport.send(b"", 600.0) == SHUTTING_DOWN  # and every later request
