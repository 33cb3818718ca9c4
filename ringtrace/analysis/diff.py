"""Run A against run B: what a change of scope placement or ring size did.  Pure.

Sources are matched by labels: run kind (L2, L3, scene test), program (or run name less its
timestamp), rank and dispatch; a source left without a counterpart is listed as unmatched.  Two
single files are always compared with each other.
"""

from __future__ import annotations

from collections.abc import Sequence

import msgspec

from ringtrace.analysis.advise import group_key
from ringtrace.model.records import RESOURCES, Finding, Labels, Peak, RunFinished

RATIOS = ("high_water_ratio", "alloc_ratio", "live_at_exit_ratio")


class RingSide(msgspec.Struct, frozen=True):
    """One side of a ``diff`` for one (ring, resource)."""

    capacity: int | None
    high_water: int
    alloc: int
    live_at_exit: int
    high_water_ratio: float | None
    alloc_ratio: float | None
    live_at_exit_ratio: float | None
    high_water_site: str


class RingDiff(msgspec.Struct, frozen=True):
    ring: int
    resource: str
    before: RingSide | None  # None: the ring was not used on that side
    after: RingSide | None


class RunDiff(msgspec.Struct, frozen=True):
    """Run A against run B (``ringtrace.analysis.diff``): rings, findings that came and went, scope counts."""

    a: str
    b: str
    labels: Labels
    rings: tuple[RingDiff, ...]
    findings_added: tuple[Finding, ...]
    findings_removed: tuple[Finding, ...]
    scopes_before: int
    scopes_after: int
    notes: tuple[str, ...] = ()  # what the comparison cannot conclude (different programs, drops, wedges)
    regressions: tuple[str, ...] = ()  # ratios that grew by more than the limit


class TreeDiff(msgspec.Struct, frozen=True):
    pairs: tuple[RunDiff, ...]
    unmatched: tuple[str, ...]  # "A: path" / "B: path" for sources without a counterpart


def _kind(fin: RunFinished) -> str:
    if fin.source.labels.rank:
        return "L3"
    return "L2" if "/dfx_outputs/" in fin.source.path.replace("\\", "/") else "scene"


def _key(fin: RunFinished) -> tuple[str, ...]:
    return (_kind(fin), *group_key(fin.source.labels, ""))


def _loose(fin: RunFinished) -> tuple[str, ...]:
    kind, _, rank, dispatch = _key(fin)
    return (kind, rank, dispatch)


def _side(p: Peak) -> RingSide:
    return RingSide(p.capacity, p.high_water, p.alloc, p.live_at_exit, p.high_water_ratio, p.alloc_ratio,
                    p.live_at_exit_ratio, p.high_water_site)


def _fkey(f: Finding) -> tuple[object, ...]:
    return (f.rule, f.ring, f.resource, f.site if f.rule == "wedged" else None)


def _sites(fin: RunFinished) -> set[str]:
    s = fin.summary
    out = {p.high_water_site for p in s.peaks if p.scopes} | {p.alloc_site for p in s.peaks if p.scopes}
    return (out | {w.site for w in s.wedged}) - {"", "(unknown):0"}


def compare(a: RunFinished, b: RunFinished, fail_on: float | None = None) -> RunDiff:
    """Per ring and resource before -> after; findings added/removed; what cannot be concluded."""
    pa = {(p.ring, p.resource): p for p in a.summary.peaks if p.scopes}
    pb = {(p.ring, p.resource): p for p in b.summary.peaks if p.scopes}
    rings = tuple(RingDiff(r, res, _side(pa[(r, res)]) if (r, res) in pa else None,
                           _side(pb[(r, res)]) if (r, res) in pb else None)
                  for r, res in sorted(pa.keys() | pb.keys(), key=lambda k: (k[0], RESOURCES.index(k[1]))))
    ka = {_fkey(f): f for f in a.findings}
    kb = {_fkey(f): f for f in b.findings}
    notes: list[str] = []
    la, lb = a.source.labels, b.source.labels
    if la.program and lb.program and la.program != lb.program:
        notes.append(f"different programs ({la.program} vs {lb.program}): figures are not comparable")
    elif _sites(a) and _sites(b) and not _sites(a) & _sites(b):
        notes.append("no scope site in common: these look like different programs, so the figures say little "
                     "about one change")
    for side, fin in (("A", a), ("B", b)):
        m = fin.summary.meta
        if m is None:
            notes.append(f"{side} has no metadata line: no capacities, so no ratios")
        elif m.dropped:
            notes.append(f"{side} dropped {m.dropped} records: its peaks are lower bounds")
        if fin.summary.wedged:
            notes.append(f"{side} wedged in {fin.summary.wedged[-1].site}: its figures stop there")
        if m is not None and m.version == 4:
            notes.append(f"{side} is a version 4 file: no dep pool")
    regressions: list[str] = []
    if fail_on is not None:
        for d in rings:
            for ratio in RATIOS:
                before = getattr(d.before, ratio) if d.before is not None else 0.0
                after = getattr(d.after, ratio) if d.after is not None else None
                if after is not None and before is not None and after - before > fail_on:
                    regressions.append(f"ring {d.ring} {d.resource} {ratio} {before:.3f} -> {after:.3f} "
                                       f"(+{after - before:.3f} > {fail_on})")
    return RunDiff(_shown(a), _shown(b), lb if lb != Labels() else la, rings,
                   tuple(f for k, f in kb.items() if k not in ka), tuple(f for k, f in ka.items() if k not in kb),
                   a.summary.scopes, b.summary.scopes, tuple(notes), tuple(regressions))


def match(a: Sequence[RunFinished], b: Sequence[RunFinished], fail_on: float | None = None) -> TreeDiff:
    """Pair the sources of A and B by labels (a single file on each side pairs as is)."""
    if len(a) == 1 and len(b) == 1:
        return TreeDiff((compare(a[0], b[0], fail_on),), ())
    pairs: list[RunDiff] = []
    left = list(b)
    unmatched: list[str] = []
    for fa in a:
        hits = [fb for fb in left if _key(fb) == _key(fa)]
        if len(hits) != 1:  # fall back to kind, rank and dispatch alone when that is unambiguous
            loose = [fb for fb in left if _loose(fb) == _loose(fa)]
            hits = loose if len(loose) == 1 else hits[:1]
        if hits:
            left.remove(hits[0])
            pairs.append(compare(fa, hits[0], fail_on))
        else:
            unmatched.append(f"A: {_shown(fa)}")
    unmatched += [f"B: {_shown(fb)}" for fb in left]
    return TreeDiff(tuple(pairs), tuple(unmatched))


def _shown(fin: RunFinished) -> str:
    """The file of a run, or ``host log PATH`` for a run known from its host log alone."""
    if fin.source.path:
        return fin.source.path
    return f"host log {fin.host_log.path}" if fin.host_log is not None else fin.source.name
