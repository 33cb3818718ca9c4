"""``PrometheusSink.render``: finished runs' lines cached, byte-identical to a fresh collection in both
formats, expiring with their runs, and never failing on labels that are not UTF-8."""

from __future__ import annotations

import gzip
import os
from pathlib import Path

import msgspec
from prometheus_client.parser import text_string_to_metric_families

from ringtrace.config import Thresholds
from ringtrace.model.records import Labels, Source
from ringtrace.sinks.prometheus import PrometheusSink
from ringtrace.sinks.prometheus._segments import SEG_RUNS
from ringtrace.sources.paths import source_labels
from ringtrace.stages.run import Run
from tests._support.prometheus import OM_ACCEPT, Clock, events_of, fed, same_as_fresh
from tests._support.samples import FLOW, PAGED, SAMPLE_FILES


def test_finished_runs_render_like_a_fresh_collection_and_are_cached() -> None:
    sink = fed(SAMPLE_FILES)
    first = same_as_fresh(sink)
    assert b'ringtrace_wedged_scopes{' in first
    assert all(st.live is None and st.lines is None for st in sink._runs.values())  # formatted once, packed...
    assert same_as_fresh(sink) == first  # ...and reused
    assert sink.chunks("")[0].key == sink.chunks("")[0].key  # nothing changed: the server may send its gzip again


def test_open_runs_are_collected_per_scrape_beside_cached_ones() -> None:
    clock = Clock(0.0)
    sink = fed([PAGED], clock=clock)
    run = Run(Source(str(FLOW), source_labels(FLOW)), Thresholds())
    data = FLOW.read_bytes()
    for ev in run.feed(data[: len(data) // 2]):
        sink.receive(ev)
    half = same_as_fresh(sink)
    for ev in run.feed(data[len(data) // 2:]):
        sink.receive(ev)
    whole = same_as_fresh(sink)
    assert half != whole  # the open run's figures moved
    open_state = sink._runs[str(FLOW)]
    assert open_state.live is not None and open_state.lines is None


def test_an_expired_run_leaves_both_formats() -> None:
    clock = Clock(1000.0)
    sink = fed([PAGED, FLOW], clock=clock, series_ttl=900.0)
    run = PAGED.parts[-3]
    assert f'run="{run}"'.encode() in same_as_fresh(sink)
    clock.now += 900.0
    text = same_as_fresh(sink)
    assert f'run="{run}"'.encode() not in text
    assert b'run="' not in sink.render(OM_ACCEPT)[0]


def test_a_path_that_is_not_utf8_is_exposed_with_replacement_characters() -> None:
    raw = os.fsdecode(b"/data/build_output/caf\xe9_run/dfx_outputs/scope_stats/scope_stats.jsonl")
    src = Source(raw, Labels(run=os.fsdecode(b"caf\xe9_run")))
    sink = PrometheusSink(clock=Clock())
    for ev in events_of(PAGED.read_bytes(), src, 1 << 20):
        sink.receive(ev)
    text = same_as_fresh(sink).decode()
    runs = {s.labels.get("run") for fam in text_string_to_metric_families(text) for s in fam.samples}
    assert "caf\ufffd_run" in runs


def test_many_finished_runs_are_packed_and_their_gzip_stitched(tmp_path: Path) -> None:
    """Finished runs are packed a segment at a time as segments fill (the newest at the next scrape); the
    gzip stitched from the segments' streams is the exposition, and only what changed is packed again."""
    clock = Clock(0.0)
    sink = PrometheusSink(clock=clock, series_ttl=1000.0)
    evs = events_of(PAGED.read_bytes(), Source("/t/r/scope_stats/scope_stats.jsonl"), 1 << 20)
    for i in range(SEG_RUNS + 44):
        clock.now = float(i)
        src = Source(f"/t/r{i}/scope_stats/scope_stats.jsonl", Labels(run=f"r{i}"))
        for ev in evs:
            sink.receive(msgspec.structs.replace(ev, source=src))
    assert sum(st.lines is not None for st in sink._runs.values()) == 44  # the first segment filled: packed
    body = same_as_fresh(sink)
    assert body.count(b"ringtrace_run_scopes{") == SEG_RUNS + 44
    assert all(st.lines is None for st in sink._runs.values())  # the scrape packed the newest
    chunks, _ = sink.chunks(OM_ACCEPT)
    assert chunks.gzipped is not None and gzip.decompress(chunks.gzipped()) == sink.render(OM_ACCEPT)[0]
    first = sink._segments[0].parts
    clock.now = 1000.5  # the first run expires: its segment is packed again, not the other
    newest = sink._segments[-1].parts
    sink.render("")
    assert sink._segments[0].parts is not first and sink._segments[-1].parts is newest
    assert b'run="r0"' not in same_as_fresh(sink)


def test_a_run_finishing_between_scrapes_is_in_the_next_one() -> None:
    clock = Clock(0.0)
    sink = fed([PAGED], clock=clock)
    before = same_as_fresh(sink)
    run = FLOW.parts[-4]
    assert f'run="{run}"'.encode() not in before
    for ev in events_of(FLOW.read_bytes(), Source(str(FLOW), source_labels(FLOW)), 1 << 20):
        sink.receive(ev)
    after = same_as_fresh(sink)
    assert f'ringtrace_wedged_scopes{{dispatch="",rank="",run="{run}"}} 5.0'.encode() in after

