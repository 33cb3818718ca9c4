"""Benchmark: ``ringtrace report`` against ``ringtrace summary`` on the same input, in one run.

Figures per input: the page's size (bounded: 2 MiB at most, whatever the input), the report's time as a ratio
of ``summary --format json``'s on the same input (CPU of each child, best of ``--repeat``; wall too), and the
time Chromium takes to open the page until its script has drawn every chart (``data-ready``; Debian's
Chromium through Playwright, skipped when either is missing).  Inputs: the real runtime files
(``tests/fixtures/samples``, and five real runs of one program, ``tests/fixtures/report``), a ~41 MB simulated
file (about the real 168k-record run's size), a ~500 MB one, the L3 demo tree, and forty ranks of a long run
(the budget at work: columns merged, then charts left out).

For comparison, the size the runtime's own plot tool (``scope_stats_plot``) would write: it draws one SVG
circle per scope in each of its series (high water and live at exit in "resource pressure", alloc in "alloc
per scope", per ring resource), so its page grows with the run; estimated at ``--bytes-per-point`` bytes per
circle (its markup with a tooltip), from the run's scope counts.

    .venv/bin/python -m tests.bench.bench_report [--repeat 3] [--skip-500]

Prints a markdown table for docs/performance.md.  Nothing is asserted.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path

from ringtrace.demo import sim
from tests.bench.common import MB, ROOT, data_file, run_child

PY = sys.executable
CHROMIUM = "/usr/bin/chromium"


def best(cmd: list[str], repeat: int) -> tuple[float, float, bytes]:
    runs = [run_child(cmd) for _ in range(max(1, repeat))]
    return min(r[0] for r in runs), min(r[1] for r in runs), runs[0][3]


def upstream_points(files: list[dict[str, object]]) -> int:
    """Circles the runtime's plot tool draws: per ring resource in use, 3 per scope of that ring."""
    points = 0
    for f in files:
        rings = f["rings"]
        assert isinstance(rings, list)
        for r in rings:
            points += 3 * int(r["scopes"])
    return points


def open_seconds(page: Path) -> float | None:
    """Seconds from navigation to the page's ``data-ready`` in headless Chromium (best of 3); None without it."""
    try:
        from playwright.sync_api import sync_playwright
    except ImportError:
        return None
    if not Path(CHROMIUM).exists():
        return None
    with sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=CHROMIUM, args=["--headless", "--no-sandbox", "--disable-gpu"])
        times = []
        for _ in range(3):
            tab = browser.new_page(viewport={"width": 1300, "height": 900})
            t0 = time.perf_counter()
            tab.goto(page.resolve().as_uri())
            tab.wait_for_selector("body[data-ready='1']", timeout=600_000)
            times.append(time.perf_counter() - t0)
            tab.close()
        browser.close()
    return min(times)


def size_of(paths: list[Path]) -> float:
    return sum(p.stat().st_size if p.is_file() else sum(f.stat().st_size for f in p.rglob("*") if f.is_file())
               for p in paths) / MB


def measure(label: str, paths: list[Path], repeat: int, per_point: int) -> str:
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "r.html"
        s_wall, s_cpu, text = best([PY, "-m", "ringtrace", "summary", "--format", "json", *map(str, paths)], repeat)
        r_wall, r_cpu, _ = best([PY, "-m", "ringtrace", "report", *map(str, paths), "-o", str(out)], repeat)
        size = out.stat().st_size
        opened = open_seconds(out)
    files = json.loads(text)["files"]
    records = sum(int(f["records"]) for f in files)
    up = upstream_points(files)
    shown = "-" if opened is None else f"{opened:.2f} s"
    return (f"| {label} | {size_of(paths):.1f} MB, {len(files)} source(s), {records:,} records | "
            f"{size / 1024:.0f} KiB | "
            f"{s_cpu:.2f} s | {r_cpu:.2f} s | {r_cpu / s_cpu:.2f}x | {r_wall / s_wall:.2f}x | {shown} | "
            f"{up:,} circles, ~{up * per_point / MB:.1f} MB |")


def many_ranks(root: Path, ranks: int = 40) -> Path:
    """``ranks`` copies of one long simulated run in an L3 layout (rank<N>/d0)."""
    scn = sim.Scenario(name="long", program="long", seed=3, loops=(2560, 4, 2), tasks=(0, 2, 3, 2),
                       tensor_bytes=(1024, 4096), task_window_max=(16, 16, 32, 64),
                       heap_max=(1 << 16, 1 << 16, 1 << 17, 1 << 18), dep_pool_max=(64, 64, 256, 512))
    one = root / "one.jsonl"
    sim.write_file(one, scn)
    tree = root / "build_output" / "long_l3_20261130_120000" / "dfx_outputs"
    for rank in range(ranks):
        d = tree / f"rank{rank}" / "d0" / "scope_stats"
        d.mkdir(parents=True)
        shutil.copy(one, d / "scope_stats.jsonl")
    return tree


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--skip-500", action="store_true")
    ap.add_argument("--bytes-per-point", type=int, default=80)
    args = ap.parse_args()
    rows = ["| input | size | page | summary CPU | report CPU | ratio CPU | ratio wall | opens in Chromium | "
            "upstream plot tool |", "|---|---|---|---|---|---|---|---|---|"]
    fixtures = ROOT / "tests" / "fixtures"
    rows.append(measure("real runtime files (`tests/fixtures/samples`)", [fixtures / "samples"], args.repeat,
                        args.bytes_per_point))
    rows.append(measure("five real runs of one program (`tests/fixtures/report`)", [fixtures / "report"],
                        args.repeat, args.bytes_per_point))
    rows.append(measure("~41 MB file", [data_file(41, 0)], args.repeat, args.bytes_per_point))
    if not args.skip_500:
        rows.append(measure("~500 MB file", [data_file(500, 0)], max(1, args.repeat // 3), args.bytes_per_point))
    with tempfile.TemporaryDirectory() as tmp:
        for _ in sim.write_tree(tmp):
            pass
        rows.append(measure("L3 demo tree", [Path(tmp)], args.repeat, args.bytes_per_point))
    with tempfile.TemporaryDirectory() as tmp:
        rows.append(measure("forty ranks of a long run", [many_ranks(Path(tmp))], args.repeat, args.bytes_per_point))
    print(f"load average {os.getloadavg()[0]:.2f} (cwd {ROOT})")
    print("\n".join(rows))


if __name__ == "__main__":
    main()
