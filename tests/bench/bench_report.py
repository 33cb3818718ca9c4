"""Benchmark: ``ringtrace report`` against ``ringtrace summary`` on the same file, in one run.

Figures: the page's size (bounded: it must not grow with the run) and the report's time as a
ratio of ``summary --format json``'s on the same file (CPU of each child, best of ``--repeat``),
on a ~41 MB file (about the real 168k-record run's size), a ~500 MB file and the L3 demo tree.
For comparison, the size the runtime's own plot tool (``scope_stats_plot``) would write: it draws
one SVG circle per scope in each of its series (high water and live at exit in "resource pressure",
alloc in "alloc per scope", per ring resource), so its page grows with the run; estimated at
``--bytes-per-point`` bytes per circle (its markup with a tooltip), from the run's scope counts.

    .venv/bin/python -m tests.bench.bench_report [--repeat 3] [--skip-500]

Prints a markdown table for the README.  Nothing is asserted.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
from pathlib import Path

from ringtrace.demo import sim
from tests.bench.common import MB, ROOT, data_file, run_child

PY = sys.executable


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


def measure(label: str, paths: list[Path], repeat: int, per_point: int) -> str:
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "r.html"
        s_wall, s_cpu, text = best([PY, "-m", "ringtrace", "summary", "--format", "json", *map(str, paths)], repeat)
        r_wall, r_cpu, _ = best([PY, "-m", "ringtrace", "report", *map(str, paths), "-o", str(out)], repeat)
        size = out.stat().st_size
    files = json.loads(text)["files"]
    records = sum(int(f["records"]) for f in files)
    mb = sum(p.stat().st_size for p in paths if p.is_file()) / MB
    up = upstream_points(files)
    return (f"| {label} | {mb:.0f} MB, {records:,} records | {size / 1024:.0f} KiB | {s_cpu:.2f} s | {r_cpu:.2f} s | "
            f"{r_cpu / s_cpu:.2f}x | {r_wall / s_wall:.2f}x | {up:,} circles, ~{up * per_point / MB:.0f} MB |")


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--skip-500", action="store_true")
    ap.add_argument("--bytes-per-point", type=int, default=80)
    args = ap.parse_args()
    rows = ["| input | size | page | summary CPU | report CPU | ratio CPU | ratio wall | upstream plot tool |",
            "|---|---|---|---|---|---|---|---|"]
    rows.append(measure("~41 MB file", [data_file(41, 0)], args.repeat, args.bytes_per_point))
    if not args.skip_500:
        rows.append(measure("~500 MB file", [data_file(500, 0)], max(1, args.repeat // 3), args.bytes_per_point))
    with tempfile.TemporaryDirectory() as tmp:
        for _ in sim.write_tree(tmp):
            pass
        rows.append(measure("L3 demo tree (9 files)", [Path(tmp)], args.repeat, args.bytes_per_point))
    print(f"load average {os.getloadavg()[0]:.2f} (cwd {ROOT})")
    print("\n".join(rows))


if __name__ == "__main__":
    main()
