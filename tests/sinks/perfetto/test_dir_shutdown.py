"""The Perfetto dir sink writes a trace under a run's final name only when the run finished whole.

At ``close`` (a shutdown with ``--state-dir`` leaves open runs for the restart) the open runs'
temp files are removed; after ``dropped`` (the fan-out shed some of a run's events while the
sink was stuck) that run's trace is given up.  Finished runs are untouched either way.
"""

from __future__ import annotations

import math
from pathlib import Path

from ringtrace.model.records import RunFinished, RunProgress, RunStarted, SinkEvent, Source, empty_summary
from ringtrace.sinks import FanOut
from ringtrace.sinks.perfetto import PerfettoDirSink, trace_file_name
from tests._support.events import read_events
from tests._support.samples import SAMPLES

NESTED = SAMPLES / "outputs/NestedScopes_small_20261130_101702"


def run_events(name: str, progress: int = 2) -> list[SinkEvent]:
    src = Source(f"/t/{name}/scope_stats.jsonl")
    return [RunStarted(src, None), *(RunProgress(src, (), (), ()) for _ in range(progress)),
            RunFinished(src, empty_summary(None), (), "complete", key=name)]


def test_close_leaves_no_file_for_a_run_still_open(tmp_path: Path) -> None:
    events = read_events([NESTED])
    [fin] = [e for e in events if isinstance(e, RunFinished)]
    traces = tmp_path / "traces"
    sink = PerfettoDirSink(traces)
    fanout = FanOut([sink])
    done = run_events("done")
    fanout.receive_all(done)
    fanout.receive_all([e for e in events if e is not fin])  # a real run, all but its end
    fanout.flush(math.inf)
    assert any(p.name.endswith(".pftrace.tmp") for p in traces.iterdir())  # its trace was being written
    fanout.close()
    assert sorted(p.name for p in traces.iterdir()) == [trace_file_name(done[0].source)]
    assert sink.discarded_at_close == 1 and fanout.errors["perfetto-dir"] == 0


def test_a_run_that_lost_events_gets_no_trace(tmp_path: Path) -> None:
    traces = tmp_path / "traces"
    sink = PerfettoDirSink(traces)
    events = run_events("a", progress=3)
    sink.receive(events[0])
    sink.receive(events[1])
    sink.dropped(events[0].source)
    assert sink.discarded_dropped == 1 and list(traces.iterdir()) == []
    for ev in events[2:]:
        sink.receive(ev)
    assert sink.written == [] and list(traces.iterdir()) == []
    again = run_events("b", progress=1)  # the next run is written as usual
    for ev in again:
        sink.receive(ev)
    assert [p.name for p in sink.written] == [trace_file_name(again[0].source)]
    sink.close()
    assert sink.discarded_at_close == 0
