"""``ringtrace report``: the page in real headless Chromium (Debian's, through Playwright), offline.

Each test writes a report with the real command, opens it from ``file://`` with every request other
than the page itself refused and recorded, and asserts: no console error, no page error, no network
request; the charts per ring and resource in use are there (element counts); the figures the page
shows equal ``summary --format json``'s; the verdict leads.  A screenshot per test is kept in
``test-artifacts/report/`` (git-ignored).  In CI a missing Chromium or Playwright fails.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from ringtrace.demo import sim
from tests._support.perfetto_ui import CHROMIUM, CHROMIUM_ARGS
from tests._support.require import require
from tests._support.samples import SAMPLES

ARTIFACTS = Path(__file__).resolve().parents[2] / "test-artifacts" / "report"


def ringtrace(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "ringtrace", *args], capture_output=True, text=True, timeout=300)


def summary_json(*paths: Path) -> list[dict[str, Any]]:
    proc = ringtrace("summary", "--format", "json", *map(str, paths))
    files: list[dict[str, Any]] = json.loads(proc.stdout)["files"]
    return files


def amount(resource: str, n: int | None) -> str:
    """The page's own formatting of a figure (page.js ``amount``)."""
    if n is None:
        return "-"
    if resource != "heap":
        return str(n)
    for unit, size in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if abs(n) >= size:
            return f"{n / size:.1f} {unit}"
    return f"{n} B"


class Browser:
    def __init__(self) -> None:
        from playwright.sync_api import sync_playwright

        self._pw = sync_playwright().start()
        self.browser = self._pw.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS, headless=True)

    def open(self, page_path: Path) -> tuple[Any, list[str], list[str]]:
        """The page, its console/page errors, and every request it made besides itself (all refused)."""
        page = self.browser.new_page(viewport={"width": 1300, "height": 900})
        errors: list[str] = []
        requests: list[str] = []
        page.on("console", lambda m: errors.append(m.text) if m.type == "error" else None)
        page.on("pageerror", lambda e: errors.append(str(e)))
        url = page_path.resolve().as_uri()

        def route(r: Any) -> None:
            if r.request.url == url:
                r.continue_()
            else:
                requests.append(r.request.url)
                r.abort()

        page.route("**/*", route)
        page.goto(url)
        page.wait_for_selector("body[data-ready='1']", timeout=60_000)
        return page, errors, requests

    def close(self) -> None:
        self.browser.close()
        self._pw.stop()


@pytest.fixture(scope="module")
def browser() -> Iterator[Browser]:
    require(Path(CHROMIUM).exists(), f"{CHROMIUM} not installed (apt install chromium; make test installs it)")
    try:
        import playwright  # noqa: F401
    except ImportError:
        require(False, "playwright not installed (pip install playwright; no browser download needed)")
    b = Browser()
    yield b
    b.close()


def shot(page: Any, name: str) -> None:
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    page.screenshot(path=str(ARTIFACTS / f"{name}.png"), full_page=True)


def check_source(page: Any, index: int, obj: dict[str, Any]) -> None:
    """Section ``index`` shows ``obj``'s figures (the summary JSON) and a chart per ring resource in use."""
    sec = page.locator(f"section#s{index}")
    rows = sec.locator("table.rings tr").all_inner_texts()[1:]
    want = [f"{r['ring']}\t{r['resource']}\t{amount(r['resource'], r['capacity'])}\t"
            f"{amount(r['resource'], r['high_water'])}" for r in obj["rings"]]
    assert [("\t".join(row.split("\t")[:4])) for row in rows] == want
    charts = sec.locator(".chart")
    used = [r for r in obj["rings"] if r["high_water"] or r["live_at_exit"] or r["alloc"]]
    assert charts.count() >= len(used)
    for r in used:
        c = sec.locator(f".chart[data-ring='{r['ring']}'][data-resource='{r['resource']}']")
        assert c.count() == 1, r
        assert c.locator("polygon.occupancy").count() == 1
        assert c.locator("line.capacity").count() == (1 if r["capacity"] else 0)
    for w in obj["wedged"][-1:]:
        assert sec.locator(f".chart[data-ring='{w['ring']}'] line.wedge").count() >= 1
        assert w["site"] in sec.locator(".verdict").inner_text()


def test_one_wedged_run_leads_with_its_verdict(browser: Browser, tmp_path: Path) -> None:
    run = SAMPLES / "failed" / "NestedScopes_window4_flow_control_deadlock"
    out = tmp_path / "r.html"
    proc = ringtrace("report", str(run), "-o", str(out))
    assert proc.returncode == 0, proc.stderr
    page, errors, requests = browser.open(out)
    shot(page, "wedged")
    assert errors == [] and requests == []
    [obj] = summary_json(run)
    assert page.locator("section#s0").get_attribute("data-verdict") == "wedged"
    assert "FLOW_CONTROL_DEADLOCK" in page.locator("section#s0 .verdict").inner_text()
    assert "ring_task_window" in page.locator("section#s0 pre.runconfig").inner_text()  # the advice second
    check_source(page, 0, obj)
    # hover: the tooltip names a record's line, site and depth
    chart = page.locator("section#s0 .chart[data-ring='3'][data-resource='task_window'] svg")
    box = chart.bounding_box()
    page.mouse.move(box["x"] + box["width"] - 3, box["y"] + box["height"] / 2)
    tip = page.locator("#tip").inner_text()
    assert tip.startswith("line ") and "depth " in tip and "live " in tip


def test_several_sources_overview_first_problems_first(browser: Browser, tmp_path: Path) -> None:
    out = tmp_path / "r.html"
    proc = ringtrace("report", str(SAMPLES), "-o", str(out))
    assert proc.returncode == 0, proc.stderr
    page, errors, requests = browser.open(out)
    shot(page, "samples")
    assert errors == [] and requests == []
    files = summary_json(SAMPLES)
    overview = page.locator("table.overview tr").all_inner_texts()[1:]
    assert len(overview) == len(files) == page.locator("section.source").count()
    kinds = [row.split("\t")[1] for row in overview]
    order = {"wedged": 0, "failed": 0, "near": 1, "healthy": 2}
    assert kinds == sorted(kinds, key=order.__getitem__) and kinds[0] in ("wedged", "failed")
    by_name = {}
    for f in files:
        lab = f["labels"]
        name = "/".join(p for p in (lab["run"], f"rank{lab['rank']}" if lab["rank"] else "",
                                    f"d{lab['dispatch']}" if lab["dispatch"] else "") if p)
        by_name[name] = f
    for i, row in enumerate(overview):
        check_source(page, i, by_name[row.split("\t")[0]])


def test_the_page_does_not_grow_with_the_run(browser: Browser, tmp_path: Path) -> None:
    """A run 16x longer gives a page of about the same size (decimation per pixel column)."""
    sizes = []
    for layers in (640, 2560):
        scn = sim.Scenario(name="long", program="long", seed=3, loops=(layers, 4, 2), tasks=(0, 2, 3, 2),
                           tensor_bytes=(1024, 4096), task_window_max=(16, 16, 32, 64),
                           heap_max=(1 << 16, 1 << 16, 1 << 17, 1 << 18), dep_pool_max=(64, 64, 256, 512))
        path = tmp_path / f"long{layers}" / "scope_stats" / "scope_stats.jsonl"
        path.parent.mkdir(parents=True)
        sim.write_file(path, scn)
        out = tmp_path / f"r{layers}.html"
        proc = ringtrace("report", str(path), "-o", str(out))
        assert proc.returncode == 0, proc.stderr
        sizes.append(out.stat().st_size)
        if layers == 2560:
            page, errors, requests = browser.open(out)
            shot(page, "long")
            assert errors == [] and requests == []
            [obj] = summary_json(path)
            check_source(page, 0, obj)
    assert sizes[1] < 1.3 * sizes[0] and sizes[1] < 2 << 20, sizes


def test_bad_input_writes_no_page(tmp_path: Path) -> None:
    bad = tmp_path / "empty"
    bad.mkdir()
    out = tmp_path / "r.html"
    proc = ringtrace("report", str(bad), "-o", str(out))
    assert proc.returncode == 2 and not out.exists()
    assert "no scope_stats" in proc.stderr
    shutil.rmtree(bad)


def test_watch_writes_one_report_per_finished_run(browser: Browser, tmp_path: Path) -> None:
    out = tmp_path / "reports"
    proc = subprocess.run([sys.executable, "-m", "ringtrace", "watch", str(SAMPLES / "failed"), "--once", "--quiet",
                           "--report-dir", str(out)], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    pages = sorted(out.glob("*.html"))
    files = summary_json(SAMPLES / "failed")
    with_records = [f for f in files if f["path"]]
    assert len(pages) == len(with_records) and not list(out.glob(".*.tmp"))
    page, errors, requests = browser.open(pages[0])
    assert errors == [] and requests == [] and page.locator("section.source").count() == 1
