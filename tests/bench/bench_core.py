"""Benchmark of the compiled reading core (issue 27): every reader of records against its baselines, in one run.

    .venv/bin/python -m tests.bench.bench_core [--repeat 3] [--size-mb 100] [--real-mb 41] [--big-mb 500]
                                               [--skip-big] [--startup-runs 20]

Two files: the simulator's ~100 MB file (``data_file``, as the other benchmarks) and ~41 MB made of the
runtime's largest real sample repeated (``real_file``: about the size of the real 168,450-record run the
issue measured, which is not in the repository).  On each, every job runs as its own child process,
rounds interleaved (each job once per round), and the smallest CPU and wall time of ``--repeat`` rounds
count; the peak RSS is the largest (``wait4``, from a small launcher: ``run_small``).  The jobs:

* the floor: ``floor.c`` (read, split lines, parse every integer, keep per-ring maxima; compiled here
  with ``cc -O2``), the least any reader can do;
* the guide's naive reader (``naive.py``: ``json.loads`` every line into a list);
* ``summary --format json`` on the compiled core, and on the pure-Python path (``RINGTRACE_PURE=1``);
* ``watch FILE --once --events EV`` (the live app, catching up on a finished file), on both paths;
* ``convert FILE -o trace.pftrace`` (records and paired scopes to the Perfetto writer);
* ``report FILE -o page.html`` (the page's bands, folded by the reader as it pairs, and the page).

Each command's start-up is measured on a tiny real file (``--startup-runs``, best of), so the table also
gives each job's time less its start-up: the reading and the sink.  Prints markdown tables and the
issue's targets as ratios, met or not.  Nothing is asserted.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path

from tests.bench.common import MB, ROOT, data_file, real_file, run_small

PY = sys.executable
HERE = Path(__file__).resolve().parent
TINY = ROOT / "tests/fixtures/samples/outputs/TestScopeStats_default_20261130_101210/scope_stats/scope_stats.jsonl"
PURE = {**os.environ, "RINGTRACE_PURE": "1"}
COMPILED = {k: v for k, v in os.environ.items() if k != "RINGTRACE_PURE"}

Job = tuple[list[str], dict[str, str]]


def build_floor(into: Path) -> Path:
    exe = into / "floor"
    cc = os.environ.get("CC") or shutil.which("cc") or "gcc"
    subprocess.run([cc, "-O2", str(HERE / "floor.c"), "-o", str(exe)], check=True)
    return exe


def jobs(path: Path, floor: Path, out: Path) -> dict[str, Job]:
    rt = [PY, "-m", "ringtrace"]
    return {
        "floor (compiled single pass)": ([str(floor), str(path)], COMPILED),
        "naive reader (guide §5)": ([PY, str(HERE / "naive.py"), str(path)], COMPILED),
        "summary --format json": ([*rt, "summary", "--format", "json", str(path)], COMPILED),
        "summary, pure Python": ([*rt, "summary", "--format", "json", str(path)], PURE),
        "watch --once --events": ([*rt, "watch", str(path), "--once", "--log-level", "error", "--events",
                                   str(out / "ev.jsonl")], COMPILED),
        "watch, pure Python": ([*rt, "watch", str(path), "--once", "--log-level", "error", "--events",
                                str(out / "ev.jsonl")], PURE),
        "convert -o trace.pftrace": ([*rt, "convert", str(path), "-o", str(out / "t.pftrace")], COMPILED),
        "report -o page.html": ([*rt, "report", str(path), "-o", str(out / "r.html")], COMPILED),
    }


class Best:
    def __init__(self) -> None:
        self.wall = self.cpu = float("inf")
        self.rss = 0.0
        self.out = b""

    def add(self, wall: float, cpu: float, rss: float, out: bytes) -> None:
        self.wall, self.cpu, self.rss = min(self.wall, wall), min(self.cpu, cpu), max(self.rss, rss)
        self.out = self.out or out


def measure(table: dict[str, Job], repeat: int, rounds_done: Callable[[int], None] = lambda r: None) -> dict[str, Best]:
    best = {name: Best() for name in table}
    for r in range(repeat):
        for name, (cmd, env) in table.items():
            best[name].add(*run_small(cmd, env))
        rounds_done(r)
    return best


def records_of(best: dict[str, Best]) -> int:
    [f] = json.loads(best["summary --format json"].out)["files"]
    [g] = json.loads(best["summary, pure Python"].out)["files"]
    assert f == g, "the compiled core and the pure path disagree"  # the same file object, every figure
    assert f["complete"] and f["parse_errors"] == 0, f
    return int(f["records"])


def startup(floor: Path, runs: int, out: Path) -> dict[str, Best]:
    """Each ringtrace job on the tiny file (best of ``runs``): the fixed cost of each command."""
    return measure({k: v for k, v in jobs(TINY, floor, out).items() if not k.startswith(("floor", "naive"))}, runs)


def ratio_line(label: str, value: float, goal: str, met: bool) -> str:
    return f"- {label}: **{value:.2f}** (goal {goal}): {'met' if met else 'NOT met'}"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--size-mb", type=int, default=100)
    ap.add_argument("--real-mb", type=int, default=41)
    ap.add_argument("--big-mb", type=int, default=500)
    ap.add_argument("--skip-big", action="store_true", help="skip summary's peak RSS on the big file")
    ap.add_argument("--startup-runs", type=int, default=20)
    args = ap.parse_args()

    # byte-compiled, as an installed package is (with PYTHONDONTWRITEBYTECODE set, no run writes a .pyc and
    # each would compile every module it imports: +300 M instructions, ~40 ms, of start-up)
    subprocess.run([PY, "-m", "compileall", "-q", str(ROOT / "ringtrace")], check=True)
    files = {f"simulated {args.size_mb} MB": data_file(args.size_mb, 0),
             f"real sample repeated, {args.real_mb} MB": real_file(args.real_mb)}
    print(f"python {sys.version.split()[0]}, {os.cpu_count()} CPUs, load average {os.getloadavg()[0]:.2f} "
          f"at the start; command: `python -m tests.bench.bench_core --repeat {args.repeat}`\n")
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp)
        floor = build_floor(out)
        base = startup(floor, args.startup_runs, out)
        print("Start-up: each command on a two-record file (best of "
              f"{args.startup_runs}), CPU / wall:\n")
        print("| command | CPU | wall |\n|---|---|---|")
        for name, b in base.items():
            print(f"| {name} | {b.cpu * 1000:.0f} ms | {b.wall * 1000:.0f} ms |")
        up = base["summary --format json"].cpu / base["summary, pure Python"].cpu
        print(f"\nstart-up, compiled / pure: {up:.2f} (CPU; goal: not slower)\n")
        for label, path in files.items():
            best = measure(jobs(path, floor, out), args.repeat)
            n = records_of(best)
            mb = path.stat().st_size / MB
            print(f"\n### {label} ({mb:.1f} MiB, {n:,} records), best of {args.repeat}, "
                  f"load average {os.getloadavg()[0]:.2f}\n")
            print("| job | CPU | wall | peak RSS | CPU less its start-up | records/s (wall) |")
            print("|---|---|---|---|---|---|")
            for name, b in best.items():
                less = f"{b.cpu - base[name].cpu:.2f} s" if name in base else ""
                print(f"| {name} | {b.cpu:.2f} s | {b.wall:.2f} s | {b.rss:.0f} MB | {less} | {n / b.wall:,.0f} |")
            s, naive = best["summary --format json"], best["naive reader (guide §5)"]
            fl = best["floor (compiled single pass)"]
            pure, watch = best["summary, pure Python"], best["watch --once --events"]
            conv, rep = best["convert -o trace.pftrace"], best["report -o page.html"]
            read = s.cpu - base["summary --format json"].cpu
            print()
            print(ratio_line("summary vs the naive reader, CPU", naive.cpu / s.cpu, ">= 10x", naive.cpu / s.cpu >= 10))
            print(ratio_line("summary vs the naive reader, wall", naive.wall / s.wall, ">= 10x",
                             naive.wall / s.wall >= 10))
            print(ratio_line("summary / the compiled floor, CPU", s.cpu / fl.cpu, "<= 2x", s.cpu / fl.cpu <= 2))
            print(f"- summary less its start-up / the floor, CPU: {read / fl.cpu:.2f}")
            print(f"- pure path / compiled core (summary, CPU): {pure.cpu / s.cpu:.2f}")
            print(ratio_line("watch --once / summary, CPU", watch.cpu / s.cpu, "<= 1.3x", watch.cpu / s.cpu <= 1.3))
            watch_mb = (watch.cpu - base["watch --once --events"].cpu) / mb * 1000
            watch_pure_mb = (best["watch, pure Python"].cpu - base["watch, pure Python"].cpu) / mb * 1000
            print(f"- watch / summary, each less its start-up (CPU per MB): "
                  f"{(watch.cpu - base['watch --once --events'].cpu) / read:.2f}")
            print(f"- watch's CPU per MB less its start-up: {watch_mb:.2f} ms (pure path: {watch_pure_mb:.2f} ms)")
            print(ratio_line("convert, records/s by wall time (thousands)", n / conv.wall / 1000, ">= 1,000",
                             n / conv.wall >= 1_000_000))
            print(ratio_line("report / summary, CPU", rep.cpu / s.cpu, "<= 1.5x", rep.cpu / s.cpu <= 1.5))
        if not args.skip_big:
            big = data_file(args.big_mb, 0)
            rss = measure({"summary": ([PY, "-m", "ringtrace", "summary", "--format", "json", str(big)], COMPILED)},
                          1)["summary"].rss
            print()
            label = f"summary's peak RSS on {big.stat().st_size / MB:.0f} MiB, MB"
            print(ratio_line(label, rss, "<= 30 MB", rss <= 30))
    return 0


if __name__ == "__main__":
    sys.exit(main())
