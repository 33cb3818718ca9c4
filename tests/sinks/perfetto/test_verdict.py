"""The trace renders each run's one verdict (``RunFinished.verdict``) and decides none: for every sample, every
real run in ``tests/fixtures/realruns`` and a real file cut short, the process's first label, its verdict track
(named by the kind) and that track's one slice (named by the short text, with the kind, severity and text as
args) are the verdict's, in both formats."""

from __future__ import annotations

from pathlib import Path
from typing import Literal

import pytest

from ringtrace.model.records import RunFinished, SinkEvent
from ringtrace.sinks.perfetto import PerfettoSink
from ringtrace.sinks.perfetto._layout import process_name, verdict_kind, verdict_title
from tests._support.events import finished
from tests._support.samples import PAGED
from tests._support.verdicts import VERDICT_PATHS, cut_copy, json_verdicts, perfetto_verdicts, verdict_events


@pytest.fixture(scope="module")
def events(tmp_path_factory: pytest.TempPathFactory) -> list[SinkEvent]:
    cut = cut_copy(PAGED, tmp_path_factory.mktemp("cut"), keep=900)
    return verdict_events([*VERDICT_PATHS, cut])


@pytest.mark.parametrize("fmt", ["proto", "chrome-json"])
def test_the_trace_shows_each_runs_verdict(events: list[SinkEvent], tmp_path: Path,
                                           fmt: Literal["proto", "chrome-json"]) -> None:
    path = tmp_path / ("t.pftrace" if fmt == "proto" else "t.json")
    sink = PerfettoSink(path, fmt)
    for ev in events:
        sink.receive(ev)
    sink.close()
    shown = perfetto_verdicts(path) if fmt == "proto" else json_verdicts(path)
    fins: list[RunFinished] = finished(events)
    assert sorted(shown) == sorted(process_name(f.source) for f in fins)  # one verdict per run, runs alone too
    for fin in fins:
        v, got = fin.verdict, shown[process_name(fin.source)]
        assert (got.kind, got.severity, got.text) == (v.kind, v.severity, v.text), fin.source.name
        assert (got.track, got.short) == (verdict_kind(v), v.short), fin.source.name
        assert got.label.startswith(verdict_title(v)), (got.label, v)
    kinds = {f.verdict.kind for f in fins}
    assert {"wedged", "failed", "cut_short", "test_failed", "near_capacity", "healthy"} <= kinds
