"""Ring sizing from every run of a program: what the runs prove, the bracket, the next run.  Pure.

Evidence, combined and never invented (the format doc's "Sizing facts"):

* a run that completed at capacity C proves the need is at most C, for every ring and resource
  (``upper_bound``: the smallest such C), in that run's configuration;
* a run that failed proves the need exceeds C for the one ring and resource its host log names,
  C read from the log itself (the deadlock report's size) or else from the run's metadata; a
  wedged file without a log, for the resource its diagnosis names.  The other resources of that
  run learn nothing.  A dep-pool report names no ring: it is pinned on the one ring it can be
  (the only one in use whose bracket holds C, or the one the advice measured at exactly C);
* the records prove lower bounds (``ringtrace.stages.need``): what one open scope's tasks held,
  one task's block, the dep-pool entries of a ring's first 64 tasks.  Occupancy never is a need;
* codes that sizing cannot fix (program or runtime errors) give no RunConfig.

The bracket ``[lower, upper]`` of each (ring, resource) narrows run by run.  It is closed when
``upper`` is at most :data:`CLOSE` (1.25) times the proven need (after rounding to what the runtime
accepts: a window's next power of two, a whole KiB of heap), or no accepted size lies between; then
``recommended`` is ``max(upper, lower * (1 + headroom))``.  Otherwise ``measure_next`` is the proven
need times 1.25: a completion there closes the bracket (and proves every other size of that run at
once), a failure raises the proven need by a quarter.  An estimate is never a proof, and a completed
size below a proven need wins over it (the real run wins).  Every probe of a program goes in one run.

The program's answer is ``final`` only when every bracket is closed and some completed run had every
size at most the final RunConfig's (the resources interact: a proof holds for its configuration).

A program (:func:`program_key`: the ``program`` label, else the run name less its
``_YYYYmmdd_HHMMSS`` suffix, else the set of scope sites its files share) is one answer over all its
ranks (the largest need of any rank, one RunConfig for all).
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterable, Sequence
from pathlib import PurePath
from typing import Literal

import msgspec

from ringtrace.model.records import (
    Advice,
    Basis,
    HostLog,
    Labels,
    Meta,
    Peak,
    RunAdvice,
    RunFinished,
    RunSummary,
    WedgeCause,
)
from ringtrace.model.runtime import (
    BY_NAME,
    COMPILE_DEFAULTS,
    CONFIG_KEYS,
    DEADLOCK_CODES,
    ERROR_CODES,
    KIB,
    MIN_ACCEPTED,
    RESOURCES,
    RINGS,
    TABLE,
    TASKS,
    accept,
    accept_below,
    describe_code,
    error_name,
    fmt_amount,
    sizing_resource,
)
from ringtrace.sources.paths import run_folder
from ringtrace.stages.need import dep_pool_estimate, proven_need

DEFAULT_HEADROOM = 0.1
_CONTIGUOUS = frozenset(r.name for r in TABLE if r.contiguous)  # the heap: contiguous blocks, one task's must fit
_IN_BYTES = frozenset(r.config_key for r in TABLE if r.bytes)  # RunConfig fields in bytes (ring_heap)
CLOSE = 1.25
"""A bracket is closed when a size that completed is at most this many times the proven need."""
__all__ = [
    "DEFAULT_HEADROOM",
    "GROUPINGS",
    "KIB",
    "ProgramAnswer",
    "RunFacts",
    "accept",
    "action",
    "advice_json",
    "advise",
    "advise_programs",
    "advise_runs",
    "evidence",
    "fmt",
    "group_key",
    "grouping",
    "next_above",
    "program_advice",
    "program_json",
    "program_key",
    "run_config_json",
    "snippet",
]


class RunFacts(msgspec.Struct, frozen=True):
    """What advise needs of one finished run: where it sits, its summary, its host log and wedge causes.

    A run known only from its host log has ``path`` "" and an empty summary (no metadata)."""

    path: str
    labels: Labels
    summary: RunSummary
    host_log: HostLog | None = None
    causes: tuple[WedgeCause, ...] = ()

    @property
    def name(self) -> str:
        lab = self.labels
        parts = [p for p in (lab.run, f"rank{lab.rank}" if lab.rank else "", f"d{lab.dispatch}" if lab.dispatch else "")
                 if p]
        return "/".join(parts) or self.path or (self.host_log.path if self.host_log else "")


class ProgramAnswer(msgspec.Struct, frozen=True):
    """One program's answer over all its runs: per ring and resource the bracket and the value to run,
    ``run_config`` the complete RunConfig for the next run (relative to the compile defaults), ``final``
    when that RunConfig is the recommendation.  ``blocked`` names failures that sizing cannot fix."""

    program: str
    sources: tuple[str, ...]
    runs: int
    final: bool
    advice: tuple[Advice, ...]
    run_config: tuple[tuple[str, int | tuple[int, ...]], ...]
    blocked: tuple[str, ...] = ()
    notes: tuple[str, ...] = ()  # evidence that could not be used (a report that names no ring), and why
    grouped_by: str = ""  # the rule of GROUPINGS that made these runs one program
    covers: tuple[str, ...] = ()  # a covering answer: the programs (cases of one class) it covers; never final
    # on its own evidence, it is the largest of their answers per ring and resource


def fmt(resource: str, n: int | None) -> str:
    return "-" if n is None else fmt_amount(resource, n)


def exact(resource: str, n: int) -> str:
    """``n`` to the unit: bytes where a heap size is not a whole KiB (a proof is about that very size)."""
    r = BY_NAME.get(resource)
    return f"{n} B" if r is not None and r.bytes and n % KIB else fmt(resource, n)


def next_above(resource: str, n: int) -> int:
    """The smallest accepted capacity > ``n``."""
    return accept(resource, n + 1)


_STAMP = re.compile(r"_\d{8}_\d{6}$")


def program_key(labels: Labels, path: str) -> str:
    """Runs of one program: the ``program`` label, else the run name less its timestamp, else the path."""
    return labels.program or _STAMP.sub("", labels.run) or path


def group_key(labels: Labels, path: str) -> tuple[str, str, str]:
    """Runs of one program on one rank and dispatch (``diff`` matches runs by it)."""
    return (program_key(labels, path), labels.rank, labels.dispatch)


# -- what one run proves ----------------------------------------------------------------------------


def _completed(s: RunSummary) -> bool:
    """The run ran to its end: nothing open, not fatal, every record there (drops allowed)."""
    m = s.meta
    if m is not None and m.dropped > 0:  # missing begins or ends leave scopes open: not a wedge
        return not m.fatal and s.complete
    return m is not None and not s.wedged and not m.fatal and s.complete and s.open_scopes == 0


def _code(run: RunFacts) -> int | None:
    """The failure code the run reports (host log first, then the diagnosis of a wedged file); None: none."""
    log = run.host_log
    if log is not None and log.failed:
        if log.latched_code:
            return log.latched_code
        if log.fatal_code:
            return log.fatal_code
        resource = log.deadlock.resource if log.deadlock is not None else None
        return DEADLOCK_CODES.get(resource or "", -1)
    if run.summary.meta is not None and run.summary.meta.dropped > 0 and not run.summary.meta.fatal:
        return None  # scopes left open by missing records are not a wedge
    if run.summary.wedged and run.causes:
        return run.causes[-1].code if run.causes[-1].code is not None else -1
    if run.summary.wedged or (run.summary.meta is not None and run.summary.meta.fatal):
        return -1
    return None


def _log_capacity(log: HostLog, resource: str) -> int | None:
    """The capacity of ``resource`` the log's deadlock report states (None: it does not say)."""
    dl = log.deadlock
    return dl.capacity if dl is not None and dl.resource == resource else None


class _Shortfall(msgspec.Struct, frozen=True):
    """A failed run's proof: ``resource`` on ``ring`` (None: not told) was short at ``capacity``."""

    resource: str
    ring: int | None
    capacity: int | None
    src: str
    code: int
    how: str = "failed"  # "wedged": a file's open scopes show it (no host log)
    requested: int = 0  # the heap bytes the failing allocation asked for (the deadlock report's Requested:)
    backstop: bool = False  # the allocator gave up after ~500 ms without reclaim progress, proving nothing more


def _shortfall(run: RunFacts, code: int) -> _Shortfall | None:
    log, s = run.host_log, run.summary
    resource = log.deadlock.resource if log is not None and log.deadlock is not None else None
    if resource is None:
        resource = sizing_resource(code) if code > 0 else None
    if resource is None and code == -1 and run.causes and run.causes[-1].resource in RESOURCES:
        resource = run.causes[-1].resource
    if resource is None:
        return None
    ring = log.deadlock.ring if log is not None and log.deadlock is not None else None
    if ring is None and run.causes:
        ring = run.causes[-1].ring
    if ring is None and s.wedged:
        ring = s.wedged[-1].ring
    cap = _log_capacity(log, resource) if log is not None else None
    if cap is None and ring is not None and s.meta is not None:
        cap = s.meta.capacity(resource, ring)
    asked = log.requested_bytes if log is not None and resource in _CONTIGUOUS else None
    d = log.deadlock if log is not None else None
    # a wall-clock give-up proves little, unless the report shows a request that can never fit
    backstop = d is not None and d.backstop and not (
        (d.requested_bytes or 0) > (d.heap_size or math.inf) or (d.pool_needed or 0) > (d.pool_size or math.inf))
    return _Shortfall(resource, ring, cap, run.name, code, "failed" if log is not None and log.failed else "wedged",
                      asked or 0, backstop)


def _used(p: Peak) -> bool:
    return bool(p.high_water or p.live or p.alloc or p.pinned or p.live_at_exit)


def _basis(s: RunSummary, p: Peak | None, headroom: float = DEFAULT_HEADROOM) -> Basis:
    """What the run's figures for one ring and resource are: ``tight`` only where its records prove a need within
    the headroom of its capacity (a ring that wrapped and reclaimed proves nothing: reclaim is lazy), else
    ``oversized``; ``wedged`` / ``dropped`` where the run did not end or lost records."""
    m = s.meta
    if m is not None and m.dropped > 0:
        return "dropped"
    if s.wedged or (m is not None and m.fatal) or m is None:
        return "wedged"
    need = proven_need(p, s).value if p is not None else 0
    return "tight" if p is not None and p.capacity and need * (1 + headroom) >= p.capacity else "oversized"


# -- pooling the evidence ------------------------------------------------------------------------------


class _Bound:
    """The evidence of one unit (a rank of a program) for one (ring, resource)."""

    __slots__ = (
        "completed",
        "counts",
        "est",
        "est_src",
        "failed",
        "hi",
        "hi_src",
        "known",
        "lo_need",
        "lo_src",
        "lo_why",
        "proven",
        "request",
        "retry",
        "set_aside",
        "used",
    )

    def __init__(self) -> None:
        self.lo_need = 0  # proven: the need is at least this (before rounding to an accepted capacity)
        self.lo_src = self.lo_why = ""
        self.hi: int | None = None  # smallest capacity that completed
        self.hi_src = ""
        self.completed: list[tuple[int, str]] = []  # every capacity that completed, and the run
        self.est = 0  # the records' figure (``estimate``): their proof, or for the dep pool the latest count
        self.est_src = ""
        self.proven = 0  # the most the records alone proved
        self.request = 0  # the largest request a failure report shows (heap bytes)
        self.retry = 0  # a size where the allocator gave up once after ~500 ms (backstop): run it again first
        self.counts: list[tuple[int | None, int, str]] = []  # dep pool: (the ring's window, entries live, run)
        self.failed: list[int] = []  # capacities at which this resource was proven short
        self.set_aside: list[str] = []  # wall-clock give-ups at a size that completed: load, not a size
        self.used = False
        self.known = False  # some run stated this capacity (0 in the metadata means unknown)

    def lower(self, need: int, src: str, why: str) -> None:
        if need > self.lo_need:
            self.lo_need, self.lo_src, self.lo_why = need, src, why


def _merge(bounds: Iterable[_Bound]) -> _Bound:
    """The program's bound from its ranks': it needs what its neediest rank needs, and a size is proven
    enough only when every rank that uses the resource completed at it."""
    out = _Bound()
    users = [b for b in bounds if b.used or b.failed]
    for b in users:
        out.lower(b.lo_need, b.lo_src, b.lo_why)
        if b.est > out.est:
            out.est, out.est_src = b.est, b.est_src
        out.proven, out.request = max(out.proven, b.proven), max(out.request, b.request)
        out.counts += b.counts
        out.failed += b.failed
        out.set_aside += b.set_aside
    out.used = bool(users)
    out.known = any(b.known for b in users)
    if users and all(b.hi is not None for b in users):
        top = max(users, key=lambda b: b.hi or 0)
        out.hi, out.hi_src = top.hi, top.hi_src
        every = set.intersection(*({c for c, _ in b.completed} for b in users))  # sizes every rank completed at
        out.completed = [(c, src) for c, src in users[0].completed if c in every]
    return out


Key = tuple[int, str]  # ring, resource


def _unit_bounds(runs: Sequence[RunFacts]) -> tuple[dict[Key, _Bound], list[str]]:
    """One unit's bounds, and the failures sizing cannot fix (described)."""
    bounds: dict[Key, _Bound] = {(ring, r): _Bound() for ring in range(RINGS) for r in RESOURCES}
    blocked: list[str] = []
    pending: list[_Shortfall] = []
    for run in sorted(runs, key=lambda x: x.labels.run):
        s = run.summary
        code = _code(run)
        if s.meta is not None:
            for (ring, r), known in bounds.items():
                known.known = known.known or s.meta.capacity(r, ring) is not None
        for p in s.peaks:
            if (p.ring, p.resource) not in bounds or not p.scopes:
                continue
            b = bounds[(p.ring, p.resource)]
            b.used = b.used or _used(p)
            need = proven_need(p, s)
            if need.value:
                b.lower(need.value, run.name, need.why)
                b.proven = max(b.proven, need.value)
                if need.value > b.est:
                    b.est, b.est_src = need.value, run.name
            count = dep_pool_estimate(p, s)
            if count.value and _completed(s):  # runs in label order: the latest completed run's count, taken
                b.est, b.est_src = count.value, run.name  # closest to the sizes the answer will have
                window = s.meta.capacity(TASKS.name, p.ring) if s.meta is not None else None
                b.counts.append((window, count.value, run.name))
        if code is None:
            if _completed(s) and s.meta is not None:
                blocked.clear()  # a later run completed: an earlier program error is not today's
                for (ring, r), b in bounds.items():
                    cap = s.meta.capacity(r, ring)
                    if cap is not None:
                        b.completed.append((cap, run.name))
                    if cap is not None and (b.hi is None or cap < b.hi):
                        b.hi, b.hi_src = cap, run.name
            continue
        short = _shortfall(run, code)
        if short is None:
            what = describe_code(code) if code >= 0 else "a wedge whose cause the records do not show"
            where = run.host_log.path if run.host_log is not None else run.path
            blocked.append(f"{run.name}: {what} ({where}): sizing cannot fix this"
                           + (f"; {ERROR_CODES[code].move}" if code in ERROR_CODES and ERROR_CODES[code].move else ""))
            continue
        pending.append(short)
    for (_, r), b in bounds.items():
        if b.counts:  # a batch-reclaimed resource (the dep pool): what was live at once at the window the answer
            window = b.counts[-1][0]  # converges on
            top = max((c for c in b.counts if c[0] == window), key=lambda c: c[1])
            res = BY_NAME[r]
            b.lower(top[1], top[2], f"{top[1]} {res.unit} were live at once in a run at this task window (the "
                                    f"{res.words}'s count is timing: the most seen is what a run can need)")
    for short in pending:
        if short.ring is None:  # a report that names no ring is pinned later (_pin_ringless)
            continue
        b = bounds[(short.ring, short.resource)]
        if short.backstop and short.capacity is not None and not _believed(short, pending, b):
            b.used = b.known = True
            b.retry = max(b.retry, short.capacity)  # one wall-clock give-up: run that size again first
            if b.hi is not None and short.capacity >= b.hi:
                b.set_aside.append(f"{short.src}: {exact(short.resource, short.capacity)} of ring {short.ring} "
                                   f"{short.resource} failed by the allocator's ~500 ms wall-clock give-up (no reclaim "
                                   f"progress), at a size that completed ({b.hi_src}): a loaded machine, not a size; "
                                   "set aside (run it again if in doubt)")
            continue
        _prove(bounds, short)
    return bounds, blocked


def _believed(short: _Shortfall, shorts: Sequence[_Shortfall], b: _Bound) -> bool:
    """A backstop failure (the allocator gave up after ~500 ms without reclaim progress, which a loaded machine
    can do at a size that suffices) proves a shortfall only once it is not alone: another failure of the same
    ring and resource at the same size or above, and no completion at or below it (the realsim README:
    "re-run before believing a single failure")."""
    if b.hi is not None and short.capacity is not None and short.capacity >= b.hi:
        return False
    return any(o is not short and (o.ring, o.resource) == (short.ring, short.resource) and o.capacity is not None
               and short.capacity is not None and o.capacity >= short.capacity for o in shorts)


def _prove(bounds: dict[Key, _Bound], short: _Shortfall) -> None:
    if short.capacity is None or short.ring is None:
        return
    ring = short.ring
    b = bounds[(ring, short.resource)]
    b.used = b.known = True
    b.failed.append(short.capacity)
    if short.requested:  # the request that did not fit must fit whole in an empty ring
        b.request = max(b.request, short.requested)
        b.lower(short.requested, short.src, f"the failing request was {exact(short.resource, short.requested)} "
                                            f"({short.src}'s deadlock report)")
    name = error_name(short.code) or f"code {short.code}"
    b.lower(short.capacity + 1, short.src, f"{exact(short.resource, short.capacity)} {short.how} ({name}, {short.src})")


def _unpinned(units: dict[str, list[RunFacts]], pinned: set[int]) -> list[str]:
    """Failures whose report names no ring and that could not be pinned on one: what they leave open."""
    out: list[str] = []
    for runs in units.values():
        for run in runs:
            code = _code(run)
            short = _shortfall(run, code) if code is not None else None
            if short is None or short.ring is not None or short.capacity is None or id(run) in pinned:
                continue
            out.append(f"{run.name}: {fmt(short.resource, short.capacity)} of {short.resource} failed "
                       f"({error_name(short.code) or short.code}) on a ring the report does not name: give "
                       "this program's completed runs too, or run with that ring's size set alone")
    return out


def _pin_ringless(units: dict[str, list[RunFacts]], bounds: dict[str, dict[Key, _Bound]],
                  headroom: float) -> set[int]:
    """Failures whose report names no ring (a dep pool's), in run order: each pinned on the ring whose size in
    the run the answer proposes (the program's batch over the evidence so far) was exactly the failing size,
    else on the only ring in use whose bracket holds it.  Returns the ``id`` of each run pinned."""
    pinned: set[int] = set()
    todo = sorted(((run, unit) for unit, runs in units.items() for run in runs), key=lambda x: x[0].labels.run)
    for run, unit in todo:
        code = _code(run)
        short = _shortfall(run, code) if code is not None else None
        if short is None or short.ring is not None or short.capacity is None:
            continue
        mine = bounds[unit]
        keys = {k for ub in bounds.values() for k, b in ub.items() if b.used or b.failed}
        merged = {k: _merge(ub[k] for ub in bounds.values()) for k in sorted(keys)}  # as advise_programs
        asked = _batch({k: _plan(k[1], b, headroom) for k, b in merged.items()}, merged)
        hits = [g for g in range(RINGS) if mine[(g, short.resource)].used and (g, short.resource) in asked
                and asked[(g, short.resource)][0].value == short.capacity]
        if len(hits) != 1:
            hits = [g for g in range(RINGS) if mine[(g, short.resource)].used
                    and (mine[(g, short.resource)].hi or math.inf) > short.capacity]
        if len(hits) == 1:
            _prove(mine, msgspec.structs.replace(short, ring=hits[0]))
            pinned.add(id(run))
    return pinned


# -- the plan per (ring, resource) -----------------------------------------------------------------------

Kind = Literal["final", "probe_ok", "probe_low", "grow", "unknown"]


class _Plan(msgspec.Struct, frozen=True):
    kind: Kind
    value: int
    why: str


def _ceiling(r: str, lo: int) -> int:
    """:data:`CLOSE` times a proven need, rounded to what the runtime accepts (a dep pool's entries rounded
    down, a heap up to its granule, a whole KiB; a window: ``lo`` itself, its granule being coarser); with
    nothing proven, the runtime's floor.  No final size exceeds it."""
    if not lo:
        return MIN_ACCEPTED[r]
    if BY_NAME[r].batch:
        return max(MIN_ACCEPTED[r], math.floor(lo * CLOSE))
    return accept(r, lo) if BY_NAME[r].power_of_two else accept(r, lo * CLOSE)


def _closing(r: str, lo: int, h: float) -> int:
    """The largest size whose completion closes a bracket over the proven need ``lo``: :func:`_ceiling`; for
    the dep pool, whose outcome near its minimum varies from run to run (timing), low enough that the final
    size keeps ``h`` over the completion and still stays under the ceiling."""
    if BY_NAME[r].batch and lo:
        return max(MIN_ACCEPTED[r], math.floor(lo * CLOSE / (1 + h)))
    return _ceiling(r, lo)


def _below(r: str, hi: int, h: float) -> int | None:
    """The smallest accepted size whose failure closes a bracket under ``hi`` (None: none does)."""
    if BY_NAME[r].power_of_two:
        return accept_below(r, hi)
    p = max(MIN_ACCEPTED[r], math.floor(hi / CLOSE) - 2)
    while p < hi and _closing(r, p + 1, h) < hi:
        p += 1
    return p if p < hi else None


def _spread(r: str, b: _Bound) -> str:
    """The evidence that a dep pool's need (``r``'s) varies from run to run: counts that differ, or a failure at or
    above a size that completed ("" where there is none)."""
    window = b.counts[-1][0] if b.counts else None
    counts = sorted({c for w, c, _ in b.counts if w == window})
    above = [f for f in b.failed if b.hi is not None and f >= b.hi]
    if above:
        return f"{fmt(r, max(above))} failed where {fmt(r, b.hi)} completed"
    return f"{counts[0]} to {counts[-1]} entries seen" if len(counts) > 1 else ""


def _plan(r: str, b: _Bound, h: float) -> _Plan:
    """One (ring, resource)'s next step: ``final`` (closed), ``probe_ok`` (a size expected to complete: at
    :func:`_closing` when the estimate is no higher, else the estimate plus a quarter), ``probe_low`` (a size
    expected to fail, whose failure closes the bracket), ``grow`` (nothing completed yet)."""
    res = BY_NAME[r]
    if not b.known:
        return _Plan("unknown", 0, "no run states this capacity (0 in the metadata means unknown): nothing is "
                                   f"proven about it; the records show about {fmt(r, b.est)}")
    lo, hi_known = b.lo_need, b.hi
    hi_src = b.hi_src
    if hi_known is not None and lo > hi_known:
        if res.batch:  # a need above a completion: the outcome varies with timing (a task takes an entry
            above = [c for c in b.completed if c[0] >= lo]  # only for a producer still running): the larger word
            hi_known, hi_src = min(above) if above else (None, "")  # is the safe one; a completion above it holds
        else:  # a completion below what the records seemed to prove: the real run wins
            lo = hi_known
    lo_txt = f"at least {fmt(r, accept(r, lo) if res.bytes else lo)} ({b.lo_why})" if lo else "no need proven yet"
    close = _closing(r, lo, h)
    est = b.est
    if res.contiguous and b.request and b.proven:  # a failing request on top of what one scope held
        est = max(est, b.proven + b.request)
    est_txt = f"; the records show about {fmt(r, est)}" if est > lo else ""
    if b.retry and (hi_known is None or b.retry < hi_known) and b.retry >= lo:
        return _Plan("probe_ok", b.retry, f"the allocator gave up at {fmt(r, b.retry)} after ~500 ms without reclaim "
                                          "progress (a loaded machine can, at a size that suffices): run it again "
                                          f"before believing it; {lo_txt}")
    if hi_known is None:
        p = max(close, _closing(r, est, h) if est > close else 0)
        why = "no run completed yet" if b.hi is None else (f"{fmt(r, b.hi)} completed once, below a need proven "
                                                           "by another run: the outcome varies from run to run")
        return _Plan("grow", p, f"{why}; {lo_txt}{est_txt}: measure at {fmt(r, p)}")
    hi = hi_known
    hi_txt = f"{fmt(r, hi)} completed ({hi_src})"
    below = accept_below(r, hi)
    if hi <= close or below is None or below < accept(r, lo or 1):
        # headroom over the proven need, and over the completion as far as the bracket allows (near the
        # smallest size that completes an outcome can vary from run to run: format doc, "Sizing facts")
        if res.power_of_two:  # the next accepted size is twice as large
            rec = hi
        elif res.batch:  # its count is timing: the most headroom over the largest need seen that 1.25x allows
            rec = max(hi, accept(r, lo * (1 + h)), accept(r, hi * (1 + h)), math.floor(lo * CLOSE))
        else:
            rec = max(hi, accept(r, lo * (1 + h)), min(accept(r, hi * (1 + h)), _ceiling(r, lo)))
        how = ("the smallest size the runtime accepts" if hi <= MIN_ACCEPTED[r] else
               f"{lo_txt}" + ("" if hi <= accept(r, lo or 1) else f", within {CLOSE - 1:.0%}"))
        head = f"; {fmt(r, rec)} keeps {h:.0%} headroom over the proven need" if rec > hi else ""
        if res.batch and rec > hi:
            head = (f"; {fmt(r, rec)} keeps {rec / max(lo, 1) - 1:.0%} over the largest need seen ({fmt(r, lo)}): "
                    f"the {res.words}'s count is timing (a task takes an entry only for a producer still "
                    "running)"
                    + (f", and it varied here ({_spread(r, b)})" if _spread(r, b) else
                       ", so one or two runs at this size confirm it"))
        return _Plan("final", rec, f"{hi_txt}; {how}{head}")
    if est <= close:
        return _Plan("probe_ok", close, f"{hi_txt}, {lo_txt}: measure at {fmt(r, close)} (a completion there "
                                        "closes the bracket)")
    if _closing(r, est, h) < hi:
        p = _closing(r, est, h)
        return _Plan("probe_ok", p, f"{hi_txt}, {lo_txt}{est_txt}: measure at {fmt(r, p)}")
    down = _below(r, hi, h)
    if down is None or down < accept(r, lo or 1):
        return _Plan("probe_ok", close, f"{hi_txt}, {lo_txt}: measure at {fmt(r, close)}")
    return _Plan("probe_low", down, f"{hi_txt}, {lo_txt}{est_txt}: measure at {fmt(r, down)} (a failure there "
                                    "closes the bracket)")


# -- per file ------------------------------------------------------------------------------------------


GROUPINGS = {
    "program file": "the program its dispatch_program.json names",
    "case name": "the scene-test case its folder names (<Class>_<Case>_<YYYYmmdd_HHMMSS>)",
    "L3 run": "one L3 run with its ranks (<out_dir>/dfx_outputs/rank<N>/d<K>/)",
    "L2 work dir": "one L2 work dir (<work_dir>/dfx_outputs/)",
    "scope sites": "folders named by hand whose files began the same scope sites",
    "folder": "its folder alone",
    "--program": "advise --program: the user says they are one",
}
"""How runs were grouped into a program: the runtime's layout names a program (the first four); runs whose
folders carry no such name fall back to the last rules, and the output says which."""


def _layout_program(run: RunFacts) -> tuple[str, str]:
    """(program, rule) where the runtime's layout names the program; ("", "") where it does not."""
    lab = run.labels
    if lab.program:
        return lab.program, "program file"
    case = _STAMP.sub("", lab.run)
    if case and case != lab.run:
        return case, "case name"
    where = PurePath(run.path or (run.host_log.path if run.host_log is not None else ""))
    if lab.rank and lab.run:
        return lab.run, "L3 run"
    if lab.run and "dfx_outputs" in where.parts:
        return lab.run, "L2 work dir"
    return "", ""


def grouping(runs: Sequence[RunFacts], program: str = "") -> list[tuple[str, str]]:
    """Each run's (program, rule of :data:`GROUPINGS`).  Runs pool only within one program: a program is what
    the runtime's layout names (:func:`_layout_program`), so cases of one test class never pool, however alike
    their kernels.  Runs whose folders carry no such name are one program when their files began the same set
    of scope sites (the smallest folder name stands for it, whatever the order), else each folder is its own."""
    if program:
        return [(program, "--program")] * len(runs)
    named = [_layout_program(r) for r in runs]
    own = [r.labels.run or r.path or (r.host_log.path if r.host_log is not None else "") for r in runs]
    by_sites: dict[tuple[str, ...], str] = {}  # the smallest folder name of each group: the same in any order
    for run, (name, _), folder in zip(runs, named, own, strict=True):
        if not name and run.summary.sites:
            by_sites[run.summary.sites] = min(by_sites.get(run.summary.sites, folder), folder)
    out: list[tuple[str, str]] = []
    for run, (name, rule), folder in zip(runs, named, own, strict=True):
        if name:
            out.append((name, rule))
        elif run.summary.sites:
            out.append((by_sites[run.summary.sites], "scope sites"))
        else:
            out.append((folder, "folder"))
    # a hand-named folder alone in its site group is just a folder
    return [(name, "folder" if rule == "scope sites" and sum(1 for n, _ in out if n == name) == 1 else rule)
            for name, rule in out]


def programs_of(runs: Sequence[RunFacts], program: str = "") -> list[str]:
    """Each run's program (:func:`grouping`)."""
    return [name for name, _ in grouping(runs, program)]


def _units(runs: Sequence[RunFacts], program: str = "") -> dict[str, dict[str, list[RunFacts]]]:
    """program -> rank -> runs."""
    out: dict[str, dict[str, list[RunFacts]]] = {}
    for run, prog in zip(runs, programs_of(runs, program), strict=True):
        rank = run.labels.rank or (str(run.host_log.rank) if run.host_log is not None and
                                   run.host_log.rank is not None else "")
        out.setdefault(prog, {}).setdefault(rank, []).append(run)
    return out


def _pooled(runs: Sequence[RunFacts], headroom: float, program: str = ""
            ) -> dict[str, tuple[dict[str, dict[Key, _Bound]], dict[str, list[str]], list[str]]]:
    """program -> (unit -> bounds, unit -> blocked failures, notes on what could not be pinned)."""
    out = {}
    for prog, units in _units(runs, program).items():
        bounds: dict[str, dict[Key, _Bound]] = {}
        blocked: dict[str, list[str]] = {}
        for unit, members in units.items():
            bounds[unit], blocked[unit] = _unit_bounds(members)
        pinned = _pin_ringless(units, bounds, headroom)
        out[prog] = (bounds, blocked, _unpinned(units, pinned))
    return out


def _advice(r: str, ring: int, b: _Bound, plan: _Plan, capacity: int | None, basis: Basis,
            driven_by: str = "", dropped: int = 0) -> Advice:
    rec = plan.value if plan.kind == "final" else None
    nxt = None if plan.kind in ("final", "unknown") else plan.value
    why = plan.why
    if dropped:
        why = (f"{dropped} records dropped: this run's peaks are lower bounds and pairs may be wrong (its "
               f"capacities are still proof); {why}")
    target = plan.value
    return Advice(ring, r, capacity, accept(r, b.lo_need) if b.lo_need else None, b.hi, b.est or None, rec, basis,
                  why, measure_next=nxt, shrink=capacity is not None and plan.kind != "unknown" and target < capacity,
                  driven_by=driven_by)


def _in_use(bounds: dict[Key, _Bound]) -> list[Key]:
    return [k for k in sorted(bounds) if bounds[k].used]


def advise_runs(runs: Sequence[RunFacts], headroom: float = DEFAULT_HEADROOM, program: str = ""
                ) -> list[RunAdvice]:
    """Each run's advice, in order: its program's answer (:func:`advise_programs`: the same sizes on every
    surface), put relative to the run's own sizes (:func:`action`), and labelled with the evidence it rests on."""
    return _each_run(runs, advise_programs(runs, headroom, program), program)


def _each_run(runs: Sequence[RunFacts], answers: Sequence[ProgramAnswer], program: str) -> list[RunAdvice]:
    by_program = {pa.program: pa for pa in answers if not pa.covers}
    out: list[RunAdvice] = []
    for run, prog in zip(runs, programs_of(runs, program), strict=True):
        pa = by_program[prog]
        s = run.summary
        peaks = {(p.ring, p.resource): p for p in s.peaks}
        dropped = s.meta.dropped if s.meta is not None else 0
        advice = tuple(_rebased(a, _capacity_of(run, a.ring, a.resource), _basis(s, peaks.get((a.ring, a.resource))),
                                dropped) for a in pa.advice)
        evidence = "this run's evidence" if pa.runs <= 1 else f"program {prog}: {pa.runs} runs' evidence"
        out.append(RunAdvice(advice, tuple(_run_config(advice, s.meta)), tuple(_kernel_fixes(s, advice)), pa.final,
                             evidence))
    return out


def evidence(fin: RunFinished) -> bool:
    """A run sizing rests on: one known from its host log alone, or a readable file holding records or paired
    with a host log that reports a failure (an empty, unreadable or metadata-only file proves nothing)."""
    if fin.log_only:
        return True
    return not fin.unreadable and (fin.summary.records > 0 or (fin.host_log is not None and fin.host_log.failed))


def program_advice(fins: Sequence[RunFinished], headroom: float = DEFAULT_HEADROOM, program: str = ""
                   ) -> tuple[list[RunFinished], list[ProgramAnswer]]:
    """One pass over a set of runs: each run's advice made from every run of its program among them
    (:func:`advise_runs`; a run that is no :func:`evidence` carries none), and the programs' answers
    (:func:`advise_programs`): what every one-shot surface shows, so that each gives one size and one verb.
    ``program``: every run is that one program (``advise --program``)."""
    used = [i for i, f in enumerate(fins) if evidence(f)]
    facts = [RunFacts(fins[i].source.path, fins[i].source.labels, fins[i].summary, fins[i].host_log,
                      fins[i].wedge_causes) for i in used]
    answers = advise_programs(facts, headroom, program)
    out = [f if f.advice is None else msgspec.structs.replace(f, advice=None) for f in fins]
    for i, ra in zip(used, _each_run(facts, answers, program), strict=True):
        out[i] = msgspec.structs.replace(fins[i], advice=ra)
    return out, answers


def _capacity_of(run: RunFacts, ring: int, r: str) -> int | None:
    """The size ``run`` had for ``r`` on ``ring``: its metadata's, else its host log's (the sizes line, or the
    deadlock report's size for the resource it names); None: unknown."""
    if run.summary.meta is not None:
        return run.summary.meta.capacity(r, ring)
    log = run.host_log
    if log is None:
        return None
    if log.ring_sizes is not None:
        caps: tuple[int, ...] = getattr(log.ring_sizes, r)
        return caps[ring] if ring < len(caps) and caps[ring] else None
    d = log.deadlock
    if d is not None and d.resource == r and d.ring == ring:  # a report that names no ring says no ring's size
        return _log_capacity(log, r)
    return None


def _rebased(a: Advice, capacity: int | None, basis: Basis, dropped: int) -> Advice:
    why = a.reason
    if dropped:
        why = (f"{dropped} records dropped: this run's peaks are lower bounds and pairs may be wrong (its "
               f"capacities are still proof); {why}")
    target = a.recommended if a.recommended is not None else a.measure_next
    return msgspec.structs.replace(a, capacity=capacity, basis=basis, reason=why,
                                   shrink=capacity is not None and target is not None and target < capacity)


def action(a: Advice) -> str:
    """The one way every surface says an entry: ``keep X``, ``raise to X (from C)``, ``shrink to X (from C)``,
    ``set X`` (the run's size unknown), ``measure at X (from C)``, or ``-``; relative to the run's own size
    ``C``, and a comparison with the compile default says so."""
    target = a.recommended if a.recommended is not None else a.measure_next
    if target is None:
        return "-"
    to = fmt(a.resource, target)
    cap = a.capacity
    since = "" if cap is None else (f" (from the compile default {fmt(a.resource, cap)})"
                                    if cap == COMPILE_DEFAULTS[a.resource] else f" (from {fmt(a.resource, cap)})")
    if a.recommended is None:
        return f"measure at {to}" + ("" if cap == target else since)
    if cap is None:
        return f"set {to}"
    if target == cap:
        return f"keep {to}"
    return f"{'raise' if target > cap else 'shrink'} to {to}{since}"


def advise(summary: RunSummary, headroom: float = DEFAULT_HEADROOM, path: str = "",
           labels: Labels | None = None, host_log: HostLog | None = None) -> RunAdvice:
    """Advice for one run on its own."""
    return advise_runs([RunFacts(path, labels or Labels(), summary, host_log)], headroom)[0]


# -- per program -------------------------------------------------------------------------------------


class _Failure(msgspec.Struct, frozen=True):
    """A failed run as a floor: at ``sizes`` (what is known of them) it was short of ``resource`` at ``capacity``
    on ``rings`` (the one its report names, else every ring that was at that size; all when unknown)."""

    src: str
    resource: str
    capacity: int
    rings: tuple[int, ...]
    sizes: dict[Key, int]
    recommended: int | None  # the runtime's own suggestion in the log (``recommended: N``)
    where: str  # the log's path and line, for citing it


def _failures(runs: Sequence[RunFacts], merged: dict[Key, _Bound]) -> list[_Failure]:
    """Each failed run's floor; a report that names no ring is laid on the rings the program uses that resource on
    (every ring where no run shows which) that were at the failing size (or whose size is unknown).  A wall-clock
    give-up at a size that completed is load, not a floor (:func:`_believed`)."""
    used = {k for k, b in merged.items() if b.used}
    out = []
    for run in runs:
        code = _code(run)
        short = _shortfall(run, code) if code is not None else None
        if short is None or short.capacity is None:
            continue
        b = merged.get((short.ring, short.resource)) if short.ring is not None else None
        if short.backstop and b is not None and b.hi is not None and short.capacity >= b.hi:
            continue
        sizes = {(g, r): c for g in range(RINGS) for r in RESOURCES
                 if (c := _capacity_of(run, g, r)) is not None}
        candidates = [g for g in range(RINGS) if (g, short.resource) in used] or list(range(RINGS))
        rings = (short.ring,) if short.ring is not None else tuple(
            g for g in candidates if sizes.get((g, short.resource), short.capacity) == short.capacity)
        log = run.host_log
        d = log.deadlock if log is not None else None
        rec = d.recommended if d is not None and d.resource == short.resource else None
        rec = rec if rec is not None and rec > short.capacity else None  # a suggestion of the failing size is none
        where = f"{log.path} line {d.line}" if log is not None and d is not None else run.path
        out.append(_Failure(short.src, short.resource, short.capacity, rings, sizes, rec, where))
    return out


def _floors(chosen: dict[Key, tuple[_Plan, str]], merged: dict[Key, _Bound], failures: Sequence[_Failure]) -> bool:
    """A failure is a floor: where the proposal is at or above a failed run's sizes everywhere else and at or
    below its failing size, the failing resource is raised above it on every ring that was at that size (the
    runtime's own recommendation, where its log prints one, is cited).  True when a bound was raised (plan again)."""
    raised = False
    for f in failures:
        def proposed(k: Key, f: _Failure = f) -> int:
            """The proposal's size; one the RunConfig leaves at the compile default counts as above the failure
            only where the failed run's own size is known (a log alone may have run at anything)."""
            if k in chosen and chosen[k][0].kind != "unknown":
                return chosen[k][0].value
            return COMPILE_DEFAULTS[k[1]] if k in f.sizes else f.capacity


        keys = [(g, f.resource) for g in f.rings]
        others = all(proposed(k) >= v for k, v in f.sizes.items() if k not in keys)
        if not others or not any(proposed(k) <= f.capacity for k in keys):
            continue
        floor = f.capacity + 1  # the proof; the runtime's own suggestion is cited, not taken for a need
        rings = ("ring " + str(f.rings[0]) if len(f.rings) == 1 else "every ring that was at that size"
                 if any(k[1] == f.resource for k in f.sizes) else "every ring: the report names none, nor their sizes")
        cite = (f"; the runtime's log recommends {fmt(f.resource, f.recommended)} ({f.where}), a suggestion, not a "
                "proof" if f.recommended else "")
        for k in keys:
            b = merged.setdefault(k, _Bound())
            if b.lo_need >= floor:
                continue
            b.used = b.known = True
            b.lower(floor, f.src, f"{exact(f.resource, f.capacity)} failed ({f.src}; raised on {rings}){cite}")
            raised = True
    return raised


def _answer(prog: str, rule: str, members: Sequence[RunFacts], merged: dict[Key, _Bound], blocked: Sequence[str],
            notes: list[str], headroom: float) -> ProgramAnswer:
    failures = _failures(members, merged)
    for _ in range(RINGS * len(RESOURCES)):  # each pass raises at least one bound to a failure's floor
        plans = {k: _plan(k[1], b, headroom) for k, b in merged.items()}
        chosen = _batch(plans, merged)
        if not _floors(chosen, merged, failures):
            break
    latest = max(members, key=lambda x: x.labels.run)
    advice = []
    for (ring, r), (plan, driver) in sorted(chosen.items()):
        b = merged[(ring, r)]
        peak = next((p for p in latest.summary.peaks if (p.ring, p.resource) == (ring, r)), None)
        advice.append(_advice(r, ring, b, plan, _capacity_of(latest, ring, r), _basis(latest.summary, peak), driver))
    stop = sorted(set(blocked))
    notes = [*notes, *sorted({text for b in merged.values() for text in b.set_aside})]
    final = not stop and bool(advice) and all(a.recommended is not None for a in advice)
    config = () if stop else tuple(_run_config(advice, None))
    sources = tuple(r.path or (r.host_log.path if r.host_log is not None else "") for r in members)
    count = len({run_folder(r.path, r.host_log.path if r.host_log else "") for r in members})  # folders, not labels
    return ProgramAnswer(prog, sources, count, final, tuple(advice), config,
                         tuple(stop), tuple(notes), rule)


def advise_programs(runs: Sequence[RunFacts], headroom: float = DEFAULT_HEADROOM, program: str = ""
                    ) -> list[ProgramAnswer]:
    """One answer per program (in order of first appearance, :func:`grouping`), pooled over all its runs and
    ranks; ``program``: every run is that one program (``advise --program``).  After them, for each test class
    with several cases that share their kernels, a covering answer (:func:`_covering`)."""
    out: list[ProgramAnswer] = []
    units = _units(runs, program)
    rules = dict(grouping(runs, program))
    for prog, (bounds, blocked, notes) in _pooled(runs, headroom, program).items():
        keys = {k for unit_bounds in bounds.values() for k, b in unit_bounds.items() if b.used or b.failed}
        merged = {k: _merge(unit_bounds[k] for unit_bounds in bounds.values()) for k in sorted(keys)}
        members = [r for rs in units[prog].values() for r in rs]
        pa = _answer(prog, rules[prog], members, merged, [t for ts in blocked.values() for t in ts], notes, headroom)
        if pa.final and not _proven_by_one_run(units[prog], pa.advice):
            pa = msgspec.structs.replace(pa, final=False, notes=(*pa.notes, (
                "every bracket is closed, but no completed run had every size at or below this RunConfig "
                "(the resources interact): run it once to prove it")))
        out.append(pa)
    return out + _covering(out, runs, program)


def _covering(answers: Sequence[ProgramAnswer], runs: Sequence[RunFacts], program: str) -> list[ProgramAnswer]:
    """For each test class with two or more cases (grouped by case name) whose runs began the same scope sites
    (they share their kernels): one RunConfig that covers them all, for each ring and resource the largest of
    the cases' answers.  It is final when every case's answer is, and never replaces theirs."""
    sites: dict[str, set[str]] = {}
    for run, prog in zip(runs, programs_of(runs, program), strict=True):
        sites.setdefault(prog, set()).update(run.summary.sites)
    classes: dict[str, list[ProgramAnswer]] = {}
    for pa in answers:
        if pa.grouped_by == "case name" and pa.advice and not pa.blocked:
            classes.setdefault(pa.program.split("_", 1)[0], []).append(pa)
    out = []
    for cls, cases in classes.items():
        if len(cases) < 2 or len({frozenset(sites.get(c.program, ())) for c in cases}) != 1:
            continue
        advice = []
        for k in sorted({(a.ring, a.resource) for c in cases for a in c.advice}):
            entries = [a for c in cases for a in c.advice if (a.ring, a.resource) == k]
            top = max(entries, key=lambda a: (a.recommended or a.measure_next or 0))
            measure = any(a.recommended is None for a in entries)
            value = top.recommended or top.measure_next
            advice.append(msgspec.structs.replace(
                top, capacity=None, recommended=None if measure else value, measure_next=value if measure else None,
                reason=f"the largest of the cases' answers ({top.driven_by or 'its case'}: {top.reason})"))
        names = tuple(c.program for c in cases)
        out.append(ProgramAnswer(
            f"{cls} (covering {len(cases)} cases)", tuple(s for c in cases for s in c.sources),
            sum(c.runs for c in cases), all(c.final for c in cases), tuple(advice), tuple(_run_config(advice, None)),
            notes=(f"one RunConfig for {', '.join(names)}, which share their kernels: for each ring and resource the "
                   "largest of their answers; each case's own answer stands",), grouped_by="covering", covers=names))
    return out


def _batch(plans: dict[Key, _Plan], bounds: dict[Key, _Bound]) -> dict[Key, tuple[_Plan, str]]:
    """The values of one measurement run: every probe expected to complete together (a completion proves
    them all; dep-pool probes of one value on two rings one at a time, as a dep-pool report names no ring);
    else one probe expected to fail (a failure proves one resource).  The others run at a size that
    completed."""
    out: dict[Key, tuple[_Plan, str]] = {}
    oks = [k for k, p in plans.items() if p.kind in ("probe_ok", "grow")]
    lows = [k for k, p in plans.items() if p.kind == "probe_low"]
    go: set[Key] = set()
    dep_values: set[int] = set()
    for k in oks or lows[:1]:
        if k[1] == "dep_pool":
            if plans[k].value in dep_values:
                continue
            dep_values.add(plans[k].value)
        go.add(k)
    for k, p in plans.items():
        b = bounds[k]
        if p.kind in ("final", "unknown") or k in go or b.hi is None:
            by_need = p.kind == "final" and (b.hi is None or p.value > b.hi)
            driver = (b.lo_src if by_need else b.hi_src) if p.kind == "final" else b.est_src or b.lo_src or b.hi_src
            out[k] = (p, driver)
        else:
            out[k] = (_Plan("probe_ok", b.hi, f"held at {fmt(k[1], b.hi)} (completed) while other sizes are "
                                              f"measured; then: {p.why}"), b.hi_src)
    return out


def _proven_by_one_run(units: dict[str, list[RunFacts]], advice: Sequence[Advice]) -> bool:
    """Some completed run of every rank had every size at most the answer's (so the answer completes: the
    resources interact, and a proof holds for its own configuration)."""
    target = {(a.ring, a.resource): a.recommended for a in advice}
    for runs in units.values():
        if not any(any(_completed(r.summary) and r.summary.meta is not None and
                       target.get((p.ring, p.resource)) is not None and p.scopes for p in r.summary.peaks)
                   for r in runs):
            continue  # this rank uses none of the answer's resources
        if not any(_completed(r.summary) and r.summary.meta is not None and _code(r) is None and
                   all((r.summary.meta.capacity(res, ring) or 0) <= (v or 0) for (ring, res), v in target.items())
                   for r in runs):
            return False
    return True


# -- output helpers ------------------------------------------------------------------------------------


def _kernel_fixes(s: RunSummary, advice: Sequence[Advice]) -> list[str]:
    out: list[str] = []
    grow = {(a.ring, a.resource) for a in advice
            if a.capacity and ((a.recommended or 0) > a.capacity or (a.measure_next or 0) > a.capacity)}
    for p in s.peaks:  # the heap's: what the tasks' intermediates hold
        if p.resource not in _CONTIGUOUS or (p.ring, p.resource) not in grow or not p.scopes or not p.pinned:
            continue
        if p.alloc_site and p.alloc >= 0.5 * p.pinned:
            out.append(f"ring {p.ring}: scope {p.alloc_site} alone allocates {fmt(p.resource, p.alloc)} and holds it "
                       f"until it exits: split it or give its intermediates an inner pl.scope (guide §3) before "
                       f"raising {CONFIG_KEYS[p.resource]}")
    if s.max_depth > 3:
        r3 = [p for p in s.peaks if p.ring == 3 and p.resource in _CONTIGUOUS and p.scopes]
        rest = sum(p.pinned for p in s.peaks if p.ring < 3 and p.resource in _CONTIGUOUS)
        if r3 and r3[0].pinned > rest:
            out.append(f"depths 4..{s.max_depth} fold into ring 3 (a clamp) and it carries more than rings 0-2 "
                       "together: place scopes so nesting stays within depth 3 (guide §3)")
    return out


def _run_config(advice: Iterable[Advice], meta: Meta | None) -> list[tuple[str, int | tuple[int, ...]]]:
    """The RunConfig fields to run with, relative to the compile defaults (0: the default).

    With ``meta`` (one file's advice) only the resources whose value changes are given, and rings
    without advice keep what that run had; without it (a program's answer) the RunConfig is complete."""
    out: list[tuple[str, int | tuple[int, ...]]] = []
    advice = list(advice)
    for r in RESOURCES:
        values = [0] * RINGS
        changed = False
        for a in advice:
            if a.resource != r or not 0 <= a.ring < RINGS:
                continue
            target = a.recommended if a.recommended is not None else a.measure_next
            if target is None:
                continue
            values[a.ring] = 0 if target == COMPILE_DEFAULTS[r] else target
            changed = changed or target != a.capacity
        if meta is not None:
            if not changed:
                continue
            caps = meta.maxes(r)
            for ring in range(RINGS):
                if (values[ring] == 0 and ring < len(caps) and caps[ring] not in (0, COMPILE_DEFAULTS[r])
                        and not any(a.resource == r and a.ring == ring for a in advice)):
                    values[ring] = caps[ring]
        if not any(values):
            continue
        out.append((CONFIG_KEYS[r], values[0] if len(set(values)) == 1 else tuple(values)))
    return out


def snippet(key: str, value: int | tuple[int, ...]) -> str:
    """One RunConfig line in the guide's §4 form, e.g. ``ring_heap=(0, 0, 2 * 1024**3, 0)``."""
    def one(n: int) -> str:
        if key not in _IN_BYTES or n == 0:
            return str(n)
        for exp in (3, 2, 1):
            unit = 1024 ** exp
            if n % unit == 0:
                return f"{n // unit} * 1024" + (f"**{exp}" if exp > 1 else "")
        return str(n)
    if isinstance(value, tuple):
        return f"{key}=({', '.join(one(v) for v in value)})"
    return f"{key}={one(value)}"


def advice_json(advice: Sequence[Advice], driven_by: bool = False) -> list[dict[str, object]]:
    """The ``advice`` list of the JSON outputs (``advise``, ``summary --format json``, ``--events``)."""
    out: list[dict[str, object]] = []
    for a in advice:
        obj: dict[str, object] = {
            "ring": a.ring, "resource": a.resource, "capacity": a.capacity, "lower_bound": a.lower_bound,
            "upper_bound": a.upper_bound, "estimate": a.estimate, "recommended": a.recommended, "basis": a.basis,
            "reason": a.reason, "measure_next": a.measure_next, "action": action(a)}
        if driven_by:
            obj["driven_by"] = a.driven_by
        out.append(obj)
    return out


def run_config_json(ra: RunAdvice | ProgramAnswer) -> dict[str, int | list[int]]:
    return {k: list(v) if isinstance(v, tuple) else v for k, v in ra.run_config}


def program_json(pa: ProgramAnswer) -> dict[str, object]:
    """One entry of ``advise --format json``'s ``programs``."""
    return {"program": pa.program, "sources": list(pa.sources), "runs": pa.runs, "final": pa.final,
            "advice": advice_json(pa.advice, driven_by=True), "run_config": run_config_json(pa),
            "blocked": list(pa.blocked), "notes": list(pa.notes), "grouped_by": pa.grouped_by,
            "covers": list(pa.covers)}
