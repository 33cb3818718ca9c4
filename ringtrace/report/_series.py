"""Bounded series over the record index: per column the min and max (and the record of the max).

A run's length is not known while it is read, so columns start one record wide and are merged in
pairs whenever there would be more than ``2 * width`` of them (M4-style decimation: each column
keeps its extremes, so the picture is exact at its resolution).  Memory and output size depend on
``width``, never on the run.  Single-threaded; the caller owns it.
"""

from __future__ import annotations

from bisect import bisect_left
from collections.abc import Sequence
from typing import Any


class Series:
    """Columns of ``[first_x, lo, hi, x_of_hi, tag_of_hi]`` for increasing x (a record's line)."""

    __slots__ = ("cols", "shift", "width")

    def __init__(self, width: int, span: int = 1) -> None:
        """``span``: the x range one column covers at first (rounded up to a power of two; a run of known
        length starts at its final column width, so no merging is needed)."""
        self.width = width
        self.shift = max(0, (span - 1).bit_length())
        self.cols: list[list[Any]] = []

    def extend(self, xs: Sequence[int], values: Sequence[int], tags: Sequence[object]) -> None:
        """Many samples at once (``xs`` increasing): one min/max per column, found by C-level slices."""
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
        b = x >> self.shift
        cols = self.cols
        if cols:
            last = cols[-1]
            if last[0] >> self.shift == b:
                if value < last[1]:
                    last[1] = value
                if value > last[2]:
                    last[2], last[3], last[4] = value, x, tag
                return
            if b >= 2 * self.width:
                self._halve()
                self.add(x, value, tag)
                return
        cols.append([x, value, value, x, tag])

    def _halve(self) -> None:
        self.shift += 1
        merged: list[list[Any]] = []
        for col in self.cols:
            if merged and merged[-1][0] >> self.shift == col[0] >> self.shift:
                m = merged[-1]
                m[1] = min(m[1], col[1])
                if col[2] > m[2]:
                    m[2], m[3], m[4] = col[2], col[3], col[4]
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
