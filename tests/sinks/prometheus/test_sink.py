"""The Prometheus sink: live aggregates agree with the pairer, the exposition is valid and says
what the files say, series expire after the TTL, memory stays bounded."""

from __future__ import annotations

import json
import math
import random
import shutil
import subprocess
from pathlib import Path

import msgspec
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from prometheus_client import REGISTRY
from prometheus_client.exposition import generate_latest
from prometheus_client.openmetrics.exposition import generate_latest as generate_openmetrics
from prometheus_client.openmetrics.parser import text_string_to_metric_families as parse_openmetrics

from ringtrace.config import Thresholds
from ringtrace.model.records import Labels, RunFinished, RunProgress, SinkEvent, Source
from ringtrace.model.runtime import usable
from ringtrace.sinks import FanOut, Sink
from ringtrace.sinks.prometheus import PrometheusSink
from ringtrace.sources.paths import source_labels
from ringtrace.stages.need import proven_need
from ringtrace.stages.run import Run
from tests._support.prometheus import Clock, events_of, fed, one, pick, same_as_fresh, series
from tests._support.require import require
from tests._support.samples import FLOW, PAGED, SAMPLE_FILES

HEAP_DL = next(f for f in SAMPLE_FILES if "HeapRingDeadlock" in str(f))
L3_RANK1 = next(f for f in SAMPLE_FILES if "rank1" in str(f))
L3_RANK0 = next(f for f in SAMPLE_FILES if "rank0" in str(f))


def agrees(events: list[SinkEvent]) -> None:
    """The last live snapshot the sink sees equals the final summary (wedged aside), and counts the open scopes."""
    live = [ev.summary for ev in events if isinstance(ev, RunProgress) and ev.summary is not None]
    fin = next(ev for ev in events if isinstance(ev, RunFinished))
    if not live:  # a file with nothing but its metadata line
        assert fin.summary.records == 0
        return
    assert live[-1] == msgspec.structs.replace(fin.summary, wedged=())
    assert live[-1].open_scopes == len(fin.summary.wedged)
    records = [r for ev in events if isinstance(ev, RunProgress) for r in ev.records]
    assert [x.records for x in live] == sorted(x.records for x in live) and live[-1].records == len(records)


# -- the live snapshots against the final summary ---------------------------------------------------------


@pytest.mark.parametrize("path", SAMPLE_FILES, ids=lambda p: p.parts[-3] if "dfx" not in str(p) else str(p)[-60:])
@pytest.mark.parametrize("chunk", [1 << 20, 4096, 97])
def test_live_snapshots_match_the_final_summary_on_samples(path: Path, chunk: int) -> None:
    agrees(events_of(path.read_bytes(), Source(str(path)), chunk))


def _meta(version: int, **kw: object) -> dict[str, object]:
    m: dict[str, object] = {"version": version, "fatal": False, "dropped": 0, "total": None,
                            "task_window_max": [8, 8, 16, 16], "heap_max": [4096, 4096, 8192, 8192],
                            "tensormap_max": 100}
    if version >= 5:
        m["dep_pool_max"] = [32, 32, 32, 32]
    m.update(kw)
    return m


@st.composite
def scope_files(draw: st.DrawFn) -> bytes:
    """Random (often badly nested, sometimes broken) files of any supported version."""
    version = draw(st.sampled_from([4, 5, 6]))
    lines = [json.dumps(_meta(version, dropped=draw(st.integers(0, 3))))]
    tw = [0, 0, 0, 0]
    heap = [0, 0, 0, 0]
    dp = [1, 1, 1, 1]
    tails = [0, 0, 0, 0]
    for _ in range(draw(st.integers(0, 60))):
        if draw(st.integers(0, 30)) == 0:
            lines.append(draw(st.sampled_from(['{"site": "x', "", "not json", '{"phase": "begin"}'])))
            continue
        depth = draw(st.integers(0, 5))
        ring = min(depth, 3)
        tw[ring] += draw(st.integers(0, 3))
        heap[ring] += draw(st.integers(0, 512))
        dp[ring] += draw(st.integers(0, 2))
        tails[ring] = draw(st.integers(tails[ring], tw[ring]))
        h_tail = min(heap[ring], tails[ring] * 64)
        rec: dict[str, object] = {
            "site": f"o.cpp:{draw(st.integers(1, 4))}", "phase": draw(st.sampled_from(["begin", "end"])),
            "depth": depth, "ring": ring, "task_window_start": tails[ring], "task_window_end": tw[ring],
            "heap_start": h_tail if version == 6 else h_tail % 4096, "heap_end": heap[ring] if version == 6
            else heap[ring] % 4096, "tensormap": draw(st.integers(0, 120))}
        if version >= 5:
            rec["dep_pool_start"], rec["dep_pool_end"] = 1, dp[ring]
        lines.append(json.dumps(rec))
    return ("\n".join(lines) + ("\n" if draw(st.booleans()) else "")).encode()


@settings(max_examples=150, deadline=None)
@given(scope_files(), st.integers(1, 300))
def test_aggregate_matches_pairer_on_random_files(data: bytes, chunk: int) -> None:
    agrees(events_of(data, Source("/x/scope_stats.jsonl"), chunk))


# -- what the exposition says -------------------------------------------------------------------


def test_exposition_reports_the_sample_figures() -> None:
    s = series(fed([PAGED, L3_RANK1]))
    run = dict(run=PAGED.parts[-3], rank="", dispatch="")
    ring2 = dict(run, ring="2")
    [sizes] = pick(s, "ringtrace_run_sizes_info", **run)  # the capacities: one info series per run
    assert dict(sizes)["task_window"] == "8,8,16,64" and dict(sizes)["tensormap"] == "65536"
    assert dict(sizes)["heap_bytes"] == "8192,16384,32768,65536"
    # high water / usable capacity: streams past the capacity (19 of the window's 15 usable slots), not a need
    assert one(s, "ringtrace_ring_high_water_ratio", resource="task_window", **ring2) == pytest.approx(19 / 15)
    assert one(s, "ringtrace_ring_high_water_ratio", resource="heap", **ring2) == pytest.approx(26 / 32)
    # the need the records prove (one scope's 4 tasks live at once: a window of 5), not the high water
    assert one(s, "ringtrace_ring_need_ratio", resource="task_window", **ring2) == pytest.approx(5 / 16)
    assert not pick(s, "ringtrace_ring_need_ratio", resource="dep_pool", **ring2)  # the dep pool proves nothing
    assert not pick(s, "ringtrace_ring_occupancy_ratio")  # occupancy: open runs only
    gone = {n for n, _ in s} & {"ringtrace_ring_task_window_capacity", "ringtrace_ring_heap_live_bytes",
                                "ringtrace_ring_scopes", "ringtrace_tensormap_capacity", "ringtrace_run_fatal",
                                "ringtrace_run_complete", "ringtrace_run_finished", "ringtrace_wedged_scope_info",
                                "ringtrace_run_last_update_timestamp_seconds", "ringtrace_ring_utilization_ratio"}
    assert not gone
    assert one(s, "ringtrace_run_scopes", **run) == 992
    assert one(s, "ringtrace_run_records", **run) == 1984
    assert not pick(s, "ringtrace_run_dropped_records", **run)  # absent when none
    assert not pick(s, "ringtrace_wedged_scopes", **run)  # absent when none
    # the L3 file carries rank and dispatch labels; its ring 0 saw no allocation: nothing of it is exposed
    l3 = dict(run="nested_l3_20261130_102011", rank="1", dispatch="1")
    assert one(s, "ringtrace_ring_high_water_ratio", ring="3", resource="dep_pool", **l3) == pytest.approx(131 / 128)
    assert not [k for (n, k) in s if n.startswith("ringtrace_ring_") and ("ring", "0") in k and ("rank", "1") in k]
    assert one(s, "ringtrace_records_read_total") == 1984 + 1362


def test_a_finished_l3_rank_costs_a_third_of_the_series_it_did() -> None:
    """Issue 35: 82 series per finished rank of the L3 sample before; at most a third now."""
    s = series(fed([L3_RANK0]))
    per_run = [n for (n, labels) in s if ("rank", "0") in labels]
    assert len(per_run) <= 82 // 3, sorted(per_run)
    assert {"ringtrace_run_verdict", "ringtrace_run_info", "ringtrace_run_sizes_info",
            "ringtrace_ring_high_water_ratio", "ringtrace_ring_need_ratio"} <= set(per_run)


def test_wedged_runs_say_where_they_wedged() -> None:
    s = series(fed([FLOW, HEAP_DL]))
    flow = dict(run="NestedScopes_window4_flow_control_deadlock", rank="", dispatch="")
    assert one(s, "ringtrace_wedged_scopes", **flow) == 5
    inner = pick(s, "ringtrace_wedged_innermost_scope_info", **flow)
    assert [(dict(k)["site"], dict(k)["depth"], dict(k)["ring"]) for k in inner] == [
        ("nested_dummy_small_orch.cpp:75", "4", "3")]
    assert not pick(s, "ringtrace_run_open_scopes", **flow)  # the wedged scopes say it once finished
    # no scope paired: no peaks, no needs; and no occupancy once finished
    assert not pick(s, "ringtrace_ring_high_water_ratio", **flow)
    assert not pick(s, "ringtrace_ring_need_ratio", **flow)
    assert not pick(s, "ringtrace_ring_occupancy_ratio", **flow)
    heap = dict(run="HeapRingDeadlock", rank="", dispatch="")
    assert one(s, "ringtrace_wedged_scopes", **heap) == 1
    assert dict(next(iter(pick(s, "ringtrace_run_info", **heap))))["reason"] == "eof"


def test_every_per_run_series_has_run_rank_dispatch() -> None:
    s = series(fed(SAMPLE_FILES))
    self_metrics = {"ringtrace_records_read_total", "ringtrace_parse_errors_total", "ringtrace_files_watched",
                    "ringtrace_sink_errors_total", "ringtrace_build_info", "ringtrace_runs_started_total",
                    "ringtrace_runs_finished_total", "ringtrace_runs_expired_total", "ringtrace_runs_evicted_total",
                    "ringtrace_runs_tracked", "ringtrace_finished_run_series", "ringtrace_series_dropped_total"}
    names = {n for n, _ in s}
    assert len(names - self_metrics) >= 10
    for (name, labels), _ in s.items():
        if name in self_metrics:
            continue
        keys = {k for k, _ in labels}
        assert {"run", "rank", "dispatch"} <= keys, name
        if name.startswith("ringtrace_ring_"):
            assert "ring" in keys, name
            assert dict(labels)["ring"] in {"0", "1", "2", "3"}


def test_promtool_check_metrics_passes() -> None:
    promtool = shutil.which("promtool")
    require(promtool is not None, "promtool not installed (Debian package prometheus)")
    assert promtool is not None
    sink = fed(SAMPLE_FILES, sink_errors=lambda: {"perfetto": 2, "prometheus": 0})
    sink.set_files_watched(9)
    text = generate_latest(sink.registry)
    res = subprocess.run([promtool, "check", "metrics"], input=text, capture_output=True, timeout=60)
    assert res.returncode == 0, res.stdout.decode() + res.stderr.decode()
    assert res.stdout.strip() == b"" and res.stderr.strip() == b"", "promtool lint findings"


def test_openmetrics_exposition_parses_strictly() -> None:
    sink = fed(SAMPLE_FILES)
    text = generate_openmetrics(sink.registry).decode()
    assert text.endswith("# EOF\n")
    names = {f.name for f in parse_openmetrics(text)}
    assert {"ringtrace_records_read", "ringtrace_ring_occupancy_ratio", "ringtrace_run_verdict"} <= names


def test_self_metrics() -> None:
    bad = b'{"version": 6, "fatal": true, "dropped": 2, "total": 9, "task_window_max": [8,8,8,8], ' \
          b'"heap_max": [64,64,64,64], "dep_pool_max": [8,8,8,8], "tensormap_max": 10}\nnot json\n\n'

    class Broken(Sink):
        name = "broken"

        def receive(self, event: SinkEvent) -> None:
            raise RuntimeError("boom")

        def flush(self, deadline: float) -> None:
            pass

        def close(self) -> None:
            pass

    sink = PrometheusSink(clock=Clock())
    fanout = FanOut([sink, Broken()])
    sink = PrometheusSink(clock=Clock(), sink_errors=lambda: fanout.errors)
    fanout.sinks[0] = sink
    fanout.receive_all(events_of(bad, Source("/r/bad/dfx_outputs/scope_stats/scope_stats.jsonl",
                                             Labels(run="bad")), 7))
    sink.set_files_watched(3)
    s = series(sink)
    assert one(s, "ringtrace_parse_errors_total", reason="invalid_record") == 1
    assert one(s, "ringtrace_parse_errors_total", reason="blank_line") == 1
    assert one(s, "ringtrace_sink_errors_total", sink="broken") == fanout.errors["broken"] >= 3
    assert one(s, "ringtrace_files_watched") == 3
    assert one(s, "ringtrace_runs_started_total") == 1
    assert one(s, "ringtrace_runs_finished_total", reason="eof") == 1
    assert one(s, "ringtrace_run_dropped_records", run="bad") == 2
    assert one(s, "ringtrace_run_verdict", run="bad", severity="error") == 1  # a latched fatal: the verdict says it
    info = pick(s, "ringtrace_build_info")
    assert len(info) == 1 and dict(next(iter(info)))["version"]


def test_own_registry_nothing_global() -> None:
    before = set(REGISTRY._names_to_collectors)
    a, b = fed([PAGED]), fed([FLOW])
    assert set(REGISTRY._names_to_collectors) == before
    assert pick(series(a), "ringtrace_run_scopes", run=PAGED.parts[-3])
    assert not pick(series(b), "ringtrace_run_scopes", run=PAGED.parts[-3])


# -- a run while it is open ---------------------------------------------------------------------


def test_open_run_is_not_wedged_until_finished() -> None:
    data = FLOW.read_bytes()
    src = Source(str(FLOW), source_labels(FLOW))
    clock = Clock(50.0)
    sink = PrometheusSink(clock=clock)
    run = Run(src, Thresholds())
    for ev in run.feed(data):
        sink.receive(ev)
    s = series(sink)
    lab = dict(run=src.labels.run)
    assert one(s, "ringtrace_run_open_scopes", **lab) == 5
    assert not pick(s, "ringtrace_wedged_scopes", **lab)
    assert not pick(s, "ringtrace_wedged_innermost_scope_info", **lab)
    assert dict(next(iter(pick(s, "ringtrace_run_info", **lab))))["reason"] == ""  # open
    # no scope paired yet, but the window is full: 3 of ring 3's 3 usable slots (what the paging alert reads)
    assert one(s, "ringtrace_ring_occupancy_ratio", ring="3", resource="task_window", **lab) == 1
    assert one(s, "ringtrace_run_last_record_timestamp_seconds", **lab) == 50.0
    inner = pick(s, "ringtrace_open_innermost_scope_info", **lab)  # where it is submitting now
    assert [(dict(k)["site"], dict(k)["depth"], dict(k)["ring"]) for k in inner] == [
        ("nested_dummy_small_orch.cpp:75", "4", "3")]
    assert not pick(s, "ringtrace_run_verdict", **lab)  # no verdict while it runs
    clock.now = 80.0
    for ev in run.finish("idle"):
        sink.receive(ev)
    s = series(sink)
    assert one(s, "ringtrace_wedged_scopes", **lab) == 5
    assert one(s, "ringtrace_run_last_record_timestamp_seconds", **lab) == 50.0  # no record since
    assert not pick(s, "ringtrace_open_innermost_scope_info", **lab)
    assert not pick(s, "ringtrace_ring_occupancy_ratio", **lab)
    assert not pick(s, "ringtrace_run_open_scopes", **lab)
    assert one(s, "ringtrace_run_verdict", kind="wedged", severity="error", **lab) == 1
    assert dict(next(iter(pick(s, "ringtrace_run_info", **lab))))["reason"] == "idle"


def test_live_figures_follow_the_records() -> None:
    """Mid-run, the exposed peaks are those of the scopes read so far."""
    data = PAGED.read_bytes()
    lines = data.splitlines(keepends=True)
    src = Source(str(PAGED), source_labels(PAGED))
    sink = PrometheusSink(clock=Clock())
    run = Run(src, Thresholds())
    head = b"".join(lines[:800])
    for ev in run.feed(head):
        sink.receive(ev)
    s = series(sink)
    lab = dict(run=src.labels.run)
    expect = run.summary()
    for p in expect.peaks:
        assert p.capacity
        need = proven_need(p, expect).value
        got = pick(s, "ringtrace_ring_need_ratio", ring=str(p.ring), resource=p.resource, **lab)
        assert list(got.values()) == ([pytest.approx(need / p.capacity)] if need else [])
        got = pick(s, "ringtrace_ring_occupancy_ratio", ring=str(p.ring), resource=p.resource, **lab)
        assert list(got.values()) == ([pytest.approx(p.live / usable(p.resource, p.capacity))]
                                      if p.live or p.high_water else [])  # a ring not used yet: nothing
        got = pick(s, "ringtrace_ring_high_water_ratio", ring=str(p.ring), resource=p.resource, **lab)
        assert list(got.values()) == ([pytest.approx(p.high_water / usable(p.resource, p.capacity))]
                                      if p.scopes and p.high_water else [])
    assert any(p.live for p in expect.peaks) and any(proven_need(p, expect).value for p in expect.peaks)
    assert one(s, "ringtrace_run_scopes", **lab) == expect.scopes
    assert one(s, "ringtrace_run_open_scopes", **lab) == len(run.pairer.open_scopes)


# -- lifetime of series ---------------------------------------------------------------------------


def test_finished_series_expire_after_ttl() -> None:
    clock = Clock(1000.0)
    sink = fed([PAGED, FLOW], clock=clock, series_ttl=900.0)
    lab = dict(run=PAGED.parts[-3])
    clock.now = 1000.0 + 899.0
    assert one(series(sink), "ringtrace_run_scopes", **lab) == 992
    clock.now = 1000.0 + 900.0
    s = series(sink)
    assert not pick(s, "ringtrace_run_scopes", **lab)
    assert not [n for n, labels in s if ("run", lab["run"]) in labels]
    assert not pick(s, "ringtrace_wedged_innermost_scope_info")
    assert one(s, "ringtrace_runs_expired_total") == 2
    assert one(s, "ringtrace_runs_tracked") == 0


def test_open_runs_never_expire() -> None:
    clock = Clock(0.0)
    sink = PrometheusSink(clock=clock, series_ttl=10.0)
    run = Run(Source(str(FLOW), source_labels(FLOW)), Thresholds())
    for ev in run.feed(FLOW.read_bytes()):
        sink.receive(ev)
    clock.now = 1e6
    assert one(series(sink), "ringtrace_run_open_scopes", run=FLOW.parts[-4]) == 5


def test_rewrite_replaces_the_run() -> None:
    clock = Clock(0.0)
    sink = PrometheusSink(clock=clock, series_ttl=100.0)
    path = str(PAGED)
    gen0, gen1 = Source(path, source_labels(PAGED), 0), Source(path, source_labels(PAGED), 1)
    for ev in events_of(PAGED.read_bytes(), gen0, 1 << 20, "rewritten"):
        sink.receive(ev)
    clock.now = 10.0
    wedge = FLOW.read_bytes()
    for ev in events_of(wedge, gen1, 1 << 20, "idle"):
        sink.receive(ev)
    # a late event of the old generation changes nothing
    sink.receive(events_of(PAGED.read_bytes(), gen0, 1 << 20)[1])
    s = series(sink)
    lab = dict(run=gen0.labels.run)
    assert one(s, "ringtrace_wedged_scopes", **lab) == 5
    assert one(s, "ringtrace_run_scopes", **lab) == 0
    assert one(s, "ringtrace_runs_tracked") == 1
    clock.now = 105.0  # the first generation's expiry entry must not remove the second
    assert one(series(sink), "ringtrace_wedged_scopes", **lab) == 5
    clock.now = 110.0
    assert not pick(series(sink), "ringtrace_wedged_scopes", **lab)


def test_same_labels_from_two_paths_expose_one_run() -> None:
    clock = Clock(0.0)
    sink = PrometheusSink(clock=clock)
    lab = Labels(run="same")
    for ev in events_of(PAGED.read_bytes(), Source("/a/same/scope_stats/scope_stats.jsonl", lab), 1 << 20):
        sink.receive(ev)
    clock.now = 5.0
    for ev in events_of(FLOW.read_bytes(), Source("/b/same/scope_stats/scope_stats.jsonl", lab), 1 << 20):
        sink.receive(ev)
    s = series(sink)
    assert one(s, "ringtrace_wedged_scopes", run="same") == 5  # the most recently updated one
    promtool = shutil.which("promtool")
    if promtool:
        res = subprocess.run([promtool, "check", "metrics"], input=generate_latest(sink.registry),
                             capture_output=True, timeout=60)
        assert res.returncode == 0, res.stdout.decode() + res.stderr.decode()
    clock.now = 9.0  # a newer open run with the same labels hides the finished ones until it finishes
    run = Run(Source("/c/same/scope_stats/scope_stats.jsonl", lab), Thresholds())
    for ev in run.feed(PAGED.read_bytes()[:5000]):
        sink.receive(ev)
    both = same_as_fresh(sink)
    assert b"ringtrace_run_verdict{" not in both and b"ringtrace_run_open_scopes{" in both
    assert b"/c/same/" in both and b"/b/same/" not in both
    for ev in run.finish("idle"):
        sink.receive(ev)
    assert b"/c/same/" in same_as_fresh(sink)


def test_memory_is_bounded_by_max_runs() -> None:
    clock = Clock(0.0)
    sink = PrometheusSink(clock=clock, max_runs=10)
    data = PAGED.read_bytes()
    rng = random.Random(1)
    open_runs = []
    for i in range(60):
        clock.now = float(i)
        src = Source(f"/runs/r{i}/scope_stats/scope_stats.jsonl", Labels(run=f"r{i}"))
        if rng.random() < 0.3:  # leave some open
            run = Run(src, Thresholds())
            for ev in run.feed(data[: len(data) // 2]):
                sink.receive(ev)
            open_runs.append(src)
        else:
            for ev in events_of(data, src, 1 << 20):
                sink.receive(ev)
        assert len(sink._runs) <= 10
    s = series(sink)
    assert one(s, "ringtrace_runs_tracked") == 10
    assert one(s, "ringtrace_runs_evicted_total") == 50
    assert len(pick(s, "ringtrace_run_scopes")) == 10
    assert pick(s, "ringtrace_run_scopes", run="r59")  # the newest survives


def test_progress_without_start_and_unknown_finish_do_not_raise() -> None:
    sink = PrometheusSink(clock=Clock())
    evs = events_of(PAGED.read_bytes(), Source("/x/y/scope_stats/scope_stats.jsonl", Labels(run="y")), 1 << 20)
    for ev in evs[1:]:  # no RunStarted
        sink.receive(ev)
    assert one(series(sink), "ringtrace_run_scopes", run="y") == 992
    sink.flush(math.inf)
    sink.close()


def test_awkward_site_names_stay_valid_exposition() -> None:
    """Sites come from file names: quotes, backslashes and non-ASCII must be escaped, not break the page."""
    site = 'we"ird\\name_\u00e9\u4e2d.cpp:7'
    meta = json.dumps(_meta(6, total=1))  # every record read: the scope left open is a wedge
    begin = json.dumps({"site": site, "phase": "begin", "depth": 1, "ring": 1, "task_window_start": 0,
                        "task_window_end": 1, "heap_start": 0, "heap_end": 8, "dep_pool_start": 1,
                        "dep_pool_end": 1, "tensormap": 0})
    sink = PrometheusSink(clock=Clock())
    for ev in events_of(f"{meta}\n{begin}\n".encode(), Source("/x/scope_stats.jsonl", Labels(run='r"un')), 1 << 20):
        sink.receive(ev)
    s = series(sink)
    assert [dict(k)["site"] for k in pick(s, "ringtrace_wedged_innermost_scope_info", run='r"un')] == [site]
    [verdict] = pick(s, "ringtrace_run_verdict", run='r"un')
    assert site in dict(verdict)["text"]
    parse_openmetrics(generate_openmetrics(sink.registry).decode())
    promtool = shutil.which("promtool")
    require(promtool is not None, "promtool not installed (Debian package prometheus)")
    assert promtool is not None
    res = subprocess.run([promtool, "check", "metrics"], input=generate_latest(sink.registry), capture_output=True,
                         timeout=60)
    assert res.returncode == 0, res.stdout.decode() + res.stderr.decode()
