"""A small simulator of the simpler runtime's four rings, writing ``scope_stats.jsonl`` files.

Modelled on the user guide (§1-§2, §5), the "Sizing facts" of ``scope-stats-format.md`` and the
real files in ``tests/fixtures/samples``:

* scope depth selects the ring, ``ring = min(depth, 3)``; the depth-0 root scope has site
  ``(unknown):0``, the others ``<program>_orch.cpp:<line>``;
* every task takes one task-window slot, a heap block and some dep-pool entries on the ring
  of the scope that submits it; the tensormap counts live tasks (global, ``tensormap_max``;
  an entry leaves it when its task is reclaimed on its ring, and a full tensormap wedges);
* a task's block becomes reclaimable when its scope has ended *and* its consumers have run:
  consumers are taken as finished at once, except a loop-carried value (``Scenario.carry``):
  the first task of a scope at that depth is read by the first task of the next sibling scope,
  so it stays live (and, FIFO, pins everything behind it) until that task is submitted;
* reclaim is strictly FIFO per ring (the tails follow the oldest live task) and happens only
  when an allocation does not fit (the allocator has to wait);
* a task window of N holds at most N - 1 live tasks; the dep pool holds ``cap`` entries and, as
  on the runtime, its tail moves only once 64 more of the ring's tasks have been reclaimed since it
  last moved (``runtime.DEP_POOL_BATCH``), to the last reclaimed task's mark;
* the heap is the runtime's allocator (simpler's ``try_bump_heap``): a ring of ``cap`` bytes with
  a top and a tail offset; a block never straddles the end (it goes to the start when the tail is
  strictly past it, the skipped end counting as allocated until the tail passes), a wrapped ring
  never fills exactly (``tail - top > request``), and an empty ring takes a block as large as
  the ring (on the real runtime a 64 KiB request completes on a 64 KiB ring); the tail is the end
  of the last reclaimed block;
* when an allocation does not fit even after reclaiming everything reclaimable, the run
  wedges: recording stops, the open scopes stay open (only their begins are in the file), and
  the metadata says ``"fatal": false`` unless the scenario asks for a fatal.  Like the real
  runtime's simulator, :func:`write_run` then writes no scope_stats file (unless asked to, as
  the hardware path exports on failure) and a host log in the runtime's format: the deadlock
  report with the ring's sizes, then the ``orch_error_code=`` line (``clean``) or only the
  scheduler's ``Fatal error (code=N)`` line (``abort``).

Whether a program completes therefore depends on each (ring, resource) separately, and
:func:`accepted` says whether the capacities are ones the runtime accepts (task window a
power of two >= 4, dep pool >= 4, heap a multiple of 1 KiB); the simulator itself runs any.

Counters as in real files: ``*_start`` is the tail, ``*_end`` the head; the heap counts
cumulative bytes (version 6) or wraps modulo ``heap_max[ring]`` (versions 4 and 5); the dep
pool starts at 1 and is absent in version 4.  Deterministic given ``Scenario.seed``.

:func:`simulate` is pure (no I/O): it yields encoded lines, metadata first, so huge files
stream.  :func:`write_file`, :func:`live_steps`/:func:`write_live` and :func:`write_tree`
write them like the runtime does (only :func:`write_file` uses a temporary file, to run
the model once); :func:`generate_bytes` makes big benchmark files.
"""

from __future__ import annotations

import json
import math
import os
import random
import shutil
import tempfile
from collections import deque
from collections.abc import Callable, Iterator
from itertools import islice, pairwise
from pathlib import Path
from typing import Literal

import msgspec

from ringtrace.model.runtime import DEP_POOL_BATCH, RINGS, TABLE, accept, fmt_amount

MIB = 1 << 20
ROOT_SITE = "(unknown):0"
Version = Literal[4, 5, 6]
Resource = Literal["task_window", "heap", "dep_pool", "tensormap"]


class Scenario(msgspec.Struct, frozen=True, kw_only=True):
    """What to simulate.  ``loops[d]`` child scopes per depth-d scope (nesting = ``len(loops)``);
    ``tasks[d]`` tasks per depth-d scope, submitted before its children except a share ``after``.

    With ``after`` 0 (as in the real samples) a wedge always leaves only begin records at the
    tail of the file; with ``after`` > 0 a scope can wedge after its children have closed.
    A wedge comes from the capacities (a ring smaller than what a scope holds at once, or a
    tiny ``tensormap_max``); ``growth`` makes it arrive late in the run, as a longer sequence does.
    """

    name: str = "custom"
    seed: int = 0
    program: str = "demo"  # sites are "<program>_orch.cpp:<line>" (basename cut to 31 bytes)
    version: Version = 6
    loops: tuple[int, ...] = (4, 8, 4)  # loops[0]: layers under the root
    tasks: tuple[int, ...] = (0, 2, 3, 2)
    after: float = 0.0  # share of a scope's tasks submitted after its children
    sites: int = 2  # distinct sibling sites per depth (alternating), e.g. attention / MoE
    tensor_bytes: tuple[int, int] = (64 << 10, 4 * MIB)  # heap block per task, min/max (1 KiB steps)
    growth: float = 0.0  # blocks of layer i are (1 + growth * i) times bigger
    deps: tuple[int, int] = (0, 4)  # dep-pool entries per task, min/max
    task_window_max: tuple[int, int, int, int] = (16384,) * 4
    heap_max: tuple[int, int, int, int] = (256 * MIB,) * 4
    dep_pool_max: tuple[int, int, int, int] = (16384,) * 4
    tensormap_max: int = 65536
    fatal: bool = False  # the metadata says "fatal": true (a latched runtime fatal)
    drop_rate: float = 0.0  # share of records the collector drops (omitted; counted in "dropped")
    carry: int = 0  # depth (>= 1) whose scopes pass a value to the next sibling scope (0: none)

    def __post_init__(self) -> None:
        if len(self.tasks) != len(self.loops) + 1:
            raise ValueError(f"tasks needs {len(self.loops) + 1} entries (depth 0..{len(self.loops)})")
        if len(self.loops) > 64 or not 0 <= self.drop_rate < 1 or not 0 <= self.after <= 1:
            raise ValueError("nesting over 64, or drop_rate outside [0, 1), or after outside [0, 1]")
        if not 0 <= self.carry <= len(self.loops):
            raise ValueError(f"carry must be a scope depth in 1..{len(self.loops)} (or 0)")


def accepted(scn: Scenario) -> list[str]:
    """Why the runtime would refuse ``scn``'s capacities at set-up (empty: it accepts them)."""
    out: list[str] = []
    for ring in range(RINGS):
        for r in TABLE:  # each resource's rule, as the runtime's table states it
            n: int = getattr(scn, f"{r.name}_max")[ring]
            if accept(r.name, n) == n:
                continue
            why = (f"is not a power of two >= {r.floor}" if r.power_of_two else
                   f"is not a multiple of {fmt_amount(r.name, r.granule)}" if r.granule > 1 else f"is under {r.floor}")
            out.append(f"ring {ring}: {r.name.replace('_', ' ')} {n} {why}")
    return out


class Report(msgspec.Struct, frozen=True):
    """The failing ring's state when an allocation did not fit (what the runtime's deadlock report prints)."""

    task_window: int
    task_head: int
    task_tail: int
    heap: int
    heap_head: int
    heap_tail: int
    requested: int
    dep_pool: int
    dep_used: int
    dep_needed: int
    scope_tasks: int


class Outcome(msgspec.Struct, frozen=True):
    """How a simulated run ends.  ``ring``/``resource``/``orch_error_code`` are set when it wedged."""

    total: int  # records the device attempted
    dropped: int
    wedged: bool
    ring: int | None = None
    depth: int | None = None  # depth of the scope whose allocation failed (the innermost open one)
    resource: Resource | None = None
    orch_error_code: int | None = None
    report: Report | None = None


Rec = tuple[str, str, int, int, int, int, int, int, int, int, int]
"""site, phase, depth, ring, then tail/head of task window, heap and dep pool, then tensormap."""


class _Frame:
    """What keeps a task's block live: its scope (``closed`` at scope end)."""

    __slots__ = ("closed",)

    def __init__(self) -> None:
        self.closed = False


class _Carried(_Frame):
    """A loop-carried value's task: reclaimable once its scope ended and its consumer ran."""

    __slots__ = ("consumed", "ended")

    def __init__(self) -> None:
        super().__init__()
        self.ended = self.consumed = False

    def end(self) -> None:
        self.ended = True
        self.closed = self.consumed

    def consume(self) -> None:
        self.consumed = True
        self.closed = self.ended


class _Ring:
    __slots__ = ("awraps", "dcap", "dh", "dmark", "dret", "dt", "fifo", "hsize", "rwraps", "tail", "tcap", "th",
                 "top", "tt")

    def __init__(self, tw: int, heap: int, dep: int) -> None:
        self.tcap, self.hsize, self.dcap = tw - 1, heap, dep  # usable room (see module docstring)
        self.tt = self.th = 0
        self.top = self.tail = 0  # heap offsets (the runtime's heap_top_/heap_tail_)
        self.awraps = self.rwraps = 0  # times the top / the tail wrapped (the collector unrolls them)
        self.dt = self.dh = 1  # dep-pool entry 0 is reserved
        self.dmark = 1  # the dep-pool head after the last reclaimed task (where the tail moves to)
        self.dret = 0  # tasks reclaimed when the dep-pool tail last moved
        self.fifo: deque[tuple[_Frame, int, int]] = deque()  # live tasks (frame, block end offset, dep mark)

    @property
    def hh(self) -> int:
        """The heap head as the collector writes it (monotonic)."""
        return self.awraps * self.hsize + self.top

    @property
    def ht(self) -> int:
        return self.rwraps * self.hsize + self.tail

    def place(self, nbytes: int) -> int | None:
        """Where a block of ``nbytes`` goes now (its start offset), or None: simpler's try_bump_heap."""
        top, tail, size = self.top, self.tail, self.hsize
        if top >= tail:
            if size - top >= nbytes:
                return top
            if tail > nbytes or (top == tail and nbytes <= size):
                return 0
            return None
        return top if tail - top > nbytes else None

    def fits(self, nbytes: int, ndeps: int) -> bool:
        return (self.th + 1 - self.tt <= self.tcap and (nbytes == 0 or self.place(nbytes) is not None)
                and self.dh + ndeps - self.dt <= self.dcap)

    def bump(self, nbytes: int) -> int:
        """Allocate a block that fits (:meth:`place`); its end offset (a block of 0 bytes ends at the top)."""
        top, tail, size = self.top, self.tail, self.hsize
        if nbytes == 0:
            return top
        if top >= tail and size - top < nbytes:  # to the start: a wrap, or an empty ring rebased to 0
            self.awraps += 1
            if not tail > nbytes:
                self.tail = 0
                self.rwraps += 1
            self.top = nbytes
        else:
            self.top = top + nbytes
        return self.top

    def retire(self, end: int, mark: int) -> None:
        """The oldest live task was reclaimed: the heap tail follows its block's end."""
        self.tt += 1
        if end < self.tail:
            self.rwraps += 1
        self.tail = end
        self.dmark = mark

    def reclaim_deps(self) -> None:
        """The dep pool has to wait (simpler's PTO2DepListPool::reclaim): its tail moves to the last reclaimed
        task's mark once 64 tasks retired since it last moved."""
        if self.tt >= self.dret + DEP_POOL_BATCH:
            self.dt, self.dret = max(self.dt, self.dmark), self.tt


class _Engine:
    """Runs a scenario once, yielding :data:`Rec` tuples; ``failure`` is set when it wedged."""

    def __init__(self, scn: Scenario) -> None:
        self.scn = scn
        self.rng = random.Random(scn.seed)
        self.rings = [_Ring(scn.task_window_max[i], scn.heap_max[i], scn.dep_pool_max[i]) for i in range(RINGS)]
        self.tensors = 0
        self.carried: _Carried | None = None  # the latest loop-carried value, read by the next sibling
        self.failure: tuple[int, int, Resource, int] | None = None  # ring, depth, resource, orch_error_code
        self.report: Report | None = None  # the ring's state when the allocation failed
        base = f"{scn.program}_orch.cpp"[:31]
        lines = random.Random(f"{scn.seed}:sites")
        self.site_names = [[ROOT_SITE]] + [
            [f"{base}:{40 + 17 * d + 5 * s + lines.randrange(5)}" for s in range(max(1, scn.sites))]
            for d in range(1, len(scn.loops) + 1)]
        lo, hi = scn.tensor_bytes
        self.kib = (max(1, lo >> 10), max(1, hi >> 10) - max(1, lo >> 10) + 1)
        self.deps = (scn.deps[0], scn.deps[1] - scn.deps[0] + 1)

    def run(self) -> Iterator[Rec]:
        return self._scope(0, 0, 0)

    def _sample(self, site: str, phase: str, depth: int, rn: int) -> Rec:
        r = self.rings[rn]
        return (site, phase, depth, rn, r.tt, r.th, r.ht, r.hh, r.dt, r.dh, self.tensors)

    def _scope(self, depth: int, index: int, layer: int, last: bool = True) -> Iterator[Rec]:
        scn, rn = self.scn, min(depth, RINGS - 1)
        names = self.site_names[depth]
        site, frame = names[index % len(names)], _Frame()
        scale, n = 1.0 + scn.growth * layer, scn.tasks[depth]
        post = round(n * scn.after)
        carried: _Carried | None = None
        if depth == scn.carry and n:
            carried = _Carried()
            if last:  # nothing reads the last sibling's value: only its scope holds it
                carried.consume()
        yield self._sample(site, "begin", depth, rn)
        if not self._submit(rn, depth, frame, n - post, scale, carried):
            return
        if depth < len(scn.loops):
            for i in range(scn.loops[depth]):
                yield from self._scope(depth + 1, i, i if depth == 0 else layer, i == scn.loops[depth] - 1)
                if self.failure is not None:
                    return
        if not self._submit(rn, depth, frame, post, scale, carried if n - post == 0 else None):
            return
        yield self._sample(site, "end", depth, rn)
        frame.closed = True
        if carried is not None:
            carried.end()

    def _submit(self, rn: int, depth: int, frame: _Frame, count: int, scale: float,
                carried: _Carried | None = None) -> bool:
        """Allocate ``count`` tasks on ring ``rn``; False (and ``failure`` set) when the run wedges.

        With ``carried``, the first task's block is that loop-carried value, and the task reads
        the previous sibling's value (which can then be reclaimed).
        """
        ring, rand, fifo = self.rings[rn], self.rng.random, self.rings[rn].fifo
        k0, kspan = self.kib
        d0, dspan = self.deps
        for i in range(count):
            nbytes = int((k0 + int(rand() * kspan)) * scale) << 10
            ndeps = d0 + int(rand() * dspan)
            if not ring.fits(nbytes, ndeps):
                self._reclaim(ring)  # the allocator has to wait: reclaim what is reclaimable, oldest first
                if ring.dh + ndeps - ring.dt > ring.dcap:
                    ring.reclaim_deps()
                if not ring.fits(nbytes, ndeps):
                    self.failure = (rn, depth, *self._why(ring, frame, nbytes, ndeps))
                    own = sum(1 for f, _, _ in fifo if f is frame)
                    self.report = Report(ring.tcap + 1, ring.th, ring.tt, ring.hsize, ring.hh, ring.ht, nbytes,
                                         ring.dcap, ring.dh - ring.dt, ndeps, own)
                    return False
            if self.tensors >= self.scn.tensormap_max:
                self.failure = (rn, depth, "tensormap", 11)
                return False
            end = ring.bump(nbytes)
            ring.dh += ndeps
            if carried is not None and i == 0:
                fifo.append((carried, end, ring.dh))
                if self.carried is not None:
                    self.carried.consume()
                self.carried = carried
            else:
                fifo.append((frame, end, ring.dh))
            ring.th += 1
            self.tensors += 1
        return True

    def _reclaim(self, ring: _Ring) -> None:
        fifo = ring.fifo
        while fifo and fifo[0][0].closed:
            _, end, mark = fifo.popleft()
            ring.retire(end, mark)
            self.tensors -= 1

    @staticmethod
    def _why(ring: _Ring, frame: _Frame, nbytes: int, ndeps: int) -> tuple[Resource, int]:
        if nbytes and ring.place(nbytes) is None:
            return "heap", 2
        if ring.dh + ndeps - ring.dt > ring.dcap:
            return "dep_pool", 4
        own = all(f is frame for f, _, _ in ring.fifo)  # one scope filled the window alone
        return "task_window", 1 if own else 3


class _Run:
    """One pass of the model with the collector's drops; counts as it goes."""

    def __init__(self, scn: Scenario) -> None:
        self.scn, self.engine = scn, _Engine(scn)
        self.total = self.dropped = 0

    def records(self) -> Iterator[Rec]:
        """The records that reach the file."""
        rate, rand = self.scn.drop_rate, random.Random(f"{self.scn.seed}:drops").random
        for rec in self.engine.run():
            self.total += 1
            if rate > 0 and rand() < rate:
                self.dropped += 1
            else:
                yield rec

    def outcome(self) -> Outcome:
        """After :meth:`records` is exhausted: totals and how the run ended."""
        if self.engine.failure is None:
            return Outcome(self.total, self.dropped, False)
        ring, depth, resource, code = self.engine.failure
        return Outcome(self.total, self.dropped, True, ring, depth, resource, code, self.engine.report)


def outcome(scn: Scenario) -> Outcome:
    """Run ``scn`` without encoding: totals and how it ends."""
    run = _Run(scn)
    for _ in run.records():
        pass
    return run.outcome()


def meta_line(scn: Scenario, out: Outcome) -> bytes:
    """Line 1, with the keys in the runtime's order for ``scn.version``."""
    meta: dict[str, object] = {"version": scn.version, "fatal": scn.fatal, "dropped": out.dropped,
                               "total": out.total, "task_window_max": list(scn.task_window_max),
                               "heap_max": list(scn.heap_max)}
    if scn.version >= 5:
        meta["dep_pool_max"] = list(scn.dep_pool_max)
    meta["tensormap_max"] = scn.tensormap_max
    return (json.dumps(meta) + "\n").encode()


_HEAD = '{"site": "%s", "phase": "%s", "depth": %d, "ring": %d, "task_window_start": %d, "task_window_end": %d, '
_V5 = _HEAD + '"heap_start": %d, "heap_end": %d, "dep_pool_start": %d, "dep_pool_end": %d, "tensormap": %d}\n'
_V4 = _HEAD + '"heap_start": %d, "heap_end": %d, "tensormap": %d}\n'


def _formatter(scn: Scenario) -> Callable[[Rec], str]:
    if scn.version == 6:
        return _V5.__mod__
    caps = scn.heap_max
    if scn.version == 5:
        return lambda r: _V5 % (*r[:6], r[6] % caps[r[3]], r[7] % caps[r[3]], *r[8:])
    return lambda r: _V4 % (*r[:6], r[6] % caps[r[3]], r[7] % caps[r[3]], r[10])


def simulate(scn: Scenario) -> Iterator[bytes]:
    """The file's lines, encoded, metadata first.  Pure; runs the model twice (totals first)."""
    yield meta_line(scn, outcome(scn))
    fmt = _formatter(scn)
    for rec in _Run(scn).records():
        yield fmt(rec).encode()


def _blocks(recs: Iterator[Rec], fmt: Callable[[Rec], str], lines: int) -> Iterator[bytes]:
    while batch := list(islice(recs, lines)):
        yield "".join(map(fmt, batch)).encode()


def blocks(scn: Scenario, lines: int = 4096) -> Iterator[bytes]:
    """The same bytes as :func:`simulate`, ``lines`` lines per block (the metadata line alone first); faster."""
    yield meta_line(scn, outcome(scn))
    yield from _blocks(_Run(scn).records(), _formatter(scn), lines)


def write_file(path: str | Path, scn: Scenario) -> int:
    """Write ``scn`` to ``path`` like the runtime: ``open("w")`` (truncate in place, same inode).

    One pass of the model: the records go to an anonymous temporary file beside ``path``
    while they are counted, then the metadata line and the records are written to ``path``.
    Memory stays small for any size; returns the bytes written.
    """
    path = Path(path)
    run = _Run(scn)
    with tempfile.TemporaryFile(dir=path.parent) as body:
        for block in _blocks(run.records(), _formatter(scn), 4096):
            body.write(block)
        body.seek(0)
        with open(path, "wb") as fh:
            fh.write(meta_line(scn, run.outcome()))
            shutil.copyfileobj(body, fh, 1 << 20)
            return fh.tell()


_DETAIL = {1: "SCOPE_DEADLOCK - a scope submitted more tasks than the ring's task window can hold",
           2: "HEAP_RING_DEADLOCK - the task allocator could not reserve the heap bytes required for another task",
           3: "FLOW_CONTROL_DEADLOCK - the task allocator could not admit another task because the configured task "
              "window had no available slot",
           4: "DEP_POOL_OVERFLOW - a task's producer dependencies exceeded the runtime's available fanin "
              "representation capacity",
           11: "TENSORMAP_OVERFLOW - the tensormap has no free entry"}


def _report_lines(out: Outcome) -> list[str]:
    """The deadlock report the runtime prints for ``out`` (its ring's sizes, what was asked)."""
    rep, ring = out.report, out.ring
    if rep is None or ring is None:
        return []
    f = "[ERROR] report_deadlock: [pto_ring_buffer.h:%d] %s"
    bar = "=" * 40
    used = rep.heap_head - rep.heap_tail
    heap = (f % (444, f"  Heap ring {ring}: top={rep.heap_head % rep.heap}, tail={rep.heap_tail % rep.heap}, "
                      f"size={rep.heap}, used={used}, available={rep.heap - used}"))
    active = rep.task_head - rep.task_tail
    task = (f % (440, f"  Task ring {ring}: current={rep.task_head}, last_alive={rep.task_tail}, "
                      f"active={active}/{rep.task_window} ({100 * active / rep.task_window:.1f}%)"))
    head = [f % (431, f"Head task {rep.task_tail} is the oldest task owned by an open scope on this ring ->"),
            f % (432, "no open scope can end while the orchestrator is blocked here."),
            f % (433, "Provable head-of-line deadlock.")]
    if out.resource == "heap":
        return [f % (423, bar), f % (425, f"FATAL: Task Allocator Deadlock - Heap Exhausted! ring={ring}"),
                f % (429, bar), *head, task, heap, f % (449, f"  Requested:  {rep.requested} bytes"),
                f % (484, bar)]
    if out.resource == "task_window" and out.orch_error_code == 3:
        return [f % (423, bar), f % (427, f"FATAL: Task Allocator Deadlock - Task Ring Full! ring={ring}"),
                f % (429, bar), *head, task, heap, f % (484, bar)]
    if out.resource == "task_window":
        g = "[ERROR] check_scope_can_accept_task: [pto_orchestrator.cpp:%d] %s"
        n = rep.task_window
        return [g % (572, bar), g % (573, f"FATAL: Scope Deadlock Detected! (ring {ring})"), g % (574, bar),
                g % (575, f"Tasks in current scope ({rep.scope_tasks}) >= task_window_size ({n})."),
                g % (576, f"  scope_depth:        {out.depth}"), g % (577, f"  ring_id:            {ring}"),
                g % (578, f"  scope_task_count:   {rep.scope_tasks}"),
                g % (579, f"  active_tasks:       {active} / {n}"),
                g % (586, f"  2. Increase task window (current: {n})"), g % (590, bar)]
    if out.resource == "dep_pool":  # the runtime's dep-pool report names no ring
        d = "[ERROR] report_deadlock: [pto_ring_buffer.cpp:%d] %s"
        cap = rep.dep_pool
        return [d % (141, bar), d % (142, "FATAL: Dependency Pool Deadlock Detected!"), d % (143, bar),
                d % (147, "Provable head-of-line deadlock."),
                d % (151, f"  - Pool used:     {rep.dep_used} / {cap} ({100 * rep.dep_used / cap:.1f}%)"),
                d % (157, f"  - Needed:        {rep.dep_needed} entries"),
                d % (173, f"  Increase dep pool capacity (current: {cap}, recommended: {2 * cap})"), d % (176, bar)]
    return []


def host_log_text(scn: Scenario, out: Outcome, mode: Literal["clean", "abort"] = "clean") -> str:
    """The host log the runtime writes for a run of ``scn`` that ended as ``out`` (formats: the format
    doc, "The host log around a failure"): a banner, and for a failed run the deadlock report, then the
    ``orch_error_code=`` line and its detail (``clean``), or the scheduler's ``Fatal error (code=N)`` line
    before the process aborts (``abort``).  ``Ring buffer sizes:`` is an INFO line: not written."""
    lines = ["=== Runtime: tensormap_and_ringbuffer  Level: 2 ===", f"  {scn.program}::{scn.name} ..."]
    if not out.wedged:
        return "\n".join([*lines, f"  {scn.program}::{scn.name} PASSED"]) + "\n"
    code = out.orch_error_code or 0
    lines += _report_lines(out)
    lines.append(f"[ERROR] handle_orchestrator_exit: [scheduler_cold_path.cpp:65] Thread 0: Fatal error (code={code}),"
                 " sending EXIT_SIGNAL to all cores. completed_tasks=0, total_tasks=0")
    if mode == "abort":
        lines += ["terminate called after throwing an instance of 'AssertionError'"]
        return "\n".join(lines) + "\n"
    v = "[mono_ns=1][T0x1][ERROR] validate_runtime_impl: [runtime_maker.cpp:1019] "
    lines += [v + f"PTO2 runtime failed: orch_error_code={code} sched_error_code=0 runtime_status=-{code}",
              v + f"error detail: orch_error_code={code} {_DETAIL.get(code, 'UNKNOWN - see the device log')}",
              f"  {scn.program}::{scn.name} FAILED: finalize_native_run failed with code -{code}"]
    return "\n".join(lines) + "\n"


def write_run(path: str | Path, scn: Scenario, host_log: str | Path, *, mode: Literal["clean", "abort"] = "clean",
              export_on_failure: bool = False) -> Outcome:
    """One run as the runtime's simulator leaves it: ``host_log`` always; the scope_stats file at ``path``
    only when the run completed (or, with ``export_on_failure``, as the hardware path does, always)."""
    out = outcome(scn)
    Path(host_log).parent.mkdir(parents=True, exist_ok=True)
    Path(host_log).write_text(host_log_text(scn, out, mode), encoding="utf-8")
    if not out.wedged or export_on_failure:
        Path(path).parent.mkdir(parents=True, exist_ok=True)
        write_file(path, scn)
    return out


class Step(msgspec.Struct, frozen=True):
    """One thing a live writer did: created the file empty, wrote bytes, or closed it."""

    path: Path
    action: Literal["create", "write", "close"]
    size: int  # bytes in the file after the step
    scenario: str


def live_steps(path: str | Path, scn: Scenario, *, chunks: int = 3, stream_records: int = 0) -> Iterator[Step]:
    """Write ``scn`` to ``path`` step by step; the caller waits between steps as it likes.

    Default (``stream_records`` 0), like the runtime: create the file empty (``O_TRUNC``,
    same inode if it exists), then all bytes in ``chunks`` writes cut at arbitrary byte
    offsets (mid-line), then close.  With ``stream_records`` N > 0, a streaming writer: the
    metadata line, then N records per write as they happen.  Each write is one ``write``
    call (``os.write``), visible to readers when the step is yielded.
    """
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    size = 0
    try:
        yield Step(path, "create", 0, scn.name)
        if stream_records > 0:
            pieces: Iterator[bytes] = blocks(scn, stream_records)
        else:
            data = b"".join(blocks(scn))
            cut = [len(data) * i // max(1, chunks) for i in range(max(1, chunks) + 1)]
            pieces = (data[a:b] for a, b in pairwise(cut) if b > a)
        for piece in pieces:
            view = memoryview(piece)
            while view:
                view = view[os.write(fd, view):]
            size += len(piece)
            yield Step(path, "write", size, scn.name)
    finally:
        os.close(fd)
    yield Step(path, "close", size, scn.name)


def write_live(path: str | Path, scn: Scenario, *, chunks: int = 3, pause: Callable[[], None],
               stream_records: int = 0) -> int:
    """:func:`live_steps`, calling ``pause()`` after the create and after every write; returns the size."""
    size = 0
    for step in live_steps(path, scn, chunks=chunks, stream_records=stream_records):
        size = step.size
        if step.action != "close":
            pause()
    return size


def named(name: str, *, seed: int = 0, version: Version = 6, program: str = "") -> Scenario:
    """The demo's scenarios: ``healthy``, ``tight``, ``collapse``, ``wedge``, ``fatal``.

    * healthy: an L2 model on the compile-default rings (nothing reclaims, nothing near full);
    * tight: small rings like the paged-attention sample: reclaim keeps up, rings run near full;
    * collapse: 6 nesting levels with all work past depth 3 (ring 3 carries everything);
    * wedge: blocks grow layer by layer until a ring-3 scope cannot fit (HEAP_RING_DEADLOCK);
    * fatal: the wedge with ``"fatal": true`` in the metadata.
    """
    progs = {"healthy": "decode_fwd", "tight": "paged_attention", "collapse": "prefill_fwd", "wedge": "moe_layer",
             "fatal": "moe_layer"}
    if name not in progs:
        raise ValueError(f"unknown scenario {name!r}; expected one of {', '.join(progs)}")
    base = Scenario(name=name, seed=seed, version=version, program=program or progs[name],
                    tensor_bytes=(64 << 10, 1 * MIB))
    if name == "tight":
        return msgspec.structs.replace(
            base, loops=(2, 32, 4), tasks=(0, 1, 3, 2), sites=1, tensor_bytes=(1024, 2048), deps=(0, 3),
            task_window_max=(8, 8, 16, 64), heap_max=(8192, 16384, 32768, 65536), dep_pool_max=(64, 64, 256, 512))
    if name == "collapse":
        return msgspec.structs.replace(
            base, loops=(2, 1, 1, 4, 3, 2), tasks=(0, 0, 0, 0, 2, 2, 3), sites=1, tensor_bytes=(512 << 10, 2 * MIB),
            heap_max=(40 * MIB,) * 4)  # ring 3's scopes hold 35 MiB: a proven need near its capacity
    if name in ("wedge", "fatal"):
        return msgspec.structs.replace(
            base, loops=(6, 2, 3, 2), tasks=(0, 1, 2, 4, 2), tensor_bytes=(1 * MIB, 2 * MIB), growth=0.6,
            heap_max=(256 * MIB,) * 3 + (24 * MIB,), fatal=name == "fatal")
    return base


NAMES: tuple[str, ...] = ("healthy", "tight", "collapse", "wedge", "fatal")


def _interleave(gens: list[Iterator[Step]]) -> Iterator[Step]:
    """Round-robin over several writers (ranks write their files at the same time)."""
    live = list(gens)
    while live:
        for gen in list(live):
            step = next(gen, None)
            if step is None:
                live.remove(gen)
            else:
                yield step


def write_tree(root: str | Path, *, ts: str = "20261130_120000", ranks: int = 2, dispatches: int = 2,
               seed: int = 0, chunks: int = 3) -> Iterator[Step]:
    """Write an L2 run and an L3 run below ``root/build_output``, one step at a time.

    L2: ``paged_attention_<ts>/dfx_outputs/scope_stats/scope_stats.jsonl`` (the tight scenario).
    L3: ``moe_l3_<ts>/dfx_outputs/rank<N>/d<K>/scope_stats/scope_stats.jsonl`` for every rank and
    dispatch (healthy or tight, with ``dispatch_program.json`` beside), the ranks of a dispatch
    written at the same time; the last rank's last dispatch wedges with ``"fatal": true``.
    The caller drives the generator and waits between steps (a live demo) or not (tests).
    """
    out = Path(root) / "build_output"
    l2 = out / f"paged_attention_{ts}" / "dfx_outputs" / "scope_stats" / "scope_stats.jsonl"
    yield from live_steps(l2, named("tight", seed=seed), chunks=chunks)
    l3 = out / f"moe_l3_{ts}" / "dfx_outputs"
    for k in range(dispatches):
        gens: list[Iterator[Step]] = []
        for n in range(ranks):
            d = l3 / f"rank{n}" / f"d{k}"
            d.mkdir(parents=True, exist_ok=True)
            (d / "dispatch_program.json").write_text(json.dumps({"program": f"moe_layer_{k}"}) + "\n")
            last = n == ranks - 1 and k == dispatches - 1
            kind = "fatal" if last else ("healthy", "tight")[(n + k) % 2]
            scn = named(kind, seed=seed + 100 * k + n, program="moe_layer")
            gens.append(live_steps(d / "scope_stats" / "scope_stats.jsonl", scn, chunks=chunks))
        yield from _interleave(gens)


def bench_scenario(target_bytes: int, seed: int = 0) -> Scenario:
    """A healthy-looking model on the default rings with as many layers as make ~``target_bytes``."""
    probe = Scenario(name="bench", seed=seed, program="deepseek_prefill", loops=(4, 8, 4, 2), tasks=(1, 2, 2, 3, 2))
    small = sum(map(len, simulate(probe)))
    bigger = msgspec.structs.replace(probe, loops=(8, *probe.loops[1:]))
    per_layer = (sum(map(len, simulate(bigger))) - small) / 4
    layers = max(1, math.ceil(target_bytes / (per_layer * 1.05)))  # counters get longer as the file grows
    return msgspec.structs.replace(probe, loops=(layers, *probe.loops[1:]))


def generate_bytes(target_bytes: int, seed: int = 0) -> Callable[[str | Path], int]:
    """A writer of a ~``target_bytes`` realistic file for benchmarks: ``generate_bytes(100 << 20)(path)``."""
    scn = bench_scenario(target_bytes, seed)
    return lambda path: write_file(path, scn)
