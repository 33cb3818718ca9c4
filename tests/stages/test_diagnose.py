"""Diagnosis rules on the real failed samples and on realistic synthetic runs.

Every run goes through ``Run`` (decoder + pairer + diagnose), as the commands do.
"""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from typing import Any

import pytest

from ringtrace.cli import main
from ringtrace.config import Thresholds
from ringtrace.model.records import RESOURCES, Finding, RunFinished, Source
from ringtrace.stages.diagnose import diagnose, likely_error
from ringtrace.stages.run import Run
from tests._support.collector import collected, deep_program
from tests._support.samples import SAMPLES
from tests._support.scope_stats import Line, encode_lines, meta, rec, with_totals

FLOW = SAMPLES / "failed/NestedScopes_window4_flow_control_deadlock"
HEAP = SAMPLES / "failed/HeapRingDeadlock/dfx_outputs/scope_stats/scope_stats.jsonl"


def finish(data: bytes, th: Thresholds | None = None) -> RunFinished:
    run = Run(Source("test.jsonl"), th)
    run.feed(data)
    fin = run.finish("eof")[-1]
    assert isinstance(fin, RunFinished)
    return fin


def findings(lines: Sequence[Line], th: Thresholds | None = None) -> dict[str, Finding]:
    """Findings by rule (asserting each rule fires at most once unless it is per ring)."""
    fin = finish(encode_lines(lines), th)
    return {f.rule + ("" if f.resource is None else f":{f.ring}:{f.resource}"): f for f in fin.findings}


def rules(lines: Sequence[Line], th: Thresholds | None = None) -> list[str]:
    return [f.rule for f in finish(encode_lines(lines), th).findings]


# -- wedges on the real failed samples ---------------------------------------------------------


def test_flow_control_sample_names_code_3_as_its_host_log_does() -> None:
    host = (FLOW / "host.log").read_text()
    logged = re.search(r"orch_error_code=(\d+) ([A-Z_]+) -", host)
    assert logged is not None and logged.groups() == ("3", "FLOW_CONTROL_DEADLOCK")
    fin = finish((FLOW / "dfx_outputs/scope_stats/scope_stats.jsonl").read_bytes())
    wedged = fin.findings[0]
    assert (wedged.rule, wedged.severity, wedged.ring, wedged.resource, wedged.site) == \
        ("wedged", "error", 3, "task_window", "nested_dummy_small_orch.cpp:75")
    assert f"orch_error_code={logged[1]} {logged[2]}" in wedged.message
    assert "line 6" in wedged.message and "5 scope(s) never closed" in wedged.message
    assert "75% of capacity" in wedged.message  # 3 of 4 slots at the last sample
    assert '"fatal" is false' in wedged.message
    # the host log's own figures: task ring 3 active=3/4
    assert "Task ring 3: current=3, last_alive=0, active=3/4" in host


def test_heap_ring_deadlock_sample_blames_nothing_but_lists_the_tiny_heap() -> None:
    fin = finish(HEAP.read_bytes())
    assert [f.rule for f in fin.findings] == ["wedged"]
    msg = fin.findings[0].message
    assert "orch_error_code=" in msg and "Likely" not in msg  # all counters were 0 at the only sample
    assert "(unknown):0" in msg and "heap 1.0 KiB" in msg


# -- wedges: which orch_error_code -------------------------------------------------------------


def _wedge(last: list[dict[str, Any]], **caps: Any) -> Finding:
    lines = with_totals([rec("(unknown):0", "begin", 0), rec("l1", "begin", 1), rec("l2", "begin", 2), *last],
                        **caps)
    fin = finish(encode_lines(lines))
    w = [f for f in fin.findings if f.rule == "wedged"]
    assert len(w) == 1
    return w[0]


def test_scope_deadlock_when_the_wedged_scope_alone_fills_the_task_window() -> None:
    # depth-3 scope submits 7 of 8 slots itself; its depth-4 children closed; it wedged submitting more
    w = _wedge([rec("big", "begin", 3, tw=(0, 0)),
                rec("kid", "begin", 4, tw=(0, 3)), rec("kid", "end", 4, tw=(0, 5)),
                rec("kid", "begin", 4, tw=(0, 6)), rec("kid", "end", 4, tw=(0, 7))], task_window=8)
    assert "orch_error_code=1 SCOPE_DEADLOCK" in w.message
    assert "allocated 7 of the ring 3 task window's 8 slots" in w.message
    assert (w.site, w.ring, w.resource) == ("big", 3, "task_window")


def test_flow_control_when_an_outer_scope_on_the_same_ring_holds_the_window() -> None:
    # same, but it wedged inside a new child: the outer scope holds the slots, the child cannot submit
    w = _wedge([rec("big", "begin", 3, tw=(0, 0)),
                rec("kid", "begin", 4, tw=(0, 3)), rec("kid", "end", 4, tw=(0, 5)),
                rec("kid", "begin", 4, tw=(0, 7))], task_window=8)
    assert "orch_error_code=3 FLOW_CONTROL_DEADLOCK" in w.message
    assert (w.site, w.ring) == ("kid", 3)


def test_task_window_full_with_one_open_scope_on_the_ring_without_usage_is_scope_deadlock() -> None:
    lines = with_totals([rec("(unknown):0", "begin", 0), rec("a", "begin", 1, tw=(0, 7))], task_window=8)
    run = Run(Source("x"))
    run.feed(encode_lines(lines))
    s = run.summary(finished=True)
    code, peak, ratio = likely_error(s, s.wedged[-1])
    assert (code, peak.resource if peak else None, ratio) == (1, "task_window", 7 / 8)
    assert "orch_error_code=1 SCOPE_DEADLOCK" in diagnose(s)[0].message


def test_heap_ring_deadlock_when_heap_is_the_full_one() -> None:
    w = _wedge([rec("hot", "begin", 3, tw=(0, 2), heap=(0, 900))], heap=1024, task_window=16)
    assert "orch_error_code=2 HEAP_RING_DEADLOCK" in w.message
    assert "ring 3 heap at 88% of capacity" in w.message
    assert (w.site, w.ring, w.resource) == ("hot", 3, "heap")


def test_dep_pool_overflow_when_dep_pool_is_the_full_one() -> None:
    w = _wedge([rec("fan", "begin", 3, tw=(0, 2), heap=(0, 10), dp=(1, 60))], dep_pool=64)
    assert "orch_error_code=4 DEP_POOL_OVERFLOW" in w.message and w.resource == "dep_pool"


def test_tensormap_overflow_when_the_tensormap_is_near_full() -> None:
    w = _wedge([rec("tm", "begin", 3, tm=95)], tensormap=100)
    assert "orch_error_code=11 TENSORMAP_OVERFLOW" in w.message and "tensormap at 95%" in w.message


def test_low_fill_is_not_blamed_and_wedge_threshold_is_settable() -> None:
    last = [rec("x", "begin", 3, heap=(0, 300))]
    lines = with_totals([rec("(unknown):0", "begin", 0), *last], heap=1024)
    fin = finish(encode_lines(lines))
    assert "Likely" not in fin.findings[0].message and "heap 1.0 KiB" in fin.findings[0].message
    fin = finish(encode_lines(lines), Thresholds(wedge=0.25))
    assert "orch_error_code=2 HEAP_RING_DEADLOCK" in fin.findings[0].message


def test_shutdown_is_not_a_wedge() -> None:
    run = Run(Source("x"))
    run.feed(encode_lines(with_totals([rec("a", "begin", 1)])))
    fin = run.finish("shutdown")[-1]
    assert isinstance(fin, RunFinished) and fin.summary.wedged == ()
    assert "wedged" not in [f.rule for f in fin.findings]


# -- the other rules ---------------------------------------------------------------------------

TWO = [rec("a", "begin", 1), rec("a", "end", 1, tw=(0, 1))]


def test_dropped_is_a_warning_and_explains_unmatched() -> None:
    lines = [meta(total=5, dropped=2), rec("a", "begin", 1), rec("a", "end", 1), rec("b", "end", 1)]
    fs = findings(lines)
    assert fs["dropped"].severity == "warning" and "2 records were dropped" in fs["dropped"].message
    assert "lower bounds" in fs["dropped"].message
    assert "unmatched" not in fs  # explained by the drops


def test_unmatched_without_drops_is_a_warning() -> None:
    fs = findings(with_totals([*TWO, rec("b", "end", 1, tw=(0, 1))]))
    assert "0 begins and 1 ends did not pair" in fs["unmatched"].message


def test_fatal_is_an_error() -> None:
    fs = findings([meta(fatal=True, total=2), *TWO])
    assert fs["fatal"].severity == "error" and '"fatal": true' in fs["fatal"].message


def test_a_cut_file_is_cut_short_never_a_wedge() -> None:
    """Fewer records than the metadata's total - dropped: the file is cut; its open scopes are not a wedge and
    no error code is guessed (told apart from a wedged run by the total)."""
    fin = finish(encode_lines([meta(total=10), *TWO]))
    fs = {f.rule: f for f in fin.findings}
    assert fs["cut_short"].severity == "error" and "2 of the 10 records" in fs["cut_short"].message
    cut = finish(encode_lines([meta(total=10), rec("(unknown):0", "begin", 0), rec("a", "begin", 1, tw=(0, 15))]))
    assert [f.rule for f in cut.findings] == ["cut_short"] and not cut.summary.wedged
    assert cut.verdict.kind == "cut_short" and cut.verdict.code is None and "8 of its records missing" in \
        cut.verdict.text
    wedged = finish(encode_lines(with_totals([rec("(unknown):0", "begin", 0), rec("a", "begin", 1, tw=(0, 15))])))
    assert wedged.verdict.kind == "wedged" and "cut_short" not in [f.rule for f in wedged.findings]


def test_parse_errors_are_a_warning() -> None:
    fs = findings([meta(total=2), TWO[0], "oops", TWO[1]])
    assert "1 lines could not be read" in fs["parse_errors"].message


def test_near_capacity_and_no_headroom_rest_on_a_proven_need() -> None:
    """A scope's own tasks hold their blocks until it exits: that is a need; 900 B of 1 KiB is near capacity,
    1 KiB of 1 KiB (an allocation as large as the ring fits an empty ring) is no headroom: warnings, never
    'the ring deadlocks', and the run completed."""
    fs = findings(with_totals([rec("big", "begin", 2, heap=(0, 0)), rec("big", "end", 2, heap=(0, 900))],
                              heap=1024))
    f = fs["near_capacity:2:heap"]
    assert f.severity == "warning" and "a need of 900 B of 1.0 KiB (88%)" in f.message and "ring 2 heap" in f.message
    fin = finish(encode_lines(with_totals([rec("big", "begin", 2, heap=(0, 0)), rec("big", "end", 2, heap=(0, 1024))],
                                          heap=1024)))
    f = next(x for x in fin.findings if x.rule == "no_headroom")
    assert f.severity == "warning" and "deadlock" not in f.message and "raise ring_heap" in f.message
    assert (fin.verdict.kind, fin.verdict.severity, fin.verdict.ring, fin.verdict.resource) == \
        ("no_headroom", "warning", 2, "heap")


def test_occupancy_is_never_a_need() -> None:
    """What a ring still holds at a scope exit, or its high water, is not a need: the runtime reclaims only when
    the allocator has to wait, so on an oversized ring nothing is reclaimed (guide §5).  12 slots held before the
    scope began, 14 at its exit: the scope's own 2 tasks are the need; no warning."""
    fin = finish(encode_lines(with_totals([rec("load", "begin", 1, tw=(0, 12)), rec("load", "end", 1, tw=(0, 14))],
                                          task_window=16)))
    assert fin.findings == () and fin.verdict.kind == "healthy"
    assert "a proven need of 3" not in fin.verdict.text and "ring 1 task_window 3 of 16" in fin.verdict.text
    streaming = finish(encode_lines(with_totals([rec("s", "begin", 1, heap=(0, 0)),
                                                 rec("s", "end", 1, heap=(850, 900))], heap=1024)))
    assert streaming.verdict.kind == "near_capacity"  # its own 900 B were held until it exited


def test_children_streaming_through_a_scope_is_not_its_need() -> None:
    """A depth-3 scope whose depth-4 children (same ring) stream 3x the ring through it: each child's 500 B is
    held only until the child exits."""
    recs = [rec("outer", "begin", 3, heap=(0, 0))]
    for i in range(6):
        recs += [rec("kid", "begin", 4, heap=(i * 500, i * 500)), rec("kid", "end", 4, heap=(i * 500, i * 500 + 500))]
    recs.append(rec("outer", "end", 3, heap=(3000, 3000)))
    fs = findings(with_totals(recs, heap=1024))
    assert "near_capacity:3:heap" not in fs and "no_headroom:3:heap" not in fs
    assert fs["deep_nesting"].severity == "info"


def test_a_tight_ring_that_streams_gets_no_alarm_from_its_occupancy() -> None:
    """The PagedAttention 'tight' sample: 15 of 16 slots held at exits and scopes at 119% high water is the
    allocator doing its job; its scopes' own 4 tasks (a need of 5) are what the records prove."""
    data = (SAMPLES / "outputs/TestPagedAttention_big16x2048_tight_20261130_101530/scope_stats/"
            "scope_stats.jsonl").read_bytes()
    fin = finish(data)
    assert not [f for f in fin.findings if f.ring == 2 and f.resource == "task_window"]
    assert fin.verdict.kind == "healthy" and "ring 2 task_window 5 of 16 (31%)" in fin.verdict.text
    assert "reclaim" not in fin.verdict.text and "tight" not in fin.verdict.text  # a wrap proves no headroom either
    assert all(a.basis != "tight" for a in (fin.advice.advice if fin.advice else ()))  # lazy reclaim is no finding


def test_auto_scope_collapse_when_one_ring_carries_the_load() -> None:
    lines = with_totals([rec("(unknown):0", "begin", 0), rec("f", "begin", 1), rec("l", "begin", 2),
                         rec("deep", "begin", 3, heap=(0, 0)), rec("deep", "end", 3, heap=(0, 950)),
                         rec("l", "end", 2), rec("f", "end", 1), rec("(unknown):0", "end", 0)], heap=1024)
    fs = findings(lines)
    f = fs["auto_scope_collapse:3:heap"]
    assert f.severity == "warning" and "ring 3 carries the heap need the records prove (a proven need of 93% of its "\
        "capacity)" in f.message
    assert "rings 0, 1, 2 carry none" in f.message


def test_no_collapse_where_a_ring_sized_to_its_need_is_full_and_another_carries_more() -> None:
    """The issue's run at its ring 1 heap minimum: ring 1 is full only because it was sized to its need (3 of 3
    KiB), while ring 2 carries a larger proven need (5 KiB) on a larger ring: the load is not on one ring."""
    lines = with_totals([rec("f", "begin", 1, heap=(0, 0)), rec("g", "begin", 2, heap=(0, 0)),
                         rec("g", "end", 2, heap=(0, 5 * 1024)), rec("f", "end", 1, heap=(0, 3 * 1024))],
                        heap=(1 << 20, 3 * 1024, 1 << 20, 1 << 20))
    assert "auto_scope_collapse" not in rules(lines)


def test_no_collapse_when_another_ring_is_busy() -> None:
    lines = with_totals([rec("f", "begin", 1, heap=(0, 0)), rec("deep", "begin", 3, heap=(0, 0)),
                         rec("deep", "end", 3, heap=(0, 950)), rec("f", "end", 1, heap=(0, 300))], heap=1024)
    assert "auto_scope_collapse" not in rules(lines)


def test_idle_threshold_is_settable() -> None:
    lines = with_totals([rec("f", "begin", 1, heap=(0, 0)), rec("deep", "begin", 3, heap=(0, 0)),
                         rec("deep", "end", 3, heap=(0, 950)), rec("f", "end", 1, heap=(0, 100))], heap=1024)
    assert "auto_scope_collapse" not in rules(lines)  # ring 1's need (100) is over 5% of ring 3's (950)
    assert "auto_scope_collapse" in rules(lines, Thresholds(idle=0.11))  # ... and under 11% of it


def test_deep_nesting_info_and_warning_when_ring_3_is_loaded() -> None:
    light = with_totals([rec("a", "begin", 4), rec("a", "end", 4)])
    f = findings(light)["deep_nesting"]
    assert f.severity == "info" and "nest 4 deep" in f.message
    heavy = with_totals([rec("a", "begin", 5, tw=(0, 0)), rec("a", "end", 5, tw=(0, 15))], task_window=16)
    f = next(f for f in finish(encode_lines(heavy)).findings if f.rule == "deep_nesting")
    assert f.severity == "warning" and "ring 3's task_window need is near its capacity" in f.message


def test_near_threshold_is_settable() -> None:
    lines = with_totals([rec("s", "begin", 1, heap=(0, 0)), rec("s", "end", 1, heap=(0, 400))], heap=1024)
    assert rules(lines) == []
    assert rules(lines, Thresholds(near=0.3)) == ["near_capacity"]  # 400 B held by one scope of a 1 KiB ring


def test_tensormap_near_capacity() -> None:
    f = findings(with_totals([rec("t", "begin", 1, tm=85), *TWO], tensormap=100))["near_capacity:None:tensormap"]
    assert f.severity == "warning" and "tensormap peaked at 85 of 100 entries (85%) at t" in f.message


def test_findings_are_sorted_most_severe_first() -> None:
    lines = [meta(fatal=True, dropped=1, total=4), rec("a", "begin", 4), rec("a", "end", 4), rec("b", "begin", 1)]
    sev = [f.severity for f in finish(encode_lines(lines)).findings]
    assert sev == sorted(sev, key=["error", "warning", "info"].index) and sev[0] == "error"


@pytest.mark.parametrize("path", sorted(SAMPLES.rglob("*.jsonl")), ids=lambda p: p.parts[-4])
def test_every_finding_on_the_samples_names_its_site_ring_and_resource(path: Any) -> None:
    for f in finish(path.read_bytes()).findings:
        if f.site is not None:
            assert f.site in f.message
        if f.ring is not None and f.rule != "deep_nesting":
            assert f"ring {f.ring}" in f.message
        if f.resource is not None and f.rule != "wedged":
            assert f.resource in f.message


def test_otlp_wedged_event_names_the_same_code_as_the_finding() -> None:
    """The innermost wedged span's event uses the run's wedged finding (here SCOPE_DEADLOCK through the
    scope's own usage, which ``likely_error`` without usage would call FLOW_CONTROL or nothing)."""
    from ringtrace.sinks.otlp._spans import _wedged_event

    lines = with_totals([rec("(unknown):0", "begin", 0), rec("l1", "begin", 1), rec("l2", "begin", 2),
                         rec("big", "begin", 3, tw=(0, 0)), rec("kid", "begin", 4, tw=(0, 3)),
                         rec("kid", "end", 4, tw=(0, 5)), rec("kid", "begin", 4, tw=(0, 6)),
                         rec("kid", "end", 4, tw=(0, 7))], task_window=8)
    fin = finish(encode_lines(lines))
    finding = next(f for f in fin.findings if f.rule == "wedged")
    assert (finding.code, finding.resource) == (1, "task_window")
    event = dict(_wedged_event(fin.summary.wedged[-1], fin.wedge_causes[-1], 0).attrs)
    assert event["ringtrace.orch_error_code"] == 1
    assert event["ringtrace.orch_error"] == "SCOPE_DEADLOCK"
    assert event["ringtrace.resource"] == "task_window"
    assert event["ringtrace.fill_ratio"] == finding.fill == 7 / 8


# -- the collector's depth cap and capacities of 0 -----------------------------------------------


def _deep(depth: int, post: int) -> list[Line]:
    return with_totals(collected(deep_program(depth, post=post)), task_window=1024, heap=4096, dep_pool=1024)


def test_depth_cap_is_a_warning_naming_the_line_and_no_made_up_peak_is_reported() -> None:
    # 'post' holds 3500 of ring 1's 4096 bytes after the chain: counted, that is a near_capacity warning
    fin = finish(encode_lines(_deep(70, post=3500)))
    cap = next(f for f in fin.findings if f.rule == "depth_cap")
    assert cap.severity == "warning"
    assert "depth 63 first reached at line 67" in cap.message and "The 65 scope(s) that closed at or after line 67 " \
        "are not counted in the peaks" in cap.message
    assert [f.rule for f in fin.findings if f.severity == "error"] == [] and not fin.summary.wedged
    assert "near_capacity" not in {f.rule for f in fin.findings}
    heap1 = next(p for p in fin.summary.peaks if (p.ring, p.resource) == (1, "heap"))
    assert (heap1.high_water, heap1.high_water_site) == (400, "pre")


def test_no_depth_cap_under_the_cap_and_the_same_scope_is_counted() -> None:
    fin = finish(encode_lines(_deep(63, post=3500)))
    assert "depth_cap" not in {f.rule for f in fin.findings}
    near = next(f for f in fin.findings if f.rule == "near_capacity")
    assert (near.severity, near.ring, near.resource) == ("warning", 1, "heap")  # 'post' held 3500 of 4096


def test_a_metadata_line_with_every_capacity_0_and_no_records_is_unknown_capacities_and_no_run(
        write_jsonl: Any, capsys: pytest.CaptureFixture[str]) -> None:
    """A runtime that never sets capacities (the host-built-graph runtime): 0 is unknown, never full.  With no
    record the file is read in full, but it is never a completed run: check fails it (the verdict is cut_short)."""
    lines = with_totals([], task_window=0, heap=0, dep_pool=0, tensormap=0)
    fin = finish(encode_lines(lines))
    s = fin.summary
    assert s.complete and s.records == 0 and not s.wedged and fin.findings == ()
    assert [p.severity for p in fin.problems] == ["warning"]  # "metadata line only": a note, not an error
    assert s.meta is not None and all(s.meta.capacity(r, ring) is None for r in RESOURCES for ring in range(4))
    path = write_jsonl(lines)
    assert main(["summary", "--format", "json", str(path)]) == 0
    f = json.loads(capsys.readouterr().out)["files"][0]
    assert (f["complete"], f["wedged"], f["findings"], f["rings"]) == (True, [], [], [])
    assert f["tensormap"]["capacity"] is None
    assert f["verdict"]["kind"] == "cut_short"
    assert main(["check", str(path)]) == 1
    out = capsys.readouterr().out
    assert f"FAIL {path}" in out and "no scope records" in out and f"ok {path}" not in out


def test_zero_capacities_of_the_host_built_graph_runtime_are_unknown_not_full(write_jsonl: Any,
                                                                            capsys: pytest.CaptureFixture[str]
                                                                            ) -> None:
    """Ring 0 everywhere, every *_start 0, only index 0 of the capacity arrays set (the others 0): the
    figures are measured against index 0's capacities, and nothing reads a 0 as a full ring."""
    lines = with_totals([rec("(unknown):0", "begin", 0, ring=0),
                         rec("a", "begin", 1, ring=0, tw=(0, 1), heap=(0, 100)),
                         rec("a", "end", 1, ring=0, tw=(0, 5), heap=(0, 500), dp=(1, 3)),
                         rec("(unknown):0", "end", 0, ring=0, tw=(0, 6), heap=(0, 600), dp=(1, 4))],
                        task_window=[0, 0, 0, 0], heap=[4096, 0, 0, 0], dep_pool=[64, 0, 0, 0], tensormap=0)
    fin = finish(encode_lines(lines))
    assert fin.findings == ()
    peaks = {p.resource: p for p in fin.summary.peaks}
    assert {p.ring for p in fin.summary.peaks} == {0} and set(peaks) == set(RESOURCES)
    tw = peaks["task_window"]  # 6 tasks against a capacity of 0: unknown, not 600% of a full ring
    assert (tw.capacity, tw.high_water, tw.high_water_ratio, tw.alloc_ratio, tw.live_ratio) == (None, 6, None, None,
                                                                                                None)
    assert (peaks["heap"].capacity, peaks["heap"].high_water_ratio) == (4096, 600 / 4096)
    path = write_jsonl(lines)
    assert main(["check", "--max-ratio", "0.1", str(path)]) == 1  # the heap (15%) fails the gate, the window cannot
    out = capsys.readouterr().out
    assert "FAIL" in out and "ring 0 heap: a proven need of 600 B is 14.6% of capacity" in out
    assert "task_window" not in out
