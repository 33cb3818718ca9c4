"""The OTLP sink's counters as Prometheus families: a collector the sink owns, registered by the
service into the Prometheus exporter's registry (which knows nothing of these names)."""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric

_OUTCOMES = (("exported", "spans_exported"), ("failed", "spans_failed"),
             ("dropped_budget", "spans_dropped_by_budget"), ("dropped_queue", "spans_dropped_queue_full"))


class OtlpCollector:
    """``ringtrace_otlp_spans{outcome}``, ``_export_retries`` and ``_pending_spans`` from ``stats()`` at each scrape."""

    def __init__(self, stats: Callable[[], Mapping[str, int]]) -> None:
        self._stats = stats

    def collect(self) -> Iterator[Metric]:
        try:
            st = dict(self._stats())
        except Exception:  # a scrape must not fail because the app is shutting down
            return
        spans = CounterMetricFamily("ringtrace_otlp_spans", "Scope spans by outcome: exported, failed (after "
                                    "retries), left out by --otlp-max-spans, dropped because the sink was "
                                    "stuck and its outlet shed events of their run.", labels=["outcome"])
        for outcome, key in _OUTCOMES:
            spans.add_metric([outcome], st.get(key, 0))
        yield spans
        yield CounterMetricFamily("ringtrace_otlp_export_retries", "OTLP export requests retried.",
                                  value=st.get("export_retries", 0))
        yield GaugeMetricFamily("ringtrace_otlp_pending_spans", "Spans of the run being exported not yet sent.",
                                value=st.get("pending_spans", 0))
