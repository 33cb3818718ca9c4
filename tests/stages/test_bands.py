"""The bands (``ringtrace.stages.bands``): bounded series whose columns are exactly the extremes of their samples.

The oracle is plain grouping: the samples whose ``x >> shift`` is the same, their first x, least and greatest
value and the first sample at the greatest.  Whatever the chunks, a series is that grouping at its final shift
with at most ``2 * width`` columns; a run's bands are that grouping of its records' occupancy and tensormap and
its scopes' high water.  That the compiled core folds the same bands is ``test_core.py``'s.
"""

from __future__ import annotations

import itertools
import random
from collections.abc import Sequence
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from ringtrace.model.records import RESOURCES, Band, Record, RunFinished, RunProgress, Scope, Source, Wants
from ringtrace.stages.bands import Series
from ringtrace.stages.run import Run
from tests._support.mixed import chunks, cuts
from tests._support.samples import SAMPLES

Sample = tuple[int, int, Any]


def grouped(samples: Sequence[Sample], shift: int) -> list[list[Any]]:
    """The columns of ``samples`` (x increasing) at ``shift``, as a series keeps them."""
    out: list[list[Any]] = []
    for _, group in itertools.groupby(samples, key=lambda s: s[0] >> shift):
        g = list(group)
        hi = max(v for _, v, _ in g)
        x_hi, _, tag = next(s for s in g if s[1] == hi)
        out.append([g[0][0], min(v for _, v, _ in g), hi, x_hi, tag])
    return out


@st.composite
def samples(draw: st.DrawFn) -> list[Sample]:
    xs = sorted(draw(st.lists(st.integers(1, 5000), max_size=300)))
    return [(x, draw(st.integers(-3, 40)), i) for i, x in enumerate(xs)]


@settings(max_examples=300, deadline=None)
@given(samples(), st.integers(1, 9), st.integers(1, 64), st.randoms(use_true_random=False))
def test_a_series_is_the_extremes_of_its_samples_whatever_the_chunks(
        ss: list[Sample], width: int, span: int, rnd: random.Random) -> None:
    one, many = Series(width, span), Series(width, span)
    for x, v, tag in ss:
        one.add(x, v, tag)
    for a, b in itertools.pairwise([0, *cuts(rnd, len(ss)), len(ss)]):
        piece = ss[a:b]
        many.extend([s[0] for s in piece], [s[1] for s in piece], [s[2] for s in piece])
    assert (many.shift, many.cols) == (one.shift, one.cols)
    assert one.shift >= max(0, (span - 1).bit_length())
    assert one.cols == grouped(ss, one.shift)
    assert len(one.cols) <= max(1, 2 * width)
    x_max = ss[-1][0] if ss else 1
    for want in (width, 3, 1):
        cols = one.columns(x_max, want)
        assert cols == grouped(ss, one.shift) and len(cols) <= want


def test_a_band_is_a_series_again() -> None:
    band = Band(0, 1, 3, ((2, 0, 5, 4, "a.cpp:1", 1, 0), (9, 1, 7, 9, "b.cpp:2", 2, 0)))
    s = Series.of(band, 4)
    assert (s.shift, s.cols, s.width) == (3, [list(c) for c in band.columns], 4)
    assert s.columns(9, 1) == [[2, 0, 7, 9, "b.cpp:2", 2, 0]]  # merged: the greatest carries its site and depth


def _tag(x: Record | Scope) -> tuple[str, int, int]:
    return (x.site, x.depth, x.begin_line if isinstance(x, Scope) else 0)


def _check(band: Band, ss: list[tuple[int, int, Record | Scope]], width: int) -> None:
    """``band`` is the grouping of ``ss`` at its shift, within ``2 * width`` columns."""
    want = [[*c[:4], *_tag(c[4])] for c in grouped(ss, band.shift)]
    assert [list(c) for c in band.columns] == want, (band.ring, band.resource)
    assert 0 < len(band.columns) <= 2 * width


def _occupancy(r: Record, resource: int) -> int:
    if resource == 0:
        return r.task_window_end - r.task_window_start
    if resource == 1:
        return r.heap_end - r.heap_start
    return (r.dep_pool_end or 0) - (r.dep_pool_start or 0)


def test_a_runs_bands_are_its_records_and_scopes_grouped() -> None:
    """Real files on the pure path: every band is the grouping of the records' occupancy (the dep pool where a
    record has one) and tensormap, and of the scopes' high water, per ring and resource."""
    files = sorted(SAMPLES.rglob("scope_stats.jsonl"))
    assert files
    for path, width in itertools.product(files, (600, 4)):
        run = Run(Source(str(path)), wants=Wants(records=True, events=True, bands=width), compiled=False)
        data = path.read_bytes()
        events = [e for piece in chunks(data, list(range(7000, len(data), 7000))) for e in run.feed(piece)]
        events += run.finish("eof")
        recs = [r for e in events if isinstance(e, RunProgress) for r in e.records]
        scopes = [s for e in events if isinstance(e, RunProgress) for s in e.events if type(s) is Scope]
        [fin] = [e for e in events if isinstance(e, RunFinished)]
        b = fin.bands
        assert b is not None and b.width == width and (b.first_line, b.last_line) == (recs[0].line, recs[-1].line)
        _check(b.tensormap, [(r.line, r.tensormap, r) for r in recs], width)
        occ = {(r.ring, i) for r in recs for i in range(3) if i < 2 or r.dep_pool_end is not None}
        assert [(x.ring, x.resource) for x in b.occupancy] == sorted(occ), path
        for band in b.occupancy:
            _check(band, [(r.line, _occupancy(r, band.resource), r) for r in recs if r.ring == band.ring
                          and (band.resource < 2 or r.dep_pool_end is not None)], width)
        high = {(s.ring, i) for s in scopes for i in range(len(RESOURCES)) if s.usage[i] is not None}
        assert [(x.ring, x.resource) for x in b.high_water] == sorted(high), path
        for band in b.high_water:
            _check(band, [(s.end_line, u.high_water, s) for s in scopes
                          if s.ring == band.ring and (u := s.usage[band.resource]) is not None], width)
