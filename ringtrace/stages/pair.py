"""Records -> paired scopes, per-ring peaks and wedged scopes.  Pure: no I/O, no clock.

Pairing is exact and uses one stack per file (the depth stack of open scopes):

* a ``begin`` at depth d first closes every open scope of depth >= d as an unmatched
  begin (:class:`Abandoned`), then opens;
* an ``end`` at depth d first pops open scopes deeper than d (unmatched begins), then pairs
  with the top when the top has depth d and the same site; otherwise it is an
  :class:`UnmatchedEnd` and the stack is left as it is.

Scopes still open when the run is finished are *wedged*: the innermost is where it stopped.

**The collector's depth cap.**  The runtime's collector keeps at most 64 open scopes (depths
0..:data:`DEPTH_CAP`): a begin that would be the 65th is not recorded, but its end is, attributed
to the innermost scope it holds (that scope's site and depth), and it pops that scope; so past
that point every end is paired with the begin of an outer scope and the pairing shifts.  A file
cannot say whether that happened, only that it could: once a record at depth :data:`DEPTH_CAP` was
read (:attr:`Pairer.depth_cap_line`), scopes are still paired and reported as :class:`Scope`
events (with no peak bits), but a scope whose end comes at or after that line is not counted into
the per-ring figures (peaks, ``pinned``, ``request``, ``Peak.scopes``): those figures cover the
scopes that closed before it, exact but lower bounds for the run.  The summary is then a
:class:`CappedSummary`, which says where and how many scopes were left out.  Raw samples (the
tensormap peak, ``live`` at each ring's latest record, what open scopes hold) are not pairings
and are kept.

Besides the §5 maxima, each ring keeps three facts for sizing (``ringtrace.analysis.advise``):

* ``pinned``: the most a ring held in blocks of scopes still open, under the guide's model
  (a block is freed at its scope's exit, FIFO): for a scope with no nested scope on its own
  ring that is its ``alloc``; for one with nested same-ring scopes it is counted from its own
  first allocation (nested scopes that closed before it are reclaimable).  Exact on the
  project's simulator without loop-carried values; an estimate on the runtime;
* ``request``: the largest heap block (and dep-pool entries) of a single task, from scopes
  that submitted exactly one task and did not cross the heap's end (a hard lower bound);
* ``tail_moved``: whether the ring's tail ever moved (the allocator had to wait);
* ``batch``: the dep-pool entries live at the end of the scope that owns the ring's 64th task
  (:data:`~ringtrace.model.runtime.DEP_POOL_BATCH`), or at the ring's last record if it has fewer: the
  runtime reclaims its dep pool only once 64 tasks retired, and that task retires only after its scope.

A scope's tasks are released only at its exit, so ``pinned`` is a need the records prove, with one
correction for the heap: where a scope's allocation crossed the ring's end (a multiple of the
capacity in the monotonic counter), the bytes before the crossing may be the skipped end of the ring
(no block straddles it), so only the bytes after the last crossing count.
"""

from __future__ import annotations

from collections.abc import Sequence

from ringtrace.model.records import (
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
from ringtrace.model.runtime import DEP_POOL_BATCH, SINCE_VERSION

_NOTHING: tuple[PairEvent, ...] = ()

DEPTH_CAP = 63
"""The deepest scope depth the collector keeps (64 open scopes, depths 0..63): see the module docstring."""
NEST = 66
"""Depths :class:`Pairer` follows nested scopes at (0..65: the runtime's 0..64, and one past it)."""


class CappedSummary(RunSummary, frozen=True):
    """The summary of a run whose records reached :data:`DEPTH_CAP` (``Pairer.summary`` gives a plain
    :class:`RunSummary` otherwise).  Its per-ring figures leave out every scope that closed at or
    after ``depth_cap_line``."""

    depth_cap_line: int = 0
    """The line of the first record at depth :data:`DEPTH_CAP` (from there on pairing may be shifted)."""
    uncounted: int = 0
    """Paired scopes (in ``scopes``) that closed at or after ``depth_cap_line``: not in the peaks."""


class _Ring:
    """Running maxima for one ring over its paired scopes.

    ``maxima`` holds (high_water, live_at_exit, alloc) for each of RESOURCES, flat; the sites
    and the high-water begin line are indexed the same way.
    """

    __slots__ = ("first", "heap_held", "lines", "maxima", "nested", "request", "scopes", "sites")

    def __init__(self, first: Record | None = None) -> None:
        self.scopes = 0
        self.heap_held = 0  # the largest heap alloc of a scope, less what may be the skipped end of the ring
        self.maxima = [0] * 12  # 9..11: ``pinned`` per resource (see the module docstring)
        self.sites = [""] * 9
        self.lines = [0] * 9
        self.request = [0, 0]  # heap bytes, dep-pool entries of one task
        self.nested = False  # a scope closed nested in a scope on this ring (else ``pinned`` is ``alloc``)
        self.first = first  # the begin of the ring's first paired scope: its tails are the ring's first

    def fold(self, usage: tuple[Usage | None, ...], site: str, begin_line: int) -> int:
        """Fold a new scope's usage into the maxima (the ring's first scope sets them); the bits of
        the peaks it set (see :attr:`Scope.sets`)."""
        first = self.scopes == 1
        m, sites = self.maxima, self.sites
        sets = 0
        for i, u in enumerate(usage):
            if u is None:
                continue
            j = 3 * i
            if u.high_water > m[j] or first:
                m[j], sites[j], self.lines[j] = u.high_water, site, begin_line
                sets |= 1 << j
            if u.live_at_exit > m[j + 1] or first:
                m[j + 1], sites[j + 1] = u.live_at_exit, site
                sets |= 2 << j
            if u.alloc > m[j + 2] or first:
                m[j + 2], sites[j + 2] = u.alloc, site
                sets |= 4 << j
        return sets

    def pinned(self, i: int) -> int:
        """``pinned`` of resource ``i``: without same-ring nesting every scope's alloc was all held."""
        if self.nested:
            return self.maxima[9 + i]
        return self.heap_held if i == 1 else max(self.maxima[3 * i + 2], 0)


def held_bytes(begin_head: int, end_head: int, cap: int | None) -> int:
    """Heap bytes a scope surely allocated between two head values: all of them, unless the head crossed
    the ring's end (a multiple of ``cap``), where the bytes before the last crossing may be skipped space."""
    if cap and end_head > begin_head and begin_head // cap != (end_head - 1) // cap:
        return end_head - (end_head - 1) // cap * cap
    return end_head - begin_head


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

    :meth:`push` (one record) and :meth:`push_many` (a batch) take records in file order and
    return what they caused; :meth:`summary` can be called at any time (a live view) and with
    ``finished=True`` at the end of the run.
    """

    def __init__(self, meta: Meta | None = None) -> None:
        self.meta = meta
        self._stack: list[Record] = []
        self._rings: dict[int, _Ring] = {}  # rings with paired scopes
        self._last: dict[int, Record] = {}  # latest record per ring (every ring seen)
        self._batch: dict[int, Record] = {}  # see ``Peak.batch``: the record it is read from, per ring
        self._batch_full: set[int] = set()  # rings whose batch record is final
        self._sites: set[str] = set()  # every site that began (``RunSummary.sites``)
        # by depth, for an open scope with closed nested scopes on its own ring: [its begin, the record
        # up to which its ring's allocation is accounted for, the record at its own first allocation or None]
        self._nest: list[list[Record | None] | None] = [None] * NEST
        self.records = 0
        self.scopes = 0
        self.unmatched_begins = 0
        self.unmatched_ends = 0
        self.max_depth = 0
        self.depth_cap_line = 0
        """The line of the first record at depth :data:`DEPTH_CAP` (0: none so far); see the module docstring."""
        self.uncounted = 0
        """Paired scopes left out of the per-ring figures because they closed at or after ``depth_cap_line``."""
        self._tm_peak = -1
        self._tm_site = ""
        self._tm_live = 0

    def push(self, rec: Record) -> tuple[PairEvent, ...]:
        events = self.push_many((rec,))
        return tuple(events) if events else _NOTHING

    def push_many(self, recs: Sequence[Record]) -> list[PairEvent]:
        """Push ``recs`` in order; the events they caused, in order.  Same as :meth:`push` on each."""
        if not recs:
            return []
        events: list[PairEvent] = []
        emit = events.append
        stack = self._stack
        push = stack.append
        pop = stack.pop
        rings = self._rings
        last = self._last
        tm_peak = self._tm_peak
        max_depth = self.max_depth
        capped = self.depth_cap_line
        scopes = 0
        batch, batch_full = self._batch, self._batch_full
        add_site = self._sites.add
        meta = self.meta
        heap_caps = meta.heap_max if meta is not None else ()
        for e in recs:
            ring_no = e.ring
            last[ring_no] = e
            if e.task_window_end < DEP_POOL_BATCH:
                batch[ring_no] = e
            elif ring_no not in batch_full and e.phase == "end":
                batch[ring_no] = e  # the scope that owns the ring's 64th task closes: nothing reclaimed before
                batch_full.add(ring_no)
            depth = e.depth
            if e.tensormap > tm_peak:
                tm_peak = e.tensormap
                self._tm_site = e.site
            if depth > max_depth:
                max_depth = depth
                if depth >= DEPTH_CAP and not capped:
                    capped = self.depth_cap_line = e.line
            if e.phase == "begin":
                add_site(e.site)
                if stack:
                    top = stack[-1]
                    if top.depth >= depth:
                        events.extend(self._abandon(depth, e.line))
                    elif e.task_window_end == top.task_window_end and top.ring == ring_no:
                        self._mark(top)  # nested on its ring before it allocated anything: see _nested_end
                push(e)
                continue
            if stack:
                b = stack[-1]
                if b.depth > depth:
                    events.extend(self._abandon(depth + 1, e.line))
                    b = stack[-1] if stack else e
            else:
                b = e
            if b is e or b.depth != depth or b.site != e.site:
                self.unmatched_ends += 1
                emit(UnmatchedEnd(e.site, depth, ring_no, e.line))
                continue
            # a paired scope: usage (see _usage), running maxima of the end's ring, the event
            pop()
            x = e.task_window_end
            t0, t1, t2 = x - b.task_window_start, x - e.task_window_start, x - b.task_window_end
            x = e.heap_end
            h0, h1, h2 = x - b.heap_start, x - e.heap_start, x - b.heap_end
            bs, be, es, ee = b.dep_pool_start, b.dep_pool_end, e.dep_pool_start, e.dep_pool_end
            if bs is None or be is None or es is None or ee is None:
                dp = None
                d0 = d1 = d2 = -1
            else:
                d0, d1, d2 = ee - bs, ee - es, ee - be
                dp = Usage(d0, d1, d2)
            usage = (Usage(t0, t1, t2), Usage(h0, h1, h2), dp)
            if capped:  # at or past the depth cap this pair may be shifted: reported, not counted
                scopes += 1
                self.uncounted += 1
                emit(Scope(e.site, depth, ring_no, b.line, e.line, stack[-1].line if stack else 0, usage, 0,
                           None if b.ring == ring_no else b.ring))
                continue
            try:
                ring = rings[ring_no]
            except KeyError:
                ring = rings[ring_no] = _Ring(b)
            m = ring.maxima
            if t2 == 1:
                self._request(ring, b, e, h2, d2)
            if ring.nested:  # a ring where a scope nested before its parent allocated: see _nested_end
                self._nested_end(ring, b, e, t2, h2, d2)
            if h2 > ring.heap_held:
                cap = heap_caps[ring_no] if 0 <= ring_no < len(heap_caps) else 0
                hh = held_bytes(b.heap_end, e.heap_end, cap)
                if hh > ring.heap_held:
                    ring.heap_held = hh
            ring.scopes += 1
            scopes += 1
            if (t0 > m[0] or t1 > m[1] or t2 > m[2] or h0 > m[3] or h1 > m[4] or h2 > m[5]
                    or (dp is not None and (d0 > m[6] or d1 > m[7] or d2 > m[8])) or ring.scopes == 1):
                sets = ring.fold(usage, e.site, b.line)
            else:
                sets = 0
            if b.ring == ring_no:
                emit(Scope(e.site, depth, ring_no, b.line, e.line, stack[-1].line if stack else 0, usage, sets))
            else:  # odd data: the begin is on another ring (its slice is on that track)
                emit(Scope(e.site, depth, ring_no, b.line, e.line, stack[-1].line if stack else 0, usage, sets,
                           b.ring))
        self.scopes += scopes
        self._tm_peak = tm_peak
        self.max_depth = max_depth
        self._tm_live = recs[-1].tensormap
        self.records += len(recs)
        return events

    @staticmethod
    def _pin(ring: _Ring, t: int, h: int, d: int) -> None:
        m = ring.maxima
        m[9], m[10], m[11] = max(m[9], t), max(m[10], h), max(m[11], d)

    def _mark(self, p: Record) -> None:
        """A scope begins nested in ``p`` on ``p``'s ring before ``p`` allocated anything: from now on the
        ring's scopes are followed (:meth:`_nested_end`), and ``p`` is held from its own first block."""
        try:
            ring = self._rings[p.ring]
        except KeyError:
            ring = self._rings[p.ring] = _Ring(p)
        if not ring.nested:  # every scope so far held all it allocated
            ring.nested = True
            m = ring.maxima
            m[9], m[10], m[11] = max(m[2], 0), max(m[5], 0), max(m[8], 0)
        st = self._nest[p.depth]
        if st is None or st[0] is not p:
            self._nest[p.depth] = [p, p, None]

    def _nested_end(self, ring: _Ring, b: Record, e: Record, t: int, h: int, d: int) -> None:
        """Scope ``b``..``e`` closed on a ring where nesting is followed.

        Inside a parent on the same ring that allocated first, the parent holds all of it (nothing to
        do); inside a marked parent with no own block yet it pins what it held, and the parent learns
        whether it allocated before this scope began.  An outermost scope pins from its own first block.
        """
        nest, stack = self._nest, self._stack
        if stack and stack[-1].ring == b.ring:
            p = stack[-1]
            st = nest[p.depth]
            if st is None or st[0] is not p or st[2] is not None:
                return
            acc = st[1]
            if acc is not None and b.task_window_end > acc.task_window_end:
                st[2] = acc
                return
            st[1] = e
        own = nest[b.depth]
        if own is not None and own[0] is b:
            nest[b.depth] = None
            self._held_from_own(ring, own, e)
        else:
            self._pin(ring, t, held_bytes(b.heap_end, e.heap_end, self._heap_cap(e.ring)), d)

    def _heap_cap(self, ring_no: int) -> int | None:
        return self.meta.capacity("heap", ring_no) if self.meta is not None else None

    def _held_from_own(self, ring: _Ring, st: list[Record | None], e: Record) -> None:
        """A scope with nested same-ring scopes closed: it held from its own first allocation to its end."""
        acc, own = st[1], st[2]
        if own is None and acc is not None and e.task_window_end > acc.task_window_end:
            own = acc
        if own is not None:
            self._pin(ring, e.task_window_end - own.task_window_end,
                      held_bytes(own.heap_end, e.heap_end, self._heap_cap(e.ring)),
                      (e.dep_pool_end or 0) - (own.dep_pool_end or 0))

    def _request(self, ring: _Ring, b: Record, e: Record, h: int, d: int) -> None:
        """A scope that submitted one task: its heap alloc is one block unless it crossed the ring's end."""
        cap = self.meta.capacity("heap", e.ring) if self.meta is not None else None
        req = ring.request
        if cap is not None and b.heap_end // cap == (e.heap_end - 1) // cap and h > req[0]:
            req[0] = h
        if d > req[1]:
            req[1] = d

    def _open_pinned(self, ring_no: int) -> tuple[int, int, int]:
        """What the open scopes on ``ring_no`` hold at the ring's latest record (same model as ``pinned``)."""
        last = self._last.get(ring_no)
        if last is None:
            return (0, 0, 0)
        for b in self._stack:
            if b.ring != ring_no:
                continue
            st = self._nest[b.depth]
            if st is not None and st[0] is b:
                if st[2] is None:
                    continue  # only nested scopes allocated so far (those that closed are reclaimable)
                base = st[2]
            else:
                base = b
            return (last.task_window_end - base.task_window_end, last.heap_end - base.heap_end,
                    (last.dep_pool_end or 0) - (base.dep_pool_end or 0))
        return (0, 0, 0)

    def _abandon(self, min_depth: int, line: int) -> list[PairEvent]:
        """Pop open scopes of depth >= ``min_depth`` as unmatched begins."""
        out: list[PairEvent] = []
        stack = self._stack
        while stack and stack[-1].depth >= min_depth:
            b = stack.pop()
            self.unmatched_begins += 1
            out.append(Abandoned(OpenScope(b.site, b.depth, b.ring, b.line), line))
        return out

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
        for ring_no in sorted(self._last):
            ring = self._rings.get(ring_no) or _Ring()
            e = self._last[ring_no]  # live = head - tail at the ring's latest record
            live = (e.task_window_end - e.task_window_start, e.heap_end - e.heap_start,
                    0 if e.dep_pool_end is None else e.dep_pool_end - (e.dep_pool_start or 0))
            f = ring.first
            tails = (e.task_window_start, e.heap_start, e.dep_pool_start or 0)
            first = (0, 0, 1) if f is None else (f.task_window_start, f.heap_start, f.dep_pool_start or 0)
            moved = any(a > b for a, b in zip(tails, first, strict=True))
            held = self._open_pinned(ring_no)
            requests = (1, ring.request[0], ring.request[1])
            bf = self._batch.get(ring_no)
            batch = (0, 0, (bf.dep_pool_end or 0) - (bf.dep_pool_start or 0) if bf is not None else 0)
            for i, resource in enumerate(RESOURCES):
                if meta is not None and meta.version < SINCE_VERSION[resource]:  # v4: no dep pool
                    continue
                cap = meta.capacity(resource, ring_no) if meta is not None else None
                m, sites, j = ring.maxima, ring.sites, 3 * i
                peaks.append(Peak(ring_no, resource, cap, m[j], sites[j], ring.lines[j], m[j + 1], sites[j + 1],
                                  m[j + 2], sites[j + 2], live[i], ring.scopes, ring.pinned(i), held[i],
                                  requests[i] if ring.scopes else 0, moved, batch[i]))
        tm_cap = meta.tensormap_max if meta is not None and meta.tensormap_max else None
        tensormap = TensormapPeak(tm_cap, max(self._tm_peak, 0), self._tm_site, self._tm_live)
        opened = self.open_scopes
        if self.depth_cap_line:
            return CappedSummary(meta, self.records, self.scopes, self.unmatched_begins, self.unmatched_ends,
                                 parse_errors, tuple(peaks), tensormap, opened if finished else (), self.max_depth,
                                 opened, sites=tuple(sorted(self._sites)), depth_cap_line=self.depth_cap_line,
                                 uncounted=self.uncounted)
        return RunSummary(meta, self.records, self.scopes, self.unmatched_begins, self.unmatched_ends,
                          parse_errors, tuple(peaks), tensormap,
                          opened if finished else (), self.max_depth, opened, sites=tuple(sorted(self._sites)))
