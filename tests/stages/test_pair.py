"""Pairer unit tests: the exact pairing rules of issue 2, the metrics, peaks, wedges, memory."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from ringtrace.model.records import (
    RESOURCES,
    Abandoned,
    Meta,
    OpenScope,
    PairEvent,
    Record,
    RunSummary,
    Scope,
    UnmatchedEnd,
    Usage,
)
from ringtrace.stages.decode import Decoder
from ringtrace.stages.pair import DEPTH_CAP, CappedSummary, Pairer
from tests._support.collector import collected, deep_program
from tests._support.samples import SAMPLE_FILES
from tests._support.scope_stats import meta, read_lines, rec, with_totals


def _r(line: int, site: str, phase: str, depth: int, **kw: Any) -> Record:
    """A Record straight into the pairer (no decoder); counters (start, end) per resource."""
    tw, hp, dp = kw.get("tw", (0, 0)), kw.get("heap", (0, 0)), kw.get("dp", (1, 1))
    return Record(line, site, phase, depth, kw.get("ring", min(depth, 3)), tw[0], tw[1], hp[0], hp[1],  # type: ignore[arg-type]
                  dp[0], dp[1], kw.get("tm", 0))


def _push_all(recs: list[Record], p: Pairer | None = None) -> tuple[Pairer, list[object]]:
    p = p or Pairer()
    events: list[object] = []
    for r in recs:
        events.extend(p.push(r))
    return p, events


# -- the rules --------------------------------------------------------------------------------


def test_well_nested_pairs_with_parent_lines() -> None:
    p, ev = _push_all([_r(2, "root", "begin", 0), _r(3, "a", "begin", 1), _r(4, "b", "begin", 2),
                       _r(5, "b", "end", 2), _r(6, "c", "begin", 2), _r(7, "c", "end", 2), _r(8, "a", "end", 1),
                       _r(9, "root", "end", 0)])
    got = [(e.site, e.begin_line, e.end_line, e.parent_line) for e in ev if isinstance(e, Scope)]
    assert got == [("b", 4, 5, 3), ("c", 6, 7, 3), ("a", 3, 8, 2), ("root", 2, 9, 0)]
    assert len(ev) == 4
    s = p.summary()
    assert (s.scopes, s.unmatched_begins, s.unmatched_ends, s.wedged, s.records) == (4, 0, 0, (), 8)


def test_begin_closes_open_scopes_of_same_or_greater_depth() -> None:
    # a(1) b(2) c(3) open, then a begin at depth 2: c and b are unmatched begins (innermost first)
    p, ev = _push_all([_r(2, "a", "begin", 1), _r(3, "b", "begin", 2), _r(4, "c", "begin", 3),
                       _r(5, "d", "begin", 2)])
    assert ev == [Abandoned(OpenScope("c", 3, 3, 4), 5), Abandoned(OpenScope("b", 2, 2, 3), 5)]
    assert p.open_scopes == (OpenScope("a", 1, 1, 2), OpenScope("d", 2, 2, 5))
    assert p.unmatched_begins == 2


def test_begin_at_same_depth_same_site_abandons_the_previous_one() -> None:
    _p, ev = _push_all([_r(2, "a", "begin", 1), _r(3, "a", "begin", 1), _r(4, "a", "end", 1)])
    assert isinstance(ev[0], Abandoned) and ev[0].scope.line == 2 and ev[0].line == 3
    assert isinstance(ev[1], Scope) and (ev[1].begin_line, ev[1].end_line) == (3, 4)


def test_end_pops_deeper_scopes_then_pairs() -> None:
    p, ev = _push_all([_r(2, "a", "begin", 1), _r(3, "b", "begin", 2), _r(4, "c", "begin", 3),
                       _r(5, "a", "end", 1)])
    assert ev[:2] == [Abandoned(OpenScope("c", 3, 3, 4), 5), Abandoned(OpenScope("b", 2, 2, 3), 5)]
    assert isinstance(ev[2], Scope) and ev[2].site == "a" and ev[2].parent_line == 0
    assert p.open_scopes == () and (p.scopes, p.unmatched_begins, p.unmatched_ends) == (1, 2, 0)


def test_end_with_other_site_is_unmatched_and_leaves_the_stack() -> None:
    p, ev = _push_all([_r(2, "a", "begin", 1), _r(3, "x", "end", 1), _r(4, "a", "end", 1)])
    assert ev[0] == UnmatchedEnd("x", 1, 1, 3)
    assert isinstance(ev[1], Scope) and (ev[1].begin_line, ev[1].end_line) == (2, 4)
    assert (p.scopes, p.unmatched_ends, p.unmatched_begins) == (1, 1, 0)


def test_end_shallower_than_top_without_match_is_unmatched() -> None:
    # end at depth 1 while only depth 2 is open: pops it (unmatched begin), then no top at depth 1
    p, ev = _push_all([_r(2, "a", "begin", 0), _r(3, "b", "begin", 2), _r(4, "z", "end", 1)])
    assert ev == [Abandoned(OpenScope("b", 2, 2, 3), 4), UnmatchedEnd("z", 1, 1, 4)]
    assert p.open_scopes == (OpenScope("a", 0, 0, 2),)


def test_end_deeper_than_top_is_unmatched() -> None:
    p, ev = _push_all([_r(2, "a", "begin", 1), _r(3, "b", "end", 2)])
    assert ev == [UnmatchedEnd("b", 2, 2, 3)]
    assert p.open_scopes == (OpenScope("a", 1, 1, 2),)


def test_end_on_empty_stack_is_unmatched() -> None:
    p, ev = _push_all([_r(2, "a", "end", 1)])
    assert ev == [UnmatchedEnd("a", 1, 1, 2)] and p.unmatched_ends == 1


def test_dropped_end_pairs_later_same_site_sibling_end() -> None:
    """Sibling A's end and sibling B's begin dropped: A's begin pairs with B's end (the rule, not a guess)."""
    _p, ev = _push_all([_r(2, "x", "begin", 1, tw=(0, 0)), _r(3, "k", "begin", 2), _r(4, "k", "end", 2),
                       _r(7, "x", "end", 1, tw=(0, 9))])
    x = [e for e in ev if isinstance(e, Scope) and e.site == "x"]
    assert len(x) == 1 and (x[0].begin_line, x[0].end_line) == (2, 7)


# -- metrics ----------------------------------------------------------------------------------


def test_usage_formulas_per_resource() -> None:
    b = _r(2, "a", "begin", 1, tw=(3, 10), heap=(100, 400), dp=(5, 9))
    e = _r(3, "a", "end", 1, tw=(8, 14), heap=(300, 1000), dp=(7, 20))
    _, ev = _push_all([b, e])
    scope = ev[0]
    assert isinstance(scope, Scope)
    # high_water = end.R_end - begin.R_start; live_at_exit = end.R_end - end.R_start; alloc = end.R_end - begin.R_end
    assert scope.usage == (Usage(14 - 3, 14 - 8, 14 - 10), Usage(1000 - 100, 1000 - 300, 1000 - 400),
                           Usage(20 - 5, 20 - 7, 20 - 9))


def test_v4_scope_has_no_dep_pool_usage_and_no_dep_pool_peak() -> None:
    d = read_lines([meta(version=4, total=2), rec("a", "begin", 1, dp=None), rec("a", "end", 1, dp=None, tw=(0, 2))])
    assert isinstance(d.events[0], Scope) and d.events[0].usage[2] is None
    assert [p.resource for p in d.summary.peaks] == ["task_window", "heap"]


def test_peaks_are_maxima_per_ring_with_the_first_scope_reaching_them() -> None:
    lines = with_totals([
        rec("r", "begin", 0),
        rec("a", "begin", 1, heap=(0, 0)), rec("a", "end", 1, heap=(10, 50)),      # hw 50, live 40, alloc 50
        rec("b", "begin", 1, heap=(50, 50)), rec("b", "end", 1, heap=(60, 100)),   # hw 50 (tie: a stays), alloc 50
        rec("c", "begin", 1, heap=(100, 100)), rec("c", "end", 1, heap=(95, 110)),  # start backwards: dropped
        rec("d", "begin", 1, heap=(100, 130)), rec("d", "end", 1, heap=(100, 170)),  # hw 70 live 70 alloc 40
        rec("e", "begin", 2, heap=(0, 0), tm=7), rec("e", "end", 2, heap=(0, 5), tm=9),
        rec("f", "begin", 2, heap=(5, 5), tm=9), rec("f", "end", 2, heap=(5, 6), tm=3),
        rec("r", "end", 0),
    ], heap=[1000, 200, 10, 10])
    d = read_lines(lines)
    assert [p.reason for p in d.errors] == ["counter_backwards"]
    s = d.summary
    heap = {p.ring: p for p in s.peaks if p.resource == "heap"}
    h1 = heap[1]
    assert (h1.high_water, h1.high_water_site, h1.high_water_line) == (70, "d", 9)  # line of d's begin
    assert (h1.live_at_exit, h1.live_at_exit_site) == (70, "d")
    assert (h1.alloc, h1.alloc_site) == (50, "a")  # a and b both 50: the first reaching it
    assert h1.scopes == 3 and h1.capacity == 200 and h1.high_water_ratio == 70 / 200
    assert (heap[2].high_water, heap[2].high_water_site, heap[2].capacity) == (5, "e", 10)
    assert (heap[0].high_water, heap[0].scopes) == (0, 1)
    # tensormap: the value at every boundary record; the first record reaching the maximum
    assert (s.tensormap.peak, s.tensormap.peak_site, s.tensormap.capacity, s.tensormap.live) == (9, "e", 100, 0)


def test_first_scope_sets_the_peak_even_at_zero() -> None:
    _, _ = _push_all([])
    p, _ = _push_all([_r(2, "zero", "begin", 1), _r(3, "zero", "end", 1)])
    hp = next(x for x in p.summary().peaks if x.resource == "heap")
    assert (hp.high_water, hp.high_water_site, hp.scopes) == (0, "zero", 1)


def test_live_is_the_latest_sample_of_the_ring() -> None:
    p, _ = _push_all([_r(2, "a", "begin", 1, heap=(0, 10)), _r(3, "b", "begin", 2, heap=(0, 3)),
                      _r(4, "a", "begin", 1, heap=(4, 30))])
    live = {(x.ring, x.resource): x.live for x in p.summary().peaks}
    assert live[(1, "heap")] == 26 and live[(2, "heap")] == 3


def test_ring_without_paired_scope_has_zero_scopes() -> None:
    p, _ = _push_all([_r(2, "a", "begin", 1)])
    assert {x.scopes for x in p.summary().peaks} == {0}


# -- end of stream ----------------------------------------------------------------------------


def test_wedged_are_the_open_scopes_outermost_first_with_lines() -> None:
    lines = with_totals([rec("(unknown):0", "begin", 0), rec("a", "begin", 1), rec("b", "begin", 2),
                         rec("b", "end", 2), rec("c", "begin", 2), rec("d", "begin", 3)])
    s = read_lines(lines).summary
    assert s.wedged == (OpenScope("(unknown):0", 0, 0, 2), OpenScope("a", 1, 1, 3), OpenScope("c", 2, 2, 6),
                        OpenScope("d", 3, 3, 7))
    assert s.unmatched_begins == 0  # wedged scopes are not counted as unmatched begins
    assert s.complete


def test_live_summary_does_not_report_open_scopes_as_wedged() -> None:
    p, _ = _push_all([_r(2, "a", "begin", 1)])
    assert p.summary(finished=False).wedged == ()
    assert p.summary(finished=True).wedged == (OpenScope("a", 1, 1, 2),)


def test_complete_is_records_equal_total_minus_dropped() -> None:
    two = [rec("a", "begin", 1), rec("a", "end", 1)]
    assert read_lines([meta(total=5, dropped=3), *two]).summary.complete
    assert not read_lines([meta(total=5, dropped=2), *two]).summary.complete
    assert not read_lines([meta(), *two]).summary.complete  # no total: cannot say
    assert not read_lines(two).summary.complete  # no metadata
    # a bad line is not a record: the file is not complete
    assert not read_lines([meta(total=3), *two[:1], "garbage", *two[1:]]).summary.complete


def test_fatal_file_keeps_its_figures() -> None:
    s = read_lines([meta(fatal=True, total=2), rec("a", "begin", 1), rec("a", "end", 1, tw=(0, 4))]).summary
    assert s.meta is not None and s.meta.fatal and s.scopes == 1


# -- memory: O(depth), never O(file) -----------------------------------------------------------

_LINE = ('{{"site": "gen.cpp:{site}", "phase": "{phase}", "depth": {depth}, "ring": {ring}, '
         '"task_window_start": {t}, "task_window_end": {t}, "heap_start": {h}, "heap_end": {h}, '
         '"dep_pool_start": 1, "dep_pool_end": 1, "tensormap": 0}}\n')


def _stream(records: int, depth: int) -> Iterator[bytes]:
    """A well-nested stream: repeatedly open ``depth`` scopes and close them, in ~64 KiB chunks."""
    yield b'{"version": 6, "fatal": false, "dropped": 0, "total": %d, "task_window_max": [8, 8, 8, 8], ' \
          b'"heap_max": [64, 64, 64, 64], "dep_pool_max": [8, 8, 8, 8], "tensormap_max": 8}\n' % records
    buf: list[str] = []
    size = n = 0
    counter = 0
    while n < records:
        for phase, order in (("begin", range(depth)), ("end", range(depth - 1, -1, -1))):
            for d in order:
                counter += 1
                line = _LINE.format(site=d, phase=phase, depth=d, ring=min(d, 3), t=counter, h=counter * 8)
                buf.append(line)
                size += len(line)
                n += 1
        if size > 1 << 16:
            yield "".join(buf).encode()
            buf, size = [], 0
    yield "".join(buf).encode()


def test_long_stream_keeps_decoder_and_pairer_state_small() -> None:
    depth = 6
    dec, pairer = Decoder(), Pairer()
    max_stack = max_pending = chunks = 0
    for chunk in _stream(200_000, depth):
        chunks += 1
        for item in dec.feed(chunk):
            if isinstance(item, Record):
                pairer.push(item)  # events dropped on the floor, as a sink would after use
        max_stack = max(max_stack, len(pairer.open_scopes))
        max_pending = max(max_pending, dec.pending)
    dec.finish()
    s = pairer.summary()
    assert chunks > 100  # really streamed
    assert dec.records == pairer.records >= 200_000 and s.scopes == pairer.records // 2
    assert s.unmatched_begins == s.unmatched_ends == 0 and s.wedged == ()
    assert max_stack <= depth
    assert max_pending < 400  # at most one partial line is held back
    # the only containers that live across chunks are per ring, not per record
    assert len(dec._last) <= 4 and len(dec._raw_heap) <= 4 and len(pairer._rings) <= 4


def test_open_usage_is_measured_against_the_latest_record_of_the_ring() -> None:
    p, _ = _push_all([_r(2, "root", "begin", 0, tw=(0, 0)),
                      _r(3, "outer", "begin", 3, tw=(1, 2), heap=(0, 10)),
                      _r(4, "inner", "begin", 4, tw=(1, 5), heap=(0, 40)),
                      _r(5, "inner", "end", 4, tw=(2, 7), heap=(5, 70)),
                      _r(6, "inner2", "begin", 4, tw=(2, 7), heap=(5, 70))])
    usage = p.open_usage()
    assert len(usage) == len(p.open_scopes) == 3
    root, outer, inner2 = usage
    assert root[0] == Usage(0, 0, 0)  # ring 0 was only sampled at its begin
    assert outer[0] == Usage(7 - 1, 7 - 2, 7 - 2) and outer[1] == Usage(70 - 0, 70 - 5, 70 - 10)
    assert inner2[0] == Usage(5, 5, 0)
    v4 = Pairer()
    v4.push(Record(2, "a", "begin", 1, 1, 0, 0, 0, 0, None, None, 0))
    assert v4.open_usage()[0][2] is None


def test_scopes_say_which_peaks_they_set() -> None:
    """``Scope.sets`` on every sample: the running maxima per (ring, resource, figure), first scope
    reaching the maximum; the last setter of each bit is the scope the summary's peak names."""
    from tests._support.scopes import mark_peaks

    for path in SAMPLE_FILES:
        events: list[PairEvent] = []
        dec, pairer = Decoder(), Pairer()
        items = dec.feed(path.read_bytes()) + dec.finish()
        for item in items:
            if isinstance(item, Meta):
                pairer.meta = item
            elif isinstance(item, Record):
                events += pairer.push(item)
        scopes = [e for e in events if isinstance(e, Scope)]
        assert [sc.sets for sc in scopes] == [sc.sets for sc in mark_peaks(scopes)], path
        summary = pairer.summary()
        for p in summary.peaks:
            if not p.scopes:
                continue
            r = RESOURCES.index(p.resource)
            holder = [sc for sc in scopes if sc.ring == p.ring and sc.sets >> (3 * r) & 1][-1]
            assert holder.begin_line == p.high_water_line and holder.site == p.high_water_site, path


def test_a_scope_whose_begin_is_on_another_ring_names_that_ring() -> None:
    """Odd data (the runtime keeps a scope on one ring): the pairer pairs by depth and site, the
    figures count on the end's ring, and ``begin_ring`` tells the exporters where the begin was."""
    from tests._support.scopes import mark_peaks

    recs = [_r(2, "a", "begin", 1, ring=1), _r(3, "a", "end", 1, ring=2, tw=(0, 2)),
            _r(4, "b", "begin", 1, ring=2, tw=(0, 2)), _r(5, "b", "end", 1, ring=2, tw=(0, 3)),
            _r(6, "c", "begin", 1, ring=1, tw=(0, 3)), _r(7, "c", "end", 1, ring=2, tw=(0, 9))]
    _, events = _push_all(recs)
    scopes = [e for e in events if isinstance(e, Scope)]
    assert [(sc.site, sc.ring, sc.begin_ring) for sc in scopes] == [("a", 2, 1), ("b", 2, None), ("c", 2, 1)]
    assert [sc.sets for sc in scopes] == [sc.sets for sc in mark_peaks(scopes)]  # the same peak rule
    assert scopes[0].sets == (1 << 9) - 1 and scopes[2].sets & 1  # the ring's first scope; c's high water


# -- the collector's depth cap (64 open scopes) ------------------------------------------------


def _capped(depth: int) -> tuple[Pairer, list[PairEvent]]:
    """``tests._support.collector.deep_program(depth)`` as the collector writes it, read by the decoder and paired."""
    d = read_lines(with_totals(collected(deep_program(depth)), task_window=1024, heap=4096, dep_pool=1024))
    return d.pairer, d.events


def test_seventy_deep_nesting_counts_only_the_scopes_closed_before_depth_63() -> None:
    p, ev = _capped(70)
    s = p.summary()
    assert isinstance(s, CappedSummary) and s.max_depth == DEPTH_CAP == 63
    assert s.depth_cap_line == 67  # line 67: chain:63 begins (root 2, pre 3-4, chain:1.. from 5)
    scopes = [e for e in ev if isinstance(e, Scope)]
    assert (s.scopes, s.uncounted, s.unmatched_begins, s.unmatched_ends, s.wedged) == (66, 65, 0, 0, ())
    assert len(scopes) == 66 and all(e.sets == 0 for e in scopes if e.end_line >= 67)
    # the ring figures come from 'pre' alone (its 400 bytes), not from the shifted pairs nor from
    # 'post' (900 bytes, which would make ring 1's heap 1308 of 4096)
    heap1 = next(q for q in s.peaks if (q.ring, q.resource) == (1, "heap"))
    assert (heap1.scopes, heap1.high_water, heap1.high_water_site, heap1.alloc, heap1.alloc_site) == \
        (1, 400, "pre", 400, "pre")
    assert {q.ring for q in s.peaks if q.scopes} == {1}  # rings 0, 2, 3 closed scopes only past the cap
    assert all(q.high_water == q.alloc == q.live_at_exit == q.pinned == q.request == 0
               for q in s.peaks if q.ring != 1)
    live3 = next(q for q in s.peaks if (q.ring, q.resource) == (3, "heap"))
    assert live3.live == (68 - 3 + 1) * 8 + 600  # raw samples stay: ring 3's latest record saw every ring-3 block


def test_nesting_under_the_cap_is_paired_and_counted_as_before() -> None:
    p, _ = _capped(64)  # depths 0..63: the deepest begin is kept, nothing shifts, but the cap was reached
    assert isinstance(p.summary(), CappedSummary) and p.depth_cap_line == 67
    p, ev = _capped(63)  # depths 0..62: never at the cap
    s = p.summary()
    assert type(s) is RunSummary and p.depth_cap_line == 0 and p.uncounted == 0
    heap1 = next(q for q in s.peaks if (q.ring, q.resource) == (1, "heap"))
    assert (heap1.high_water, heap1.high_water_site) == (400 + 8 + 900, "post")  # 'post' counts here
    assert s.scopes == sum(isinstance(e, Scope) for e in ev) == 65 and {q.ring for q in s.peaks if q.scopes} == \
        {0, 1, 2, 3}


def test_the_cap_line_is_the_first_record_at_depth_63_also_within_one_batch() -> None:
    recs = [_r(2, "root", "begin", 0), _r(3, "a", "begin", 1), _r(4, "a", "end", 1, tw=(0, 3)),
            _r(5, "x", "begin", 63), _r(6, "x", "end", 63, tw=(0, 9)), _r(7, "y", "begin", 63),
            _r(8, "root", "end", 0, tw=(0, 20))]
    p = Pairer()
    ev = p.push_many(recs)
    assert p.depth_cap_line == 5 and p.uncounted == 2
    s = p.summary()
    assert isinstance(s, CappedSummary) and (s.depth_cap_line, s.uncounted, s.scopes) == (5, 2, 3)
    assert [e.sets != 0 for e in ev if isinstance(e, Scope)] == [True, False, False]
    assert next(q for q in s.peaks if (q.ring, q.resource) == (1, "task_window")).high_water == 3
