"""Which scopes of one run become spans: the ``--otlp-max-spans`` budget policy.

A trace gets at most ``max_spans`` spans (the root, the wedged and the paired scopes all count):

1. always kept: the root span, every wedged scope (``RunFinished.summary.wedged``), every scope
   holding a ring/resource peak (per ring and resource the highest ``high_water`` and
   ``live_at_exit`` and the largest ``alloc``, as the pairer marks them in ``Scope.sets``, so the
   high-water scope is the one ``Peak.high_water_line`` names) and every ancestor of those, even
   past the budget (at most 1 + 65 wedged + 36 peaks x 65 ancestors);
2. then shallower scopes first (depth 0, then 1, ...) while the budget lasts; within the depth
   where it runs out, in the order they ended.

A parent is shallower than its child, so a kept scope's parent is a kept span (or a wedged one,
or the root), except a parent that never paired (an unmatched begin): the span builder then
hangs the child off the root and says so.

Memory per open run is independent of the run's length: at most ``max_spans`` candidates for
step 2 (:class:`DepthFill` evicts the deepest, most recent one when a shallower scope arrives)
and, for step 1, the current holder of each (ring, resource, metric) peak with the enclosing
scopes closed since (one chain of at most 65 each).  A scope encloses an earlier-closed one
exactly when it began before it (paired intervals nest), which finds ancestors without a tree.

Pure: no I/O, no clock, no threads; one instance per run, fed in event order.
"""

from __future__ import annotations

import msgspec

from ringtrace.model.records import RESOURCES, Scope

METRICS: tuple[str, ...] = ("high_water", "live_at_exit", "alloc")
"""The per-resource figures whose peak scope is always kept, in :class:`~ringtrace.model.records.Usage` order."""


class Selection(msgspec.Struct, frozen=True):
    """The outcome for one run.

    ``scopes`` are the kept paired scopes ordered by begin line; ``peaks`` maps a kept scope's
    begin line to the peaks it holds (``"ring1.heap.high_water"``); ``offered`` counts every
    paired scope of the run and ``omitted`` the ones left out.
    """

    scopes: tuple[Scope, ...]
    peaks: dict[int, tuple[str, ...]]
    offered: int
    omitted: int


class DepthFill:
    """At most ``limit`` candidates, shallowest first: all scopes shallower than the deepest kept depth."""

    __slots__ = ("_buckets", "_count", "_deepest", "limit")

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self._buckets: dict[int, list[Scope]] = {}
        self._count = 0
        self._deepest = -1

    def add(self, scope: Scope) -> None:
        depth = scope.depth
        if self._count >= self.limit:
            if self.limit <= 0 or depth >= self._deepest:
                return
            bucket = self._buckets[self._deepest]
            bucket.pop()
            self._count -= 1
            if not bucket:
                del self._buckets[self._deepest]
                self._deepest = max(self._buckets, default=-1)
        held = self._buckets.get(depth)
        if held is None:
            held = self._buckets[depth] = []
            if depth > self._deepest:
                self._deepest = depth
        held.append(scope)
        self._count += 1

    def __len__(self) -> int:
        return self._count

    def in_order(self) -> list[Scope]:
        """Candidates shallowest first, each depth in arrival order."""
        return [s for depth in sorted(self._buckets) for s in self._buckets[depth]]


class Budget:
    """Feeds on one run's paired scopes (:meth:`add`, in event order); :meth:`select` at the end."""

    __slots__ = ("_fill", "_max_begin", "_peaks", "max_spans", "offered")

    def __init__(self, max_spans: int) -> None:
        self.max_spans = max_spans
        self.offered = 0
        self._fill = DepthFill(max_spans)
        # (ring, resource index, metric index) -> the scope holding that peak (the last to set it in
        # :attr:`Scope.sets`: the pairer decides, this only follows) and the enclosing scopes closed since
        self._peaks: dict[tuple[int, int, int], tuple[Scope, list[Scope]]] = {}
        self._max_begin = -1  # the latest begin line of a current peak scope

    def add(self, scope: Scope) -> None:
        self.offered += 1
        self._fill.add(scope)
        begin = scope.begin_line
        if begin < self._max_begin:  # encloses (at least) one current peak scope
            for peak, chain in self._peaks.values():
                if begin < peak.begin_line:
                    chain.append(scope)
        sets = scope.sets
        if sets:
            ring = scope.ring
            for bit in range(3 * len(RESOURCES)):
                if sets >> bit & 1:
                    self._peaks[ring, bit // 3, bit % 3] = (scope, [])
            self._max_begin = max(peak.begin_line for peak, _ in self._peaks.values())

    def select(self, reserved: int = 1) -> Selection:
        """The kept scopes; ``reserved`` spans (root + wedged) are already spoken for."""
        must: dict[int, Scope] = {}
        peaks: dict[int, list[str]] = {}
        for (ring, r, m), (scope, chain) in sorted(self._peaks.items()):
            must[scope.begin_line] = scope
            peaks.setdefault(scope.begin_line, []).append(f"ring{ring}.{RESOURCES[r]}.{METRICS[m]}")
            for anc in chain:
                must[anc.begin_line] = anc
        room = self.max_spans - reserved - len(must)
        kept = dict(must)
        for scope in self._fill.in_order():
            if room <= 0:
                break
            if scope.begin_line not in kept:
                kept[scope.begin_line] = scope
                room -= 1
        scopes = tuple(kept[line] for line in sorted(kept))
        return Selection(scopes, {k: tuple(v) for k, v in peaks.items()}, self.offered,
                         self.offered - len(scopes))
