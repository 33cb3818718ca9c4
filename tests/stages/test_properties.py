"""Property-based tests: random well-nested scope trees, random drops, random chunking.

The model below is the rule text of issue 2 written as plainly as possible — open scopes in a
dict keyed by depth, maxima recomputed from the list of pairs — so the streaming Pairer
(a stack, running maxima) is checked against something obviously right.
"""

from __future__ import annotations

import itertools
import json
import random
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from ringtrace.model.records import RESOURCES, Abandoned, Scope, UnmatchedEnd
from ringtrace.stages.decode import Decoder
from tests._support.scope_stats import read_bytes

SITES = ("(unknown):0", "a.cpp:1", "b.cpp:2", "a.cpp:3")
CAPS = {"task_window": [8, 16, 32, 64], "heap": [4096, 2048, 1024, 512], "dep_pool": [16, 16, 32, 32]}
STEP = {"task_window": 6, "heap": 400, "dep_pool": 5}  # largest allocation between two samples of a ring

Rec = dict[str, Any]


@st.composite
def scope_files(draw: st.DrawFn) -> tuple[list[Rec], list[bool], int | None, random.Random]:
    """(all generated records, which are kept, where the file is cut or None, rng)."""
    rnd = draw(st.randoms(use_true_random=False))
    n_scopes = draw(st.integers(1, 40))
    max_depth = draw(st.integers(0, 6))
    events: list[tuple[str, str, int]] = []
    stack: list[tuple[str, int]] = []
    opened = 0
    while opened < n_scopes or stack:
        can_open = opened < n_scopes and len(stack) <= max_depth
        if stack and (not can_open or rnd.random() < 0.5):
            site, depth = stack.pop()
            events.append((site, "end", depth))
        else:
            depth = len(stack)
            site = rnd.choice(SITES)
            stack.append((site, depth))
            events.append((site, "begin", depth))
            opened += 1
    state = {r: {res: [0, 0] for res in RESOURCES} for r in range(4)}  # ring -> resource -> [tail, head]
    for res in RESOURCES:
        for r in range(4):
            if res == "dep_pool":
                state[r][res] = [1, 1]  # entry 0 is reserved, as in real files
    records: list[Rec] = []
    for site, phase, depth in events:
        ring = min(depth, 3)
        rec: Rec = {"site": site, "phase": phase, "depth": depth, "ring": ring}
        for res in RESOURCES:
            tail_head = state[ring][res]
            cap = CAPS[res][ring]
            tail_head[1] += rnd.randint(0, STEP[res])
            # reclaim some; the allocator waits until head - tail fits the capacity
            tail_head[0] = max(tail_head[0] + rnd.randint(0, tail_head[1] - tail_head[0]), tail_head[1] - cap)
            rec[f"{res}_start"], rec[f"{res}_end"] = tail_head
        rec["tensormap"] = rnd.randint(0, 20)
        records.append(rec)
    p_drop = draw(st.sampled_from([0.0, 0.0, 0.05, 0.2, 0.5]))
    kept = [rnd.random() >= p_drop for _ in records]
    cut = draw(st.none() | st.integers(0, len(records)))
    return records, kept, cut, rnd


def _file(records: list[Rec], kept: list[bool], cut: int | None, version: int = 6) -> tuple[bytes, list[Rec]]:
    lines = [r for r, k in zip(records, kept, strict=True) if k]
    dropped = len(records) - len(lines)
    if cut is not None:
        lines = lines[:cut]
    meta = {"version": version, "fatal": False, "dropped": dropped, "total": len(records),
            "task_window_max": CAPS["task_window"], "heap_max": CAPS["heap"], "dep_pool_max": CAPS["dep_pool"],
            "tensormap_max": 100}
    return "".join(json.dumps(x) + "\n" for x in [meta, *lines]).encode(), lines


class Model:
    """The issue's rules, literally.  ``lines[i]`` is at file line i + 2."""

    def __init__(self, lines: list[Rec]) -> None:
        open_: dict[int, tuple[int, Rec]] = {}  # depth -> (line, begin)
        self.pairs: list[tuple[int, int, Rec, Rec]] = []  # (begin line, end line, begin, end) in end order
        self.abandoned: list[int] = []  # begin lines closed as unmatched begins
        self.unmatched_ends: list[int] = []
        for i, r in enumerate(lines):
            line, d = i + 2, r["depth"]
            if r["phase"] == "begin":
                for k in sorted((k for k in open_ if k >= d), reverse=True):
                    self.abandoned.append(open_.pop(k)[0])
                open_[d] = (line, r)
            else:
                for k in sorted((k for k in open_ if k > d), reverse=True):
                    self.abandoned.append(open_.pop(k)[0])
                if d in open_ and open_[d][1]["site"] == r["site"]:
                    b_line, b = open_.pop(d)
                    self.pairs.append((b_line, line, b, r))
                else:
                    self.unmatched_ends.append(line)
        self.wedged = [(line, b["site"], d) for d, (line, b) in sorted(open_.items())]
        self.lines = lines

    def usage(self, b: Rec, e: Rec, res: str) -> tuple[int, int, int]:
        return (e[f"{res}_end"] - b[f"{res}_start"], e[f"{res}_end"] - e[f"{res}_start"],
                e[f"{res}_end"] - b[f"{res}_end"])

    def peaks(self) -> dict[tuple[int, str], tuple[int, str, int, str, int, str, int]]:
        """(ring, resource) -> (high_water, site, live_at_exit, site, alloc, site, scopes); first site reaching max."""
        out = {}
        for ring in range(4):
            pairs = [(b, e) for _, _, b, e in self.pairs if e["ring"] == ring]
            if not pairs:
                continue
            for res in RESOURCES:
                figures = [self.usage(b, e, res) for b, e in pairs]
                row: list[Any] = []
                for k in range(3):
                    top = max(f[k] for f in figures)
                    first = next(e["site"] for (_, e), f in zip(pairs, figures, strict=True) if f[k] == top)
                    row += [top, first]
                out[(ring, res)] = (*row, len(pairs))
        return out


def _chunks(rnd: random.Random, size: int) -> list[int]:
    return sorted(rnd.sample(range(1, size), min(size - 1, rnd.randint(0, 6)))) if size > 1 else []


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(scope_files())
def test_pairer_agrees_with_the_model(case: tuple[list[Rec], list[bool], int | None, random.Random]) -> None:
    records, kept, cut, rnd = case
    data, lines = _file(records, kept, cut)
    d = read_bytes(data, _chunks(rnd, len(data)))
    model = Model(lines)
    s = d.summary

    assert d.problems == [] or [p.reason for p in d.problems] == ["metadata_only"]
    assert s.records == len(lines)
    assert [(e.begin_line, e.end_line) for e in d.events if isinstance(e, Scope)] == \
        [(b, e) for b, e, _, _ in model.pairs]
    assert [e.scope.line for e in d.events if isinstance(e, Abandoned)] == model.abandoned
    assert [e.line for e in d.events if isinstance(e, UnmatchedEnd)] == model.unmatched_ends
    assert (s.scopes, s.unmatched_begins, s.unmatched_ends) == \
        (len(model.pairs), len(model.abandoned), len(model.unmatched_ends))
    assert [(w.line, w.site, w.depth) for w in s.wedged] == model.wedged
    assert s.complete == (cut is None or cut >= sum(kept))

    for scope, (_, _, b, e) in zip([x for x in d.events if isinstance(x, Scope)], model.pairs, strict=True):
        assert [(u.high_water, u.live_at_exit, u.alloc) for u in scope.usage if u is not None] == \
            [model.usage(b, e, res) for res in RESOURCES]

    expected = model.peaks()
    got = {(p.ring, p.resource): (p.high_water, p.high_water_site, p.live_at_exit, p.live_at_exit_site,
                                  p.alloc, p.alloc_site, p.scopes) for p in s.peaks if p.scopes}
    assert got == expected
    for p in s.peaks:
        assert p.capacity == CAPS[p.resource][p.ring]

    if lines:
        top = max(r["tensormap"] for r in lines)
        assert (s.tensormap.peak, s.tensormap.peak_site) == \
            (top, next(r["site"] for r in lines if r["tensormap"] == top))
        assert s.tensormap.live == lines[-1]["tensormap"]
    assert s.max_depth == max((r["depth"] for r in lines), default=0)


@settings(max_examples=100, deadline=None)
@given(scope_files())
def test_without_drops_every_generated_scope_pairs(case: tuple[list[Rec], list[bool], int | None,
                                                                random.Random]) -> None:
    records, _, _, _ = case
    data, _lines = _file(records, [True] * len(records), None)
    s = read_bytes(data).summary
    assert (s.scopes, s.unmatched_begins, s.unmatched_ends, s.wedged) == (len(records) // 2, 0, 0, ())
    assert s.complete


@settings(max_examples=150, deadline=None)
@given(scope_files(), st.data())
def test_any_chunking_decodes_identically(case: tuple[list[Rec], list[bool], int | None, random.Random],
                                          data: st.DataObject) -> None:
    records, kept, cut, _ = case
    raw, _ = _file(records, kept, cut)
    if data.draw(st.booleans()):
        raw = raw.replace(b"\n", b"\r\n")
    if data.draw(st.booleans()):
        raw = raw.rstrip(b"\n")  # last line without newline
    cuts = data.draw(st.lists(st.integers(0, len(raw)), max_size=12).map(sorted))

    def decode(offsets: list[int]) -> list[object]:
        dec = Decoder()
        out: list[object] = []
        bounds = [0, *offsets, len(raw)]
        for a, b in itertools.pairwise(bounds):
            out.extend(dec.feed(raw[a:b]))
        return out + list(dec.finish())

    assert decode(cuts) == decode([])


@settings(max_examples=150, deadline=None)
@given(scope_files(), st.sampled_from([4, 5]))
def test_wrapped_heap_unrolls_to_the_monotonic_counters(case: tuple[list[Rec], list[bool], int | None,
                                                                     random.Random], version: int) -> None:
    """v4/v5: writing heap counters modulo capacity and unrolling them gives the same figures."""
    records, _, _, _ = case
    wrapped = []
    for r in records:
        cap = CAPS["heap"][r["ring"]]
        w = dict(r, heap_start=r["heap_start"] % cap, heap_end=r["heap_end"] % cap)
        if version == 4:
            del w["dep_pool_start"], w["dep_pool_end"]
        wrapped.append(w)
    data, _ = _file(wrapped, [True] * len(wrapped), None, version=version)
    d = read_bytes(data)
    assert d.problems == []
    # equal raw offsets read as an empty ring, so a completely full ring reads as empty
    expected = [dict(r, heap_start=r["heap_end"]) if r["heap_end"] - r["heap_start"] == CAPS["heap"][r["ring"]]
                else r for r in records]
    assert [(r.heap_start, r.heap_end) for r in d.records] == [(r["heap_start"], r["heap_end"]) for r in expected]
    assert all((r.dep_pool_start is None) == (version == 4) for r in d.records)
    model = Model(expected)
    for scope, (_, _, b, e) in zip([x for x in d.events if isinstance(x, Scope)], model.pairs, strict=True):
        hp = scope.usage[1]
        assert hp is not None and (hp.high_water, hp.live_at_exit, hp.alloc) == model.usage(b, e, "heap")
