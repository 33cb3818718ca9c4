"""A run's bands: bounded series over the record lines, per column the least and greatest value.

:class:`Folder` is the pure-Python fold (the reference): fed each chunk's records and pair events, it keeps per
ring and resource the occupancy (head - tail at every record) and each scope's high water (at its end line), and
the tensormap at every record, as :class:`Series`, and hands them over as one frozen
:class:`~ringtrace.model.records.Bands` (what ``RunFinished.bands`` carries to the report).  The compiled core's
pairer folds the same bands as it pairs (``_core.Pairer(bands=width)``), without a record or scope object;
``tests/stages/test_core.py`` holds the two to the same result.

A run's length is not known while it is read, so a series' columns start at the width the metadata's ``total``
implies (one record wide without it) and are merged in pairs whenever there would be more than ``2 * width`` of
them (M4-style decimation: each column keeps its extremes and the first sample at its greatest, so the picture
is exact at its resolution).  The result is the same whatever the chunks (samples are taken one by one, in
order), and memory depends on ``width``, never on the run.  Single-threaded; the caller owns it.
"""

from __future__ import annotations

import functools
from bisect import bisect_left
from collections.abc import Sequence
from typing import Any

from ringtrace.model.records import Band, Bands, Column, Meta, PairEvent, Record, Scope
from ringtrace.model.runtime import TABLE, unrolled


class Series:
    """Columns ``[first_x, lo, hi, x_of_hi, *carried]`` for increasing x (a record's line): what follows
    ``x_of_hi`` is carried with the greatest value (while folding, the record or scope that had it; in a
    series made of a :class:`Band`, its site, depth and begin line)."""

    __slots__ = ("cols", "shift", "width")

    def __init__(self, width: int, span: int = 1) -> None:
        """``span``: the x range one column covers at first (rounded up to a power of two; a run of known
        length starts at its final column width, so no merging is needed)."""
        self.width = width
        self.shift = max(0, (span - 1).bit_length())
        self.cols: list[list[Any]] = []

    @classmethod
    def of(cls, band: Band, width: int) -> Series:
        """A band as a series of ``width`` (to be merged further by :meth:`columns`)."""
        s = cls(width)
        s.shift = band.shift
        s.cols = [list(c) for c in band.columns]
        return s

    def extend(self, xs: Sequence[int], values: Sequence[int], tags: Sequence[object]) -> None:
        """Many samples at once (``xs`` increasing): one min/max per column, found by C-level slices; the same
        columns as :meth:`add` of each sample in turn."""
        n, i = len(xs), 0
        while i < n:
            col = xs[i] >> self.shift
            j = bisect_left(xs, (col + 1) << self.shift, i, n)
            part = values[i:j]
            hi = max(part)
            k = i + part.index(hi)
            self._segment(xs[i], min(part), hi, xs[k], tags[k])
            i = j

    def _segment(self, x: int, lo: int, hi: int, x_hi: int, tag: object) -> None:
        b = x >> self.shift
        cols = self.cols
        if cols:
            last = cols[-1]
            if last[0] >> self.shift == b:
                if lo < last[1]:
                    last[1] = lo
                if hi > last[2]:
                    last[2], last[3], last[4] = hi, x_hi, tag
                return
            if b >= 2 * self.width:
                self._halve()
                self._segment(x, lo, hi, x_hi, tag)
                return
        cols.append([x, lo, hi, x_hi, tag])

    def add(self, x: int, value: int, tag: object = None) -> None:
        """One sample at ``x`` (x never decreases between calls)."""
        self._segment(x, value, value, x, tag)

    def _halve(self) -> None:
        self.shift += 1
        merged: list[list[Any]] = []
        for col in self.cols:
            if merged and merged[-1][0] >> self.shift == col[0] >> self.shift:
                m = merged[-1]
                m[1] = min(m[1], col[1])
                if col[2] > m[2]:
                    m[2:] = col[2:]
            else:
                merged.append(col)
        self.cols = merged

    def columns(self, x_max: int, width: int | None = None) -> list[list[Any]]:
        """At most ``width`` (default: the series' own) columns over ``[0, x_max]``, merging further where the
        run was short of a lap or a page's budget asks for fewer (merging is in place: only ever coarser)."""
        want = self.width if width is None else max(1, min(width, self.width))
        while self.cols and (x_max >> self.shift) >= want:
            self._halve()
        return self.cols


def span_of(meta: Meta | None, width: int) -> int:
    """The lines one column covers at first: the records' lines (2 .. total + 1) over ``width``, else 1."""
    total = meta.total if meta is not None else None
    lines = total + 1 if total else None
    return -(-lines // width) if lines else 1


class Folder:
    """The pure-Python fold of a run's bands (see the module docstring); O(rings x width) memory."""

    def __init__(self, width: int) -> None:
        self.width = width
        self.started = False  # the first record was folded: the span is taken from the metadata then
        self.span = 1
        self.first_line: int | None = None
        self.last_line = 0
        self.tensormap = Series(width)
        self.occ: dict[tuple[int, int], Series] = {}  # (ring, resource index) -> head - tail at every record
        self.high: dict[tuple[int, int], Series] = {}  # (ring, resource index) -> each scope's high water

    def _series(self, table: dict[tuple[int, int], Series], key: tuple[int, int]) -> Series:
        s = table.get(key)
        if s is None:
            s = table[key] = Series(self.width, self.span)
        return s

    def push(self, records: Sequence[Record], events: Sequence[PairEvent], meta: Meta | None) -> None:
        """One chunk's records (in line order) and the pair events they caused; ``meta``: the run's metadata
        (read before its first record)."""
        if records:
            if not self.started:
                self.started = True
                self.span = span_of(meta, self.width)
                self.tensormap = Series(self.width, self.span)
                self.first_line = records[0].line
            self.last_line = records[-1].line
            self.tensormap.extend([r.line for r in records], [r.tensormap for r in records], records)
            for ring in sorted({r.ring for r in records}):
                self._occupancy(ring, [r for r in records if r.ring == ring])
        scopes = [e for e in events if type(e) is Scope]
        for ring in sorted({e.ring for e in scopes}):
            ss = [e for e in scopes if e.ring == ring]
            for i in range(len(TABLE)):
                has = [e for e in ss if e.usage[i] is not None]
                if has:
                    self._series(self.high, (ring, i)).extend(
                        [e.end_line for e in has], [u.high_water for e in has if (u := e.usage[i]) is not None], has)

    def _occupancy(self, ring: int, rs: list[Record]) -> None:
        """Fold one ring's records of a chunk (in line order): each resource's head - tail at every record that has
        it.  Written out over the resources at its first call (:func:`_occupancy_source`)."""
        _install_occupancy()
        self._occupancy(ring, rs)

    def bands(self) -> Bands:
        """The bands so far, frozen."""
        return Bands(self.width, self.first_line or 0, self.last_line, _band(-1, -1, self.tensormap),
                     tuple(_band(*k, self.occ[k]) for k in sorted(self.occ)),
                     tuple(_band(*k, self.high[k]) for k in sorted(self.high)))


def _band(ring: int, resource: int, s: Series) -> Band:
    return Band(ring, resource, s.shift, tuple(_column(c) for c in s.cols))


def _column(c: list[Any]) -> Column:
    tag = c[4]
    begin = tag.begin_line if type(tag) is Scope else 0
    return (c[0], c[1], c[2], c[3], tag.site, tag.depth, begin)


def _occupancy_source() -> str:
    """The source of :meth:`Folder._occupancy`, written out over :data:`TABLE` (a comprehension per resource:
    three times as fast as one through ``attrgetter``); a resource that a version may lack only where present."""
    body = ""
    for i, r in enumerate(TABLE):
        if not r.optional:
            body += (f"    self._series(self.occ, (ring, {i})).extend(xs, [r.{r.end_field} - r.{r.start_field} "
                     "for r in rs], rs)\n")
        else:
            body += f"""\
    has = [r for r in rs if r.{r.end_field} is not None]
    if has:
        self._series(self.occ, (ring, {i})).extend(
            [r.line for r in has], [(r.{r.end_field} or 0) - (r.{r.start_field} or 0) for r in has], has)
"""
    return f"def _occupancy(self, ring, rs):\n    xs = [r.line for r in rs]\n{body}"


@functools.cache
def _install_occupancy() -> None:
    """:meth:`Folder._occupancy` becomes :func:`_occupancy_source`'s, compiled once (at the first fold)."""
    Folder._occupancy = unrolled(_occupancy_source(), {})["_occupancy"]  # type: ignore[method-assign]
