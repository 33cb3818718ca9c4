"""Which scopes of one run become spans: the ``--otlp-max-spans`` budget policy.

A run can pair millions of scopes; a trace gets at most ``max_spans`` spans (the root span,
the wedged scopes and the paired scopes all count).  The policy, in order:

1. always kept: the root span, every wedged scope (``RunFinished.summary.wedged``), the scope
   at every ring/resource peak (for each ring and resource: the scope with the highest
   ``high_water``, the highest ``live_at_exit`` and the largest ``alloc``, as the pairer marks
   them in ``Scope.sets``, so the high-water scope is the one ``Peak.high_water_line`` names)
   and every ancestor of those; this set can exceed the budget
   (it is at most 1 + 65 wedged + 36 peaks x 65 ancestors);
2. then shallower scopes first: all scopes of depth 0, then depth 1, ... while the budget
   lasts; within the depth where the budget runs out, scopes in the order they ended.

Because a parent is always shallower than its child, step 2 keeps every ancestor of a scope it
keeps, so a kept scope's parent is always a kept span (or a wedged one, or the root).  A parent
that never became a scope (an unmatched begin) is the one exception; the span builder then
hangs the child off the root and says so.

Memory, per open run, is bounded and independent of the run's length: at most ``max_spans``
candidate scopes for step 2 (:class:`DepthFill` evicts the deepest, most recent candidate
when a shallower scope arrives) plus, for step 1, one current peak scope per
(ring, resource, metric) key (4 x 3 x 3) with the enclosing scopes that closed after it
(one chain of at most 65 per key).  A scope encloses an earlier-closed scope exactly when it
began before it (pairing is a stack, so paired intervals nest), which finds ancestors without
keeping the tree.

Pure: no I/O, no clock, no threads; one instance per run, fed in event order.
"""

from __future__ import annotations

import msgspec

from ringtrace.records import RESOURCES, Scope

METRICS: tuple[str, ...] = ("high_water", "live_at_exit", "alloc")
"""The per-resource figures whose peak scope is always kept, in :class:`~ringtrace.records.Usage` order."""


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

    __slots__ = ("_best", "_chains", "_fill", "_max_begin", "max_spans", "offered")

    def __init__(self, max_spans: int) -> None:
        self.max_spans = max_spans
        self.offered = 0
        self._fill = DepthFill(max_spans)
        # (ring, resource index, metric index) -> the scope holding that peak (the last to set it,
        # :attr:`Scope.sets`: the pairer decides, this only follows); chains: enclosing scopes closed since
        self._best: dict[tuple[int, int, int], Scope] = {}
        self._chains: dict[tuple[int, int, int], list[Scope]] = {}
        self._max_begin = -1  # the latest begin line of a current peak scope

    def add(self, scope: Scope) -> None:
        self.offered += 1
        self._fill.add(scope)
        begin = scope.begin_line
        if begin < self._max_begin:  # encloses (at least) one current peak scope
            for key, peak in self._best.items():
                if begin < peak.begin_line:
                    self._chains[key].append(scope)
        sets = scope.sets
        if sets:
            ring = scope.ring
            for bit in range(3 * len(RESOURCES)):
                if sets >> bit & 1:
                    key = (ring, bit // 3, bit % 3)
                    self._best[key] = scope
                    self._chains[key] = []
            self._max_begin = max(s.begin_line for s in self._best.values())

    def select(self, reserved: int = 1) -> Selection:
        """The kept scopes; ``reserved`` spans (root + wedged) are already spoken for."""
        must: dict[int, Scope] = {}
        peaks: dict[int, list[str]] = {}
        for (ring, r, m), scope in sorted(self._best.items()):
            must[scope.begin_line] = scope
            peaks.setdefault(scope.begin_line, []).append(f"ring{ring}.{RESOURCES[r]}.{METRICS[m]}")
            for anc in self._chains[(ring, r, m)]:
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
