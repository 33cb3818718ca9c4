"""The Chrome JSON trace (:mod:`ringtrace.sinks.perfetto._json`): a slice per scope, unmatched begin and
wedged scope, balanced per thread; three counters per record, the WEDGED instants, the verdict's track (as
the protobuf trace's: tests/sinks/perfetto/test_verdict.py), process names as the layout's."""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path

from ringtrace.model.records import RunFinished
from ringtrace.sinks.perfetto import PerfettoSink
from ringtrace.sinks.perfetto._layout import process_name
from tests._support.events import read_events
from tests._support.samples import FAILED, L3


def test_chrome_json(tmp_path: Path) -> None:
    events = read_events([L3, FAILED])
    path = tmp_path / "t.json"
    sink = PerfettoSink(path, "chrome-json")
    for ev in events:
        sink.receive(ev)
    sink.close()
    doc = json.loads(path.read_text())
    evs = doc["traceEvents"]
    fins = [e for e in events if isinstance(e, RunFinished)]
    phases = Counter(e["ph"] for e in evs)
    expected = sum(f.summary.scopes + f.summary.unmatched_begins + len(f.summary.wedged) for f in fins)
    assert phases["B"] == phases["E"] == expected
    assert phases["i"] == sum(1 for f in fins if f.summary.wedged) + len(fins)  # WEDGED + run info
    records = sum(f.summary.records for f in fins)
    assert phases["C"] == 3 * records  # ring live, ring use %, tensormap (every ring here has its capacities)
    assert phases["X"] == len(fins)  # the verdict track's slice
    names = {e["args"]["name"] for e in evs if e["ph"] == "M" and e["name"] == "process_name"}
    assert names == {process_name(f.source) for f in fins}
    stacks: dict[tuple[int, int], int] = Counter()
    for e in evs:  # balanced per thread, and timestamps are lines
        if e["ph"] in "BE":
            stacks[e["pid"], e["tid"]] += 1 if e["ph"] == "B" else -1
            assert stacks[e["pid"], e["tid"]] >= 0
    assert set(stacks.values()) == {0}
