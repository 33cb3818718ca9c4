"""The ``max_spans`` budget policy (:mod:`ringtrace.sinks.otlp._select`): wedged scopes, peaks and
their ancestors always kept, then shallower scopes first, within the depth where the budget runs
out in the order they ended; over generated runs at a real receiver, and as properties of
:class:`Budget` on random well-nested runs (bounded memory included)."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from ringtrace.model.records import RESOURCES, Scope, Usage
from ringtrace.sinks.otlp import Protocol
from ringtrace.sinks.otlp._select import METRICS, Budget
from tests._support.otlp import PROTOCOLS, by_trace, convert, generated_tree, make_sink, root_of
from tests._support.otlp_receiver import OtlpReceiver
from tests._support.scopes import mark_peaks


def brute_force_peaks(scopes: list[Scope]) -> dict[tuple[int, int, int], Scope]:
    """Per (ring, resource, metric): the scope holding the run's peak (the last to set its bit)."""
    holders: dict[tuple[int, int, int], Scope] = {}
    for sc in mark_peaks(scopes):
        for bit in range(3 * len(RESOURCES)):
            if sc.sets >> bit & 1:
                holders[sc.ring, bit // 3, bit % 3] = sc
    return holders


def ancestors(sc: Scope, by_line: dict[int, Scope]) -> list[Scope]:
    out = []
    while sc.parent_line in by_line:
        sc = by_line[sc.parent_line]
        out.append(sc)
    return out


def check_policy(scopes: list[Scope], kept: Sequence[Scope], budget: int, wedged_lines: Sequence[int] = ()) -> None:
    by_line = {s.begin_line: s for s in scopes}
    kept_lines = {s.begin_line for s in kept}
    must = set()
    for sc in brute_force_peaks(scopes).values():
        must.add(sc.begin_line)
        must.update(a.begin_line for a in ancestors(sc, by_line))
    assert must <= kept_lines
    room = budget - 1 - len(wedged_lines)
    assert len(kept_lines) == max(len(must), min(len(scopes), room))
    for sc in kept:  # closed under parent (a parent that paired is kept)
        assert sc.parent_line not in by_line or sc.parent_line in kept_lines or sc.parent_line in wedged_lines
    filled = [s.depth for s in kept if s.begin_line not in must]
    left = [s.depth for s in scopes if s.begin_line not in kept_lines]
    if filled and left:
        assert max(filled) <= min(left)  # shallower first
        cut = max(filled)  # within the last depth: in the order they ended
        kept_ends = [s.end_line for s in kept if s.depth == cut and s.begin_line not in must]
        left_ends = [s.end_line for s in scopes if s.depth == cut and s.begin_line not in kept_lines]
        if left_ends:
            assert max(kept_ends) < min(left_ends)


@pytest.mark.parametrize("protocol", PROTOCOLS)
def test_budget_keeps_wedged_peaks_ancestors_then_shallow(rx: OtlpReceiver, tmp_path: Path,
                                                          protocol: Protocol) -> None:
    paths = generated_tree(tmp_path)
    sink = make_sink(rx, protocol, max_spans=40)
    try:
        col = convert(paths, sink)
    finally:
        sink.close()
    traces = by_trace(rx.spans())
    omitted = 0
    for spans in traces.values():
        root = root_of(spans)
        path = root.attrs["ringtrace.path"]
        fin, scopes = col.finished[path], col.scopes[path]
        wedged = [w.line for w in fin.summary.wedged]
        by_line = {sp.attrs["ringtrace.line"]: sp for sp in spans if sp is not root}
        assert set(wedged) <= set(by_line) and all(by_line[w].status_code == 2 for w in wedged)
        kept = [sc for sc in scopes if sc.begin_line in by_line]
        assert len(kept) + len(wedged) + 1 == len(spans)
        check_policy(scopes, kept, 40, wedged)
        for p in fin.summary.peaks:
            if p.scopes:
                peak = by_line[p.high_water_line]
                assert f"ring{p.ring}.{p.resource}.high_water" in peak.attrs["ringtrace.peak"]
        ids = {sp.span_id for sp in spans}
        assert all(sp.parent_id in ids for sp in spans if sp is not root)
        assert root.attrs["ringtrace.spans.omitted"] == len(scopes) - len(kept)
        assert root.attrs["ringtrace.spans.kept"] == len(spans) and root.attrs["ringtrace.spans.max"] == 40
        omitted += len(scopes) - len(kept)
    assert omitted > 0 and sink.spans_dropped_by_budget == omitted == sink.dropped_spans


@st.composite
def runs(draw: st.DrawFn) -> list[Scope]:
    """A random well-nested run: scopes in the order they end, with begin/end/parent lines and usage."""
    out: list[Scope] = []
    line = [2]

    def scope(depth: int, parent: int) -> None:
        begin = line[0]
        line[0] += 1
        for _ in range(draw(st.integers(0, 3 if depth < 4 else 0))):
            scope(depth + 1, begin)
        end = line[0]
        line[0] += 1
        usage = tuple(Usage(*(draw(st.integers(0, 50)) for _ in range(3))) for _ in RESOURCES)
        out.append(Scope(f"s{depth}", depth, min(depth, 3), begin, end, parent, usage))

    for _ in range(draw(st.integers(1, 4))):
        scope(draw(st.integers(0, 1)), 0)
    return mark_peaks(out)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(runs(), st.integers(1, 60))
def test_budget_policy_properties(scopes: list[Scope], max_spans: int) -> None:
    budget = Budget(max_spans)
    for sc in scopes:
        budget.add(sc)
        assert len(budget._fill) <= max_spans  # bounded memory
    sel = budget.select(reserved=1)
    assert list(sel.scopes) == sorted(sel.scopes, key=lambda s: s.begin_line)
    assert sel.offered == len(scopes) and sel.omitted == len(scopes) - len(sel.scopes)
    check_policy(scopes, sel.scopes, max_spans)
    for (ring, r, m), sc in brute_force_peaks(scopes).items():
        assert f"ring{ring}.{RESOURCES[r]}.{METRICS[m]}" in sel.peaks[sc.begin_line]
