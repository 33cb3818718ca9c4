"""The exporter's own families: counters of what it read and dropped, the reader's gauges, build info."""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field, replace

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric


@dataclass(slots=True)
class SelfCounts:
    records: int = 0
    parse_errors: dict[str, int] = field(default_factory=dict)
    started: int = 0
    finished: dict[str, int] = field(default_factory=dict)
    expired: int = 0
    evicted: int = 0
    series_dropped: int = 0
    files_watched: int | None = None
    tracked: int = 0  # set by the sink when it copies the counts
    finished_series: int = 0  # likewise

    def copy(self) -> SelfCounts:
        return replace(self, parse_errors=dict(self.parse_errors), finished=dict(self.finished))


def counted(name: str, doc: str, label: str, counts: Mapping[str, int]) -> CounterMetricFamily:
    fam = CounterMetricFamily(name, doc, labels=[label])
    for key, n in sorted(counts.items()):
        fam.add_metric([key], n)
    return fam


def own_families(c: SelfCounts, reader: Mapping[str, int], sink_errors: Mapping[str, int],
                 build: list[str]) -> Iterator[Metric]:
    """The families of ``c`` (a copy), the reader's gauges and the build, in exposition order."""
    watched = reader.get("files_watched", c.files_watched)
    yield CounterMetricFamily("ringtrace_records_read", "Scope-boundary records read from all files.",
                              value=c.records)
    yield counted("ringtrace_parse_errors", "Input lines that could not be read, by reason.", "reason",
                  c.parse_errors)
    if watched is not None:
        yield GaugeMetricFamily("ringtrace_files_watched", "scope_stats files followed right now.", value=watched)
    if reader:
        yield CounterMetricFamily("ringtrace_read_errors", "Looks at a file that failed (permissions, I/O "
                                  "errors, not a regular file); each file's first of a kind is logged.",
                                  value=reader.get("read_errors", 0))
        yield GaugeMetricFamily("ringtrace_in_flight_bytes", "Input bytes read whose events the sinks have "
                                "not taken yet (bounded: the reader waits).", value=reader.get("in_flight_bytes", 0))
    yield counted("ringtrace_sink_errors", "Failures of an output sink (it was skipped), by sink.", "sink",
                  sink_errors)
    yield CounterMetricFamily("ringtrace_runs_started", "Runs (source files or rewrites) seen to start.",
                              value=c.started)
    yield counted("ringtrace_runs_finished", "Runs finished, by reason.", "reason", c.finished)
    yield CounterMetricFamily("ringtrace_runs_expired", "Finished runs whose series were dropped after the TTL.",
                              value=c.expired)
    yield CounterMetricFamily("ringtrace_runs_evicted",
                              "Runs dropped early because more than the run limit were tracked.", value=c.evicted)
    yield GaugeMetricFamily("ringtrace_runs_tracked", "Runs whose series are exposed or held right now.",
                            value=c.tracked)
    yield GaugeMetricFamily("ringtrace_finished_run_series", "Series of finished runs held right now (at most "
                            "--series-budget).", value=c.finished_series)
    yield CounterMetricFamily("ringtrace_series_dropped", "Series of finished runs dropped before their TTL because "
                              "the finished runs' series passed --series-budget (the oldest runs' go first).",
                              value=c.series_dropped)
    info = GaugeMetricFamily("ringtrace_build_info", "ringtrace build: version and Python version (always 1).",
                             labels=["version", "python_version"])
    info.add_metric(build, 1)
    yield info
