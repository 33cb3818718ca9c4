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

import functools
from collections.abc import Sequence
from operator import attrgetter

from ringtrace.model.records import (
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
from ringtrace.model.runtime import TABLE, TASKS, TASKS_AT, Resource, unrolled

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


N = len(TABLE)
"""The resources (``Scope.usage``'s length)."""
BATCH = max(r.batch for r in TABLE)
"""The task count before which a batch-reclaimed resource (the dep pool) keeps everything: see ``Peak.batch``."""
_TASKS = attrgetter(TASKS.end_field)  # a record's task count (the task window's head)


class _Ring:
    """Running maxima for one ring over its paired scopes.

    ``maxima`` holds (high_water, live_at_exit, alloc) for each of RESOURCES, flat, then ``pinned`` per
    resource (see the module docstring); the sites and the high-water begin line are indexed as the first.
    """

    __slots__ = ("first", "held", "lines", "maxima", "nested", "request", "scopes", "sites")

    def __init__(self, first: Record | None = None) -> None:
        self.scopes = 0
        self.held = [0] * N  # contiguous resources (the heap): the largest alloc of a scope, less what may be
        # the skipped end of the ring
        self.maxima = [0] * (4 * N)  # 3N..4N-1: ``pinned`` per resource (see the module docstring)
        self.sites = [""] * (3 * N)
        self.lines = [0] * (3 * N)
        self.request = [0] * N  # of one task, per resource (the task window's is 1: see ``summary``)
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
            return self.maxima[3 * N + i]
        return self.held[i] if TABLE[i].contiguous else max(self.maxima[3 * i + 2], 0)


def held_bytes(begin_head: int, end_head: int, cap: int | None) -> int:
    """Heap bytes a scope surely allocated between two head values: all of them, unless the head crossed
    the ring's end (a multiple of ``cap``), where the bytes before the last crossing may be skipped space."""
    if cap and end_head > begin_head and begin_head // cap != (end_head - 1) // cap:
        return end_head - (end_head - 1) // cap * cap
    return end_head - begin_head


def _usage(b: Record, e: Record) -> tuple[Usage | None, ...]:
    """high_water = e.R_end - b.R_start, live_at_exit = e.R_end - e.R_start, alloc = e.R_end - b.R_end."""
    out: list[Usage | None] = []
    for r in TABLE:
        bs, be = getattr(b, r.start_field), getattr(b, r.end_field)
        es, ee = getattr(e, r.start_field), getattr(e, r.end_field)
        out.append(None if bs is None or be is None or es is None or ee is None else
                   Usage(ee - bs, ee - es, ee - be))
    return tuple(out)


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
        _install_push()

    def push(self, rec: Record) -> tuple[PairEvent, ...]:
        events = self.push_many((rec,))
        return tuple(events) if events else _NOTHING

    def push_many(self, recs: Sequence[Record]) -> list[PairEvent]:
        """Push ``recs`` in order; the events they caused, in order.  Same as :meth:`push` on each.  The hot loop of
        the pure path: written out over the resources at its first call (:func:`_push_source`)."""
        _install_push()
        return self.push_many(recs)

    def _pin(self, ring: _Ring, pins: Sequence[int]) -> None:
        m = ring.maxima
        for i, x in enumerate(pins, 3 * N):
            if x > m[i]:
                m[i] = x

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
            m[3 * N:] = [max(m[3 * i + 2], 0) for i in range(N)]
        st = self._nest[p.depth]
        if st is None or st[0] is not p:
            self._nest[p.depth] = [p, p, None]

    def _nested_end(self, ring: _Ring, b: Record, e: Record, allocs: tuple[int, ...]) -> None:
        """Scope ``b``..``e`` (which allocated ``allocs``, per resource) closed on a ring where nesting is followed.

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
            if acc is not None and _TASKS(b) > _TASKS(acc):
                st[2] = acc
                return
            st[1] = e
        own = nest[b.depth]
        if own is not None and own[0] is b:
            nest[b.depth] = None
            self._held_from_own(ring, own, e)
        else:
            self._pin(ring, [self._held(r, b, e) if r.contiguous else a for r, a in zip(TABLE, allocs, strict=True)])

    def _held(self, r: Resource, b: Record, e: Record) -> int:
        """What a scope from ``b`` to ``e`` surely held of the contiguous resource ``r`` (see :func:`held_bytes`)."""
        cap = self.meta.capacity(r.name, e.ring) if self.meta is not None else None
        return held_bytes(getattr(b, r.end_field), getattr(e, r.end_field), cap)

    def _held_from_own(self, ring: _Ring, st: list[Record | None], e: Record) -> None:
        """A scope with nested same-ring scopes closed: it held from its own first allocation to its end."""
        acc, own = st[1], st[2]
        if own is None and acc is not None and _TASKS(e) > _TASKS(acc):
            own = acc
        if own is not None:
            self._pin(ring, [self._held(r, own, e) if r.contiguous else
                             (getattr(e, r.end_field) or 0) - (getattr(own, r.end_field) or 0) for r in TABLE])

    def _open_pinned(self, ring_no: int) -> tuple[int, ...]:
        """What the open scopes on ``ring_no`` hold at the ring's latest record (same model as ``pinned``)."""
        last = self._last.get(ring_no)
        if last is None:
            return (0,) * N
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
            return tuple((getattr(last, r.end_field) or 0) - (getattr(base, r.end_field) or 0) for r in TABLE)
        return (0,) * N

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
            f = ring.first  # moved: the ring's tail moved past its first (the counters' origin without a scope)
            moved = any((getattr(e, r.start_field) or 0) > (r.origin if f is None else getattr(f, r.start_field) or 0)
                        for r in TABLE)
            held = self._open_pinned(ring_no)
            bf = self._batch.get(ring_no)
            for i, r in enumerate(TABLE):
                if meta is not None and meta.version < r.since_version:  # v4: no dep pool
                    continue
                head = getattr(e, r.end_field)
                live = 0 if head is None else head - (getattr(e, r.start_field) or 0)
                batch = (getattr(bf, r.end_field) or 0) - (getattr(bf, r.start_field) or 0) if r.batch and bf else 0
                request = (1 if r.counts_tasks else ring.request[i]) if ring.scopes else 0
                cap = meta.capacity(r.name, ring_no) if meta is not None else None
                m, sites, j = ring.maxima, ring.sites, 3 * i
                peaks.append(Peak(ring_no, r.name, cap, m[j], sites[j], ring.lines[j], m[j + 1], sites[j + 1],
                                  m[j + 2], sites[j + 2], live, ring.scopes, ring.pinned(i), held[i], request, moved,
                                  batch))
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


def _push_source() -> str:
    """The source of :meth:`Pairer.push_many`: for a paired scope, each resource's three figures (``hw{i}``,
    ``lx{i}``, ``al{i}``, see :func:`_usage`) and what it folds into its ring written out over :data:`TABLE`
    (a resource that a version may lack has ``u{i}`` None there, and figures of -1)."""
    n = range(N)
    always = [i for i in n if not TABLE[i].optional]
    contiguous = [i for i in n if TABLE[i].contiguous]
    tasks = TASKS.end_field
    figures = ""
    for i, r in enumerate(TABLE):
        if i in always:
            figures += f"""\
        x = e.{r.end_field}
        hw{i}, lx{i}, al{i} = x - b.{r.start_field}, x - e.{r.start_field}, x - b.{r.end_field}
"""
        else:
            figures += f"""\
        bs, be, es, ee = b.{r.start_field}, b.{r.end_field}, e.{r.start_field}, e.{r.end_field}
        if bs is None or be is None or es is None or ee is None:
            u{i} = None
            hw{i} = lx{i} = al{i} = -1
        else:
            hw{i}, lx{i}, al{i} = ee - bs, ee - es, ee - be
            u{i} = Usage(hw{i}, lx{i}, al{i})
"""
    usage = ", ".join(f"Usage(hw{i}, lx{i}, al{i})" if i in always else f"u{i}" for i in n)
    allocs = ", ".join(f"al{i}" for i in n)
    request = ""  # a scope that submitted one task: its allocations are one task's (see ``Peak.request``)
    for i, r in enumerate(TABLE):
        if r.counts_tasks:
            continue
        if r.contiguous:  # one block, unless it crossed the ring's end
            request += f"""\
            cap = caps{i}[ring_no] if ring_no < len(caps{i}) else 0
            if cap > 0 and b.{r.end_field} // cap == (e.{r.end_field} - 1) // cap and al{i} > req[{i}]:
                req[{i}] = al{i}
"""
        else:
            request += f"""\
            if al{i} > req[{i}]:
                req[{i}] = al{i}
"""
    held = "".join(f"""\
        if al{i} > ring.held[{i}]:
            cap = caps{i}[ring_no] if 0 <= ring_no < len(caps{i}) else 0
            hh = held_bytes(b.{TABLE[i].end_field}, e.{TABLE[i].end_field}, cap)
            if hh > ring.held[{i}]:
                ring.held[{i}] = hh
""" for i in contiguous)
    caps = "".join(f"    caps{i} = meta.{TABLE[i].max_field} if meta is not None else ()\n"
                   for i in contiguous)

    def exceeds(i: int) -> str:
        test = f"hw{i} > m[{3 * i}] or lx{i} > m[{3 * i + 1}] or al{i} > m[{3 * i + 2}]"
        return test if i in always else f"(u{i} is not None and ({test}))"

    return f"""
def push_many(self, recs):
    if not recs:
        return []
    events = []
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
{caps}    for e in recs:
        ring_no = e.ring
        last[ring_no] = e
        if e.{tasks} < BATCH:
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
                elif e.{tasks} == top.{tasks} and top.ring == ring_no:
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
{figures}        usage = ({usage})
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
        if al{TASKS_AT} == 1:
            req = ring.request
{request}        if ring.nested:  # a ring where a scope nested before its parent allocated: see _nested_end
            self._nested_end(ring, b, e, ({allocs},))
{held}        ring.scopes += 1
        scopes += 1
        if {" or ".join(exceeds(i) for i in n)} or ring.scopes == 1:
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
"""


@functools.cache
def _install_push() -> None:
    """:meth:`Pairer.push_many` becomes :func:`_push_source`'s, compiled once (at the first pairer)."""
    Pairer.push_many = unrolled(_push_source(), {  # type: ignore[method-assign]
        "BATCH": BATCH, "DEPTH_CAP": DEPTH_CAP, "Scope": Scope, "UnmatchedEnd": UnmatchedEnd, "Usage": Usage,
        "_Ring": _Ring, "held_bytes": held_bytes})["push_many"]
