"""Ring sizing from a run's records: what they prove, what they suggest, and the next run.  Pure.

The facts this rests on (``scope-stats-format.md``, "Sizing facts", and the guide §2, §5):

* a run that completed proves its capacities suffice: ``upper_bound``; a wedged run proves only
  that *some* resource of the wedged ring (or the tensormap) was short at those capacities;
* a single task's block must fit whole, with strictly more free bytes than it asks for: a
  scope that submitted one task gives a hard ``lower_bound`` on the heap (and dep pool);
* on a ring whose tail never moved nothing was reclaimed (``oversized``): occupancy is total
  allocation, not need; only a ``tight`` run (the tail moved) ran near its need;
* the need is modelled from the scope structure (``Peak.pinned``: the most the open scopes
  held, blocks freed at scope exit, FIFO), plus one task slot (a window of N holds N - 1) and
  one byte (strictly more free than asked): the ``estimate``.  It can be low (a value read by a
  later scope stays live; heap blocks skip the ring's end) or high (the runtime reclaimed sooner),
  so it only chooses the next measurement; a capacity below what a run proved is only
  recommended once a run at it completed.

Files of the same program (labels: program or run name without its timestamp, rank, dispatch)
given together pool their evidence: the smallest completed capacity bounds the need from above,
and a wedge is pinned on one resource when the ring's other resources were at capacities that
completed elsewhere (a proven ``lower_bound``), or when a host log's deadlock report names it.
Measurements home in from both sides: shrinks of a ring are tried together, and once such a
try wedged, one resource at a time with the others at completed sizes (so the next wedge proves
which); a proven shortfall steps to the proven need plus headroom, under the completed size.
An unexplained wedge (the records show nothing near a capacity) doubles the ring's resources.
Capacities are rounded to what the runtime accepts: task window a power of two, heap a multiple
of 1 KiB, at least 4 for counts.
"""

from __future__ import annotations

import math
import re
from collections.abc import Sequence

import msgspec

from ringtrace.diagnose import fmt_amount
from ringtrace.records import RESOURCES, Advice, Basis, HostLog, Labels, Meta, Peak, RunAdvice, RunSummary

DEFAULT_HEADROOM = 0.1
KIB = 1024
COMPILE_DEFAULT = {"task_window": 16384, "heap": 256 << 20, "dep_pool": 16384}
"""The a2a3 compile defaults (guide §1): what ``0`` in a RunConfig tuple means."""
CONFIG_KEY = {"task_window": "ring_task_window", "heap": "ring_heap", "dep_pool": "ring_dep_pool"}


class RunFacts(msgspec.Struct, frozen=True):
    """What advise needs of one finished run: where it sits, its summary and its host log if matched."""

    path: str
    labels: Labels
    summary: RunSummary
    host_log: HostLog | None = None


_DEADLOCK_RESOURCE = {"heap": "heap", "task_window": "task_window", "scope": "task_window", "dep_pool": "dep_pool"}


def logged_short(run: RunFacts) -> tuple[int, str, int] | None:
    """(ring, resource, least need) when the host log's deadlock report names what was short."""
    dl = run.host_log.deadlock if run.host_log is not None else None
    s = run.summary
    if dl is None or dl.kind not in _DEADLOCK_RESOURCE or s.meta is None:
        return None
    ring = dl.ring if dl.ring is not None else (s.wedged[-1].ring if s.wedged else None)
    if ring is None:
        return None
    r = _DEADLOCK_RESOURCE[dl.kind]
    cap = s.meta.capacity(r, ring)
    need = (cap + 1) if cap is not None else 0  # it did not fit in this capacity
    if r == "heap" and dl.requested_bytes:
        need = max(need, dl.requested_bytes + 1)  # strictly more free bytes than the request
    return (ring, r, need) if need else None


# -- rounding to what the runtime accepts ------------------------------------------------------


def accept(resource: str, n: float) -> int:
    """The smallest accepted capacity >= ``n``."""
    if resource == "task_window":
        return 1 << max(2, math.ceil(math.log2(max(n, 1))))
    if resource == "heap":
        return max(KIB, math.ceil(n / KIB) * KIB)
    return max(4, math.ceil(n))


def next_above(resource: str, n: int) -> int:
    """The smallest accepted capacity > ``n``."""
    return accept(resource, n + 1)


def need_from_held(resource: str, held: int) -> int:
    """The model's smallest capacity for ``held`` units live at once: one free slot in a window,
    one byte more than the blocks on a heap, exactly the entries in a dep pool."""
    return held + 1 if resource in ("task_window", "heap") else max(held, 1)


def fmt(resource: str, n: int | None) -> str:
    return "-" if n is None else fmt_amount(resource, n)


# -- per-run classification --------------------------------------------------------------------


def _basis(s: RunSummary, peak: Peak) -> Basis:
    m = s.meta
    if m is not None and m.dropped > 0:
        return "dropped"
    if s.wedged or (m is not None and m.fatal):
        return "wedged"
    return "tight" if peak.tail_moved else "oversized"


def _completed(s: RunSummary) -> bool:
    """The run ran to its end: nothing open, not fatal, every record there (drops allowed)."""
    m = s.meta
    return m is not None and not s.wedged and not m.fatal and s.complete and s.open_scopes == 0


def _in_use(s: RunSummary) -> list[Peak]:
    wedged_ring = s.wedged[-1].ring if s.wedged else None
    return [p for p in s.peaks if p.scopes or p.ring == wedged_ring]


def group_key(labels: Labels, path: str) -> tuple[str, str, str]:
    """Runs of one program on one rank and dispatch: program, else the run name less its timestamp."""
    name = labels.program or re.sub(r"_\d{8}_\d{6}$", "", labels.run) or path
    return (name, labels.rank, labels.dispatch)


class _Pool:
    """The evidence of a group of runs for one (ring, resource)."""

    def __init__(self) -> None:
        self.upper: int | None = None  # smallest completed capacity
        self.lower: int | None = None  # proven: no smaller accepted capacity completes
        self.lower_need = 0  # the proven need itself (before rounding to an accepted capacity)
        self.est_oversized = self.est_tight = self.est_any = 0
        self.lower_why = ""


def _estimate(p: Peak, s: RunSummary) -> int:
    """The model's need: what open scopes held, plus a free slot / byte.  On a ring that never wrapped
    (its tail never moved) the heap also gets one block: a block never straddles the ring's end, so up
    to one block can sit unused at the wrap (a ring that did wrap counted those bytes in its heads)."""
    held = max(p.pinned, p.open_pinned if s.wedged and s.wedged[-1].ring == p.ring else 0)
    need = need_from_held(p.resource, held)
    if p.resource == "heap" and held and not p.tail_moved:
        tasks = next((q.pinned for q in s.peaks if q.ring == p.ring and q.resource == "task_window"), 0)
        need += max(p.request, held // max(tasks, 1)) - 1
    return need


def _request_need(p: Peak) -> int | None:
    """One task's block needs strictly more free bytes than it asks for; its fanin entries all at once."""
    if p.resource == "heap" and p.request > 0:
        return p.request + 1
    if p.resource == "dep_pool" and p.request > 0:
        return p.request
    return None


Wedges = dict[int, list[dict[str, int]]]


def _pools(runs: Sequence[RunFacts]) -> tuple[dict[tuple[int, str], _Pool], Wedges]:
    pools: dict[tuple[int, str], _Pool] = {}
    wedges: Wedges = {}
    for run in runs:
        s = run.summary
        for p in _in_use(s):
            pool = pools.setdefault((p.ring, p.resource), _Pool())
            est = _estimate(p, s)
            pool.est_any = max(pool.est_any, est)
            dropped = s.meta is not None and s.meta.dropped > 0
            if _completed(s) and not dropped:
                if p.tail_moved:
                    pool.est_tight = max(pool.est_tight, est)
                else:
                    pool.est_oversized = max(pool.est_oversized, est)
            if p.capacity is not None and _completed(s):
                pool.upper = p.capacity if pool.upper is None else min(pool.upper, p.capacity)
            need = None if dropped else _request_need(p)
            if need is not None and need > pool.lower_need:
                pool.lower, pool.lower_need = accept(p.resource, need), need
                pool.lower_why = f"one task asked for {fmt(p.resource, p.request)}"
    for run in runs:  # wedges: which capacities failed, and when the failure is pinned on one resource
        s = run.summary
        logged = logged_short(run)
        if logged is not None and (logged[0], logged[1]) in pools:
            pool = pools[(logged[0], logged[1])]
            if logged[2] > pool.lower_need:
                pool.lower, pool.lower_need = accept(logged[1], logged[2]), logged[2]
                pool.lower_why = f"the host log's deadlock report names ring {logged[0]}'s {logged[1]}"
        if not s.wedged or s.meta is None or (s.meta.dropped > 0):
            continue
        ring = s.wedged[-1].ring
        caps = {r: s.meta.capacity(r, ring) for r in RESOURCES if (ring, r) in pools}
        wedges.setdefault(ring, []).append({r: c for r, c in caps.items() if c is not None})
        for r, cap in caps.items():
            if cap is None:
                continue
            pool = pools[(ring, r)]
            others_ok = all(c is not None and pools[(ring, o)].upper is not None
                            and c >= (pools[(ring, o)].upper or 0) for o, c in caps.items() if o != r)
            tm = s.meta.tensormap_max
            tm_ok = tm is not None and any(_completed(o.summary) and o.summary.meta is not None
                                           and (o.summary.meta.tensormap_max or 0) <= tm for o in runs)
            if others_ok and tm_ok and cap + 1 > pool.lower_need:
                pool.lower, pool.lower_need = next_above(r, cap), cap + 1
                pool.lower_why = (f"a run wedged on ring {ring} at {fmt(r, cap)} while its other "
                                  "resources were at capacities that completed")
    return pools, wedges


# -- the advice ------------------------------------------------------------------------------------


class _Ctx(msgspec.Struct, frozen=True):
    """One file's view of a ring: its peaks, the pooled evidence, the group's wedges on that ring."""

    run: RunFacts
    ring: int
    peaks: dict[str, Peak]
    pools: dict[str, _Pool]
    wedges: tuple[dict[str, int], ...]  # capacities of this ring in runs that wedged on it
    headroom: float
    n_runs: int


def _est(pool: _Pool) -> int:
    """A tight completed run's figures first: it ran near its need, with the heap's wrap in its heads."""
    return pool.est_tight or pool.est_oversized or pool.est_any


def _note(r: str, pool: _Pool) -> str:
    if pool.lower_need > _est(pool):
        return f"at least {fmt(r, pool.lower_need)} ({pool.lower_why})"
    return f"{fmt(r, _est(pool))} from what open scopes held (freed at scope exit, FIFO)"


def _candidate(r: str, pool: _Pool, headroom: float) -> int:
    """The need (estimate, or the proven lower bound when larger; at most a completed capacity) plus headroom."""
    base = max(_est(pool), pool.lower_need)
    if pool.upper is not None:
        base = min(base, pool.upper)
    return max(accept(r, base * (1 + headroom)), pool.lower or 0)


def _advice(c: _Ctx, r: str, why: str, recommended: int | None = None, measure_next: int | None = None) -> Advice:
    p, pool = c.peaks[r], c.pools[r]
    basis = _basis(c.run.summary, p)
    cap = p.capacity
    target = recommended if recommended is not None else measure_next
    return Advice(c.ring, r, cap, pool.lower, pool.upper, _est(pool), recommended, basis, why,
                  measure_next=None if recommended is not None else measure_next,
                  shrink=cap is not None and target is not None and target < cap)


def _plan_ring(c: _Ctx) -> list[Advice]:
    """Advice for every resource of one ring of one run."""
    s = c.run.summary
    out: list[Advice] = []
    if any(p.capacity is None for p in c.peaks.values()) or s.meta is None:
        return [_advice(c, r, "the metadata gives no capacity for this ring: nothing is proven about it; "
                        f"the scopes suggest a need of {_note(r, c.pools[r])}") for r in c.peaks]
    if s.meta.dropped > 0:
        return [Advice(c.ring, r, p.capacity, None, c.pools[r].upper, _est(c.pools[r]), None, "dropped",
                       f"{s.meta.dropped} records dropped: peaks are lower bounds and pairs may be wrong; re-run "
                       "at the same capacity with less concurrency before trusting them", measure_next=p.capacity)
                for r, p in c.peaks.items()]
    if all(c.pools[r].upper is not None for r in c.peaks):
        return _plan_bounded(c)
    inner = s.wedged[-1] if s.wedged else None
    suspects = _suspects(c)
    for r, p in c.peaks.items():  # no completed run bounds this ring yet
        cap, pool = p.capacity or 0, c.pools[r]
        cand = _candidate(r, pool, c.headroom)
        if inner is None or inner.ring != c.ring:
            where = f"ring {inner.ring}" if inner is not None else "a fatal"
            out.append(_advice(c, r, f"the run stopped on {where} before this ring was done: keep at least "
                                     f"{fmt(r, cap)} (need about {_note(r, pool)})", measure_next=max(cap, cand)))
        elif not suspects:
            nxt = accept(r, 2 * cap)
            out.append(_advice(c, r, f"ring {c.ring} wedged in {inner.site} (line {inner.line}), and its records do "
                                     "not show what filled it (nothing it held comes near a capacity): double each "
                                     f"of its resources, {fmt(r, nxt)} here, until a run completes; then bisect",
                               measure_next=nxt))
        elif r in suspects:
            block = p.request if p.request else (max(p.pinned, 1) // max(c.peaks["task_window"].pinned, 1)
                                                 if "task_window" in c.peaks and r == "heap" else 1)
            if pool.lower_need > cap:  # proven short by more than this run had: aim at the proven need
                nxt = max(accept(r, pool.lower_need * (1 + c.headroom)), pool.lower or 0)
            else:
                nxt = accept(r, max(cap, _est(pool) * (1 + c.headroom)) * (1 + c.headroom) + block)
            out.append(_advice(c, r, f"ring {c.ring} wedged in {inner.site} (line {inner.line}) at {fmt(r, cap)}, "
                                     f"which the need of about {_note(r, pool)} fills: measure at {fmt(r, nxt)} "
                                     "(above the need plus headroom, so the next run can complete)",
                               measure_next=nxt))
        else:
            out.append(_advice(c, r, f"ring {c.ring} wedged in {inner.site}, but the scopes suggest this resource "
                                     f"had room (need about {_note(r, pool)}): keep {fmt(r, max(cap, cand))}",
                               measure_next=max(cap, cand)))
    return out


def _suspects(c: _Ctx) -> set[str]:
    """Resources of a wedged ring that the estimated need fills (none: the records cannot tell)."""
    logged = logged_short(c.run)
    if logged is not None and logged[0] == c.ring and logged[1] in c.peaks:
        return {logged[1]}  # the runtime said which one
    fill = {r: need_from_held(r, max(p.pinned, p.open_pinned)) / p.capacity
            for r, p in c.peaks.items() if p.capacity}
    return {r for r, f in fill.items() if f >= 1 / (1 + c.headroom) ** 2}


def _plan_bounded(c: _Ctx) -> list[Advice]:
    """Every resource of the ring has a capacity that completed: recommend, or measure a smaller one.

    Shrinks are tried all at once; once such a try wedged, one resource at a time with the others at
    capacities that completed, so that a wedge proves that resource short (a bisection step).
    """
    pools, r_of = c.pools, list(c.peaks)
    cand = {r: _candidate(r, pools[r], c.headroom) for r in r_of}
    done: dict[str, Advice] = {}
    open_: list[str] = []
    for r in r_of:
        p, pool = c.peaks[r], pools[r]
        upper = pool.upper or 0
        closed = pool.lower is not None and pool.lower >= upper  # proven short just below a success
        if closed:
            rec = max(accept(r, upper * (1 + c.headroom)), cand[r])
            done[r] = _advice(c, r, f"{fmt(r, upper)} completed and less is proven short ({pool.lower_why}): "
                                    f"{fmt(r, upper)} plus {c.headroom:.0%} headroom", recommended=rec)
        elif cand[r] >= upper:
            keep = not p.tail_moved and upper >= (p.capacity or 0) and cand[r] > upper
            rec = upper if keep else cand[r]
            why = (f"completed without reclaim at {fmt(r, upper)}, and the scopes held about that much: keep it"
                   if keep else f"completed at {fmt(r, upper)}{_pooled(c)}; need about {_note(r, pool)}; with "
                                f"{c.headroom:.0%} headroom")
            done[r] = _advice(c, r, why, recommended=rec)
        else:
            open_.append(r)
    if not open_:
        return [done[r] for r in r_of]
    proposal = {r: (done[r].recommended or 0) if r in done else cand[r] for r in r_of}
    tried = any(all(w.get(r, 0) >= v for r, v in proposal.items()) for w in c.wedges)
    out: dict[str, Advice] = dict(done)
    if not tried:
        for r in open_:
            out[r] = _advice(c, r, _shrink_why(c, r, cand[r]), measure_next=cand[r])
        return [out[r] for r in r_of]
    last = c.wedges[-1]
    first = max(open_, key=lambda r: _est(pools[r]) / max(last.get(r, 1), 1))  # the likeliest short one
    for r in open_:
        pool, upper = pools[r], pools[r].upper or 0
        if r != first:
            out[r] = _advice(c, r, f"held at {fmt(r, upper)} (completed) while ring {c.ring}'s {first} is measured "
                                   f"alone (a shrink of several wedged: one at a time tells which)", measure_next=upper)
            continue
        nxt = cand[r]  # when the estimate was proven low this is the proven need plus headroom: an
        # upward step from the failure, inside the interval a completed run bounds (bisection-like)
        out[r] = _advice(c, r, f"a shrink of ring {c.ring} wedged; measuring {r} alone at {fmt(r, nxt)} "
                               f"(completed at {fmt(r, upper)}, need about {_note(r, pool)}), the others held at "
                               "sizes that completed", measure_next=nxt)
    return [out[r] for r in r_of]


def _pooled(c: _Ctx) -> str:
    return f" (pooled over {c.n_runs} runs)" if c.n_runs > 1 else ""


def _shrink_why(c: _Ctx, r: str, nxt: int) -> str:
    p, pool = c.peaks[r], c.pools[r]
    if not p.tail_moved:
        return (f"the tail never moved at {fmt(r, p.capacity)}: nothing was reclaimed, so occupancy says little; "
                f"the need is about {_note(r, pool)}: measure at {fmt(r, nxt)} (plus {c.headroom:.0%})")
    return (f"completed at {fmt(r, pool.upper)}{_pooled(c)}, but the need is about {_note(r, pool)}: measure at "
            f"{fmt(r, nxt)} to shrink (a smaller static arena)")


def _kernel_fixes(s: RunSummary, advice: Sequence[Advice]) -> list[str]:
    out: list[str] = []
    grow = {(a.ring, a.resource) for a in advice
            if a.capacity and ((a.recommended or 0) > a.capacity or (a.measure_next or 0) > a.capacity)}
    for p in s.peaks:
        if p.resource != "heap" or (p.ring, "heap") not in grow or not p.scopes or not p.pinned:
            continue
        if p.alloc_site and p.alloc >= 0.5 * p.pinned:
            out.append(f"ring {p.ring}: scope {p.alloc_site} alone allocates {fmt('heap', p.alloc)} and holds it "
                       f"until it exits: split it or give its intermediates an inner pl.scope (guide §3) before "
                       f"raising ring_heap")
    if s.max_depth > 3:
        r3 = [p for p in s.peaks if p.ring == 3 and p.resource == "heap" and p.scopes]
        rest = sum(p.pinned for p in s.peaks if p.ring < 3 and p.resource == "heap")
        if r3 and r3[0].pinned > rest:
            out.append(f"depths 4..{s.max_depth} fold into ring 3 (a clamp) and it carries more than rings 0-2 "
                       "together: place scopes so nesting stays within depth 3 (guide §3)")
    return out


def _run_config(advice: Sequence[Advice], meta: Meta | None) -> list[tuple[str, int | tuple[int, ...]]]:
    out: list[tuple[str, int | tuple[int, ...]]] = []
    for r in RESOURCES:
        values = [0, 0, 0, 0]
        changed = False
        for a in advice:
            if a.resource != r or not 0 <= a.ring < 4:
                continue
            target = a.recommended if a.recommended is not None else a.measure_next
            if target is None:
                continue
            values[a.ring] = target
            changed = changed or target != a.capacity
        if not changed:
            continue
        if meta is not None:  # rings without advice keep what the run had (0 where that is the default)
            caps: tuple[int, ...] = getattr(meta, f"{r}_max")
            for ring in range(4):
                if values[ring] == 0 and ring < len(caps) and caps[ring] != COMPILE_DEFAULT[r]:
                    values[ring] = caps[ring]
        out.append((CONFIG_KEY[r], values[0] if len(set(values)) == 1 else tuple(values)))
    return out


def advise_runs(runs: Sequence[RunFacts], headroom: float = DEFAULT_HEADROOM) -> list[RunAdvice]:
    """Advice for each run, in order; runs of the same program (:func:`group_key`) pool their evidence."""
    groups: dict[tuple[str, str, str], list[RunFacts]] = {}
    for run in runs:
        groups.setdefault(group_key(run.labels, run.path), []).append(run)
    pools = {key: _pools(members) for key, members in groups.items()}
    out: list[RunAdvice] = []
    for run in runs:
        key = group_key(run.labels, run.path)
        pool, wedges = pools[key]
        in_use = {(p.ring, p.resource): p for p in _in_use(run.summary)}
        meta = run.summary.meta
        for ring, r in pool:  # in use in another run of the program: this run's figures, or none
            if (ring, r) not in in_use and meta is not None and (r != "dep_pool" or meta.version >= 5):
                in_use[(ring, r)] = Peak(ring, r, meta.capacity(r, ring), 0, "", 0, 0, "", 0, "", 0, 0)
        advice: list[Advice] = []
        for ring in sorted({ring for ring, _ in in_use}):
            peaks = {r: in_use[(ring, r)] for r in RESOURCES if (ring, r) in in_use and (ring, r) in pool}
            ctx = _Ctx(run, ring, peaks, {r: pool[(ring, r)] for r in peaks}, tuple(wedges.get(ring, ())),
                       headroom, len(groups[key]))
            advice += _plan_ring(ctx)
        final = bool(advice) and all(a.recommended is not None for a in advice)
        out.append(RunAdvice(tuple(advice), tuple(_run_config(advice, run.summary.meta)),
                             tuple(_kernel_fixes(run.summary, advice)), final))
    return out


def advise(summary: RunSummary, headroom: float = DEFAULT_HEADROOM, path: str = "",
           labels: Labels | None = None, host_log: HostLog | None = None) -> RunAdvice:
    """Advice for one run on its own."""
    return advise_runs([RunFacts(path, labels or Labels(), summary, host_log)], headroom)[0]


def snippet(key: str, value: int | tuple[int, ...]) -> str:
    """One RunConfig line in the guide's §4 form, e.g. ``ring_heap=(0, 0, 2 * 1024**3, 0)``."""
    def one(n: int) -> str:
        if key != "ring_heap" or n == 0:
            return str(n)
        for exp in (3, 2, 1):
            unit = 1024 ** exp
            if n % unit == 0:
                return f"{n // unit} * 1024" + (f"**{exp}" if exp > 1 else "")
        return str(n)
    if isinstance(value, tuple):
        return f"{key}=({', '.join(one(v) for v in value)})"
    return f"{key}={one(value)}"


def advice_json(advice: Sequence[Advice]) -> list[dict[str, object]]:
    """The ``advice`` list of the JSON outputs (``advise``, ``summary --format json``, ``--events``)."""
    return [{"ring": a.ring, "resource": a.resource, "capacity": a.capacity, "lower_bound": a.lower_bound,
             "upper_bound": a.upper_bound, "estimate": a.estimate, "recommended": a.recommended,
             "basis": a.basis, "reason": a.reason, "measure_next": a.measure_next} for a in advice]


def run_config_json(ra: RunAdvice) -> dict[str, int | list[int]]:
    return {k: list(v) if isinstance(v, tuple) else v for k, v in ra.run_config}
