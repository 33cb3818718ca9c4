"""The OTLP sink's counters on the Prometheus metrics page (:mod:`ringtrace.sinks.otlp._metrics`)."""

from __future__ import annotations

from ringtrace.sinks.otlp import OtlpSink, RetryPolicy
from tests._support.otlp import Boom, FakeTime, convert, kept_spans
from tests._support.samples import FAILED


def test_the_sinks_collector_puts_its_counters_on_the_metrics_page() -> None:
    from prometheus_client.exposition import generate_latest
    from prometheus_client.openmetrics.exposition import generate_latest as generate_openmetrics

    from ringtrace.sinks.prometheus import PrometheusSink

    fake = FakeTime()
    sink = OtlpSink(None, "grpc", transport=Boom(), sleep=fake.sleep, clock=fake.clock,
                    retry=RetryPolicy(attempts=2, jitter=0.0))
    col = convert([FAILED], sink)
    sink.close()
    prom = PrometheusSink()
    assert b"ringtrace_otlp" not in prom.render("")[0]
    prom.register(sink.collector())
    text, _ = prom.render("")
    assert text == generate_latest(prom.registry)  # render includes a registered collector like a fresh scrape
    om, _ = prom.render("application/openmetrics-text;version=1.0.0")
    assert om == generate_openmetrics(prom.registry)
    page = text.decode()
    assert f'ringtrace_otlp_spans_total{{outcome="failed"}} {float(kept_spans(col))}' in page
    assert f'ringtrace_otlp_spans_total{{outcome="dropped_budget"}} {float(sink.spans_dropped_by_budget)}' in page
    assert kept_spans(col) > 0 and sink.export_retries > 0
    assert 'ringtrace_otlp_spans_total{outcome="exported"} 0.0' in page
    assert f"ringtrace_otlp_export_retries_total {float(sink.export_retries)}" in page
    assert "ringtrace_otlp_pending_spans 0.0" in page
