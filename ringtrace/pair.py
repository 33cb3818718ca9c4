"""Records -> paired scopes, per-ring peaks and wedged scopes.  Pure: no I/O, no clock.

Pairing is exact and uses one stack per file (the depth stack of open scopes):

* a ``begin`` at depth d first closes every open scope of depth >= d as an unmatched
  begin (:class:`Abandoned`), then opens;
* an ``end`` at depth d first pops open scopes deeper than d (unmatched begins), then pairs
  with the top when the top has depth d and the same site; otherwise it is an
  :class:`UnmatchedEnd` and the stack is left as it is.

Scopes still open when the run is finished are *wedged*: the innermost is where it stopped.
"""

from __future__ import annotations

from ringtrace.records import (
    RESOURCES,
    Abandoned,
    Meta,
    OpenScope,
    PairEvent,
    Peak,
    Record,
    RunSummary,
    Scope,
    TensormapPeak,
    UnmatchedEnd,
    Usage,
)

_NOTHING: tuple[PairEvent, ...] = ()


class _Ring:
    """Running maxima for one ring; lists are indexed like RESOURCES."""

    __slots__ = ("alloc", "alloc_site", "hw", "hw_line", "hw_site", "live", "live_exit", "live_exit_site",
                 "scopes")

    def __init__(self) -> None:
        self.scopes = 0
        self.hw = [0, 0, 0]
        self.hw_site = ["", "", ""]
        self.hw_line = [0, 0, 0]
        self.live_exit = [0, 0, 0]
        self.live_exit_site = ["", "", ""]
        self.alloc = [0, 0, 0]
        self.alloc_site = ["", "", ""]
        self.live = [0, 0, 0]


def _usage(b: Record, e: Record) -> tuple[Usage | None, ...]:
    """high_water = e.R_end - b.R_start, live_at_exit = e.R_end - e.R_start, alloc = e.R_end - b.R_end."""
    tw = Usage(e.task_window_end - b.task_window_start, e.task_window_end - e.task_window_start,
               e.task_window_end - b.task_window_end)
    hp = Usage(e.heap_end - b.heap_start, e.heap_end - e.heap_start, e.heap_end - b.heap_end)
    if (b.dep_pool_start is None or b.dep_pool_end is None or e.dep_pool_start is None
            or e.dep_pool_end is None):
        return (tw, hp, None)
    de = e.dep_pool_end
    return (tw, hp, Usage(de - b.dep_pool_start, de - e.dep_pool_start, de - b.dep_pool_end))


class Pairer:
    """Pairs one run's records.  Called from one task or thread only; never raises for data.

    :meth:`push` takes records in file order and returns what they caused; :meth:`summary`
    can be called at any time (a live view) and with ``finished=True`` at the end of the run.
    """

    def __init__(self, meta: Meta | None = None) -> None:
        self.meta = meta
        self._stack: list[Record] = []
        self._rings: dict[int, _Ring] = {}
        self._last: dict[int, Record] = {}  # latest record per ring
        self.records = 0
        self.scopes = 0
        self.unmatched_begins = 0
        self.unmatched_ends = 0
        self.max_depth = 0
        self._tm_peak = -1
        self._tm_site = ""
        self._tm_live = 0

    def push(self, rec: Record) -> tuple[PairEvent, ...]:
        self.records += 1
        self._last[rec.ring] = rec
        ring = self._rings.get(rec.ring)
        if ring is None:
            ring = self._rings[rec.ring] = _Ring()
        has_dp = rec.dep_pool_end is not None
        live = ring.live
        live[0] = rec.task_window_end - rec.task_window_start
        live[1] = rec.heap_end - rec.heap_start
        live[2] = (rec.dep_pool_end or 0) - (rec.dep_pool_start or 0) if has_dp else 0
        self._tm_live = rec.tensormap
        if rec.tensormap > self._tm_peak:
            self._tm_peak = rec.tensormap
            self._tm_site = rec.site
        if rec.depth > self.max_depth:
            self.max_depth = rec.depth

        stack = self._stack
        depth = rec.depth
        if rec.phase == "begin":
            events = _NOTHING
            if stack and stack[-1].depth >= depth:
                events = self._abandon(depth, rec.line)
            stack.append(rec)
            return events
        events = _NOTHING
        if stack and stack[-1].depth > depth:
            events = self._abandon(depth + 1, rec.line)
        if stack and stack[-1].depth == depth and stack[-1].site == rec.site:
            begin = stack.pop()
            scope = self._close(begin, rec, ring)
            return (*events, scope) if events else (scope,)
        self.unmatched_ends += 1
        return (*events, UnmatchedEnd(rec.site, rec.depth, rec.ring, rec.line))

    def _abandon(self, min_depth: int, line: int) -> tuple[PairEvent, ...]:
        """Pop open scopes of depth >= ``min_depth`` as unmatched begins."""
        out: list[PairEvent] = []
        stack = self._stack
        while stack and stack[-1].depth >= min_depth:
            b = stack.pop()
            self.unmatched_begins += 1
            out.append(Abandoned(OpenScope(b.site, b.depth, b.ring, b.line), line))
        return tuple(out)

    def _close(self, b: Record, e: Record, ring: _Ring) -> Scope:
        self.scopes += 1
        ring.scopes += 1
        usage = _usage(b, e)
        first = ring.scopes == 1
        for i, u in enumerate(usage):
            if u is None:
                continue
            if u.high_water > ring.hw[i] or first:
                ring.hw[i] = u.high_water
                ring.hw_site[i] = e.site
                ring.hw_line[i] = b.line
            if u.live_at_exit > ring.live_exit[i] or first:
                ring.live_exit[i] = u.live_at_exit
                ring.live_exit_site[i] = e.site
            if u.alloc > ring.alloc[i] or first:
                ring.alloc[i] = u.alloc
                ring.alloc_site[i] = e.site
        parent = self._stack[-1].line if self._stack else 0
        return Scope(e.site, e.depth, e.ring, b.line, e.line, parent, usage)

    @property
    def open_scopes(self) -> tuple[OpenScope, ...]:
        """Scopes open right now, outermost first."""
        return tuple(OpenScope(b.site, b.depth, b.ring, b.line) for b in self._stack)

    def open_usage(self) -> tuple[tuple[Usage | None, ...], ...]:
        """For each open scope (outermost first), its usage so far: the :class:`Scope` formulas with
        the latest record of its ring standing in for the end (so ``alloc`` is what it has allocated
        since it began).  Indexed like :data:`RESOURCES`; None where the file has no dep pool."""
        out: list[tuple[Usage | None, ...]] = []
        for b in self._stack:
            e = self._last.get(b.ring, b)
            out.append(_usage(b, e))
        return tuple(out)

    def summary(self, parse_errors: int = 0, finished: bool = True) -> RunSummary:
        """Snapshot of the run.  With ``finished``, open scopes are reported as wedged."""
        meta = self.meta
        peaks: list[Peak] = []
        for ring_no in sorted(self._rings):
            ring = self._rings[ring_no]
            for i, resource in enumerate(RESOURCES):
                if resource == "dep_pool" and meta is not None and meta.version == 4:
                    continue
                cap = meta.capacity(resource, ring_no) if meta is not None else None
                peaks.append(Peak(ring_no, resource, cap, ring.hw[i], ring.hw_site[i], ring.hw_line[i],
                                  ring.live_exit[i], ring.live_exit_site[i], ring.alloc[i], ring.alloc_site[i],
                                  ring.live[i], ring.scopes))
        tm_cap = meta.tensormap_max if meta is not None and meta.tensormap_max else None
        tensormap = TensormapPeak(tm_cap, max(self._tm_peak, 0), self._tm_site, self._tm_live)
        return RunSummary(meta, self.records, self.scopes, self.unmatched_begins, self.unmatched_ends,
                          parse_errors, tuple(peaks), tensormap,
                          self.open_scopes if finished else (), self.max_depth)
