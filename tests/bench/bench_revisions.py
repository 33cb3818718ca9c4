"""The same jobs on two revisions of the product, interleaved in one run: did a change move a figure?

    .venv/bin/python -m tests.bench.bench_revisions BEFORE [AFTER] [--size-mb 100] [--repeat 3]

BEFORE and AFTER are git revisions (AFTER defaults to the working tree).  Each revision gets a
``git worktree`` of its own (removed at the end) and runs with this checkout's virtualenv:
``python -m ringtrace`` started in a worktree imports that worktree's package.  The jobs read one
file, made once by the current simulator, so both revisions see the same bytes:

* ``summary --format json FILE`` (the one-shot read path),
* ``convert FILE -o trace.pftrace`` (decode, pair and the Perfetto writer),
* ``watch FILE --once --events EV`` (the live app: tailer, reader thread, outlets, events sink),
* ``report FILE -o page.html`` (the page's bands and the page),
* the guide's naive reader (``naive.py``) on the same file: the same code in both columns, so
  its ratio shows how much the machine itself drifted during the run.

Runs alternate (before, after, before, after, ...); the smallest CPU time of each counts (CPU:
steadier than wall time on a shared machine).  Each pair of outputs is checked to agree on the
records and scopes read.  Prints a markdown table with the after/before ratio.

``--instructions`` counts instructions instead (``valgrind --tool=callgrind``, one run per job and
revision, ~50x slower: use ``--size-mb 20``): the same count on every run, where this machine's
CPU time of one command varies by up to 2x from run to run.  Counts cover the whole process,
start-up included; run it also on a tiny file (``--size-mb 0`` uses a real sample) to tell the
start-up from the per-record cost.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from tests.bench.common import MB, data_file, run_child  # noqa: E402

PY = sys.executable
NAIVE = Path(__file__).resolve().parent / "naive.py"


def worktree(rev: str, into: Path) -> Path:
    """A detached worktree of ``rev`` under ``into`` (the caller removes it)."""
    path = into / rev.replace("/", "_")
    subprocess.run(["git", "-C", str(ROOT), "worktree", "add", "--detach", "-f", "-q", str(path), rev], check=True)
    # byte-compiled up front, as an installed package is: the first run of a fresh tree would count it
    subprocess.run([PY, "-m", "compileall", "-q", str(path / "ringtrace")], check=True)
    if (path / "setup.py").exists():  # the compiled reading core (issue 27), as the install builds it
        subprocess.run([PY, "setup.py", "-q", "build_ext", "--inplace"], cwd=path, check=True,
                       stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    return path


def jobs(data: Path, out: Path) -> dict[str, list[str]]:
    return {"summary --format json": [PY, "-m", "ringtrace", "summary", "--format", "json", str(data)],
            "convert -o trace.pftrace": [PY, "-m", "ringtrace", "convert", str(data), "-o", str(out / "t.pftrace")],
            "watch --once --events": [PY, "-m", "ringtrace", "watch", str(data), "--once", "--log-level", "error",
                                      "--events", str(out / "ev.jsonl")],
            "report -o page.html": [PY, "-m", "ringtrace", "report", str(data), "-o", str(out / "page.html")],
            "naive reader (baseline)": [PY, str(NAIVE), str(data)]}


def counts(job: str, stdout: bytes, out: Path) -> tuple[int, int] | None:
    """(records, scopes) a job reports, to check both revisions read the same."""
    if job.startswith("summary"):
        [f] = json.loads(stdout)["files"]
        return f["records"], f["scopes"]
    if job.startswith("watch"):
        [line] = (out / "ev.jsonl").read_text().splitlines()
        ev = json.loads(line)
        return ev["records"], ev["scopes"]
    return None


SMALL_SAMPLE = ROOT / "tests/fixtures/samples/outputs/TestScopeStats_default_20261130_101210/scope_stats" \
    / "scope_stats.jsonl"


def instructions(cmd: list[str], cwd: Path) -> int:
    """Instructions ``cmd`` executed (callgrind's ``Collected``), children not followed."""
    res = subprocess.run(["valgrind", "--tool=callgrind", "--callgrind-out-file=/dev/null", *cmd], cwd=cwd,
                         stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, check=True)
    return int(next(line for line in res.stderr.splitlines() if "Collected" in line).split()[-1])


def count_instructions(trees: dict[str, Path], data: Path, tmpdir: Path) -> None:
    print("| job | instructions before | after | after/before |\n|---|---|---|---|")
    for job in jobs(data, tmpdir):
        if job.startswith("naive"):
            continue  # the same code on both sides
        got = {}
        for side, tree in trees.items():
            out = tmpdir / f"out-{side}"
            shutil.rmtree(out, ignore_errors=True)
            out.mkdir()
            got[side] = instructions(jobs(data, out)[job], tree)
        print(f"| {job} | {got['before'] / 1e6:,.0f} M | {got['after'] / 1e6:,.0f} M | "
              f"{got['after'] / got['before']:.3f} |")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    ap.add_argument("before")
    ap.add_argument("after", nargs="?", default="", help="a revision (default: the working tree)")
    ap.add_argument("--size-mb", type=int, default=100)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--repeat", type=int, default=3, help="runs per job and revision; the lowest CPU counts")
    ap.add_argument("--instructions", action="store_true", help="count instructions (callgrind) instead of time")
    args = ap.parse_args()
    data = data_file(args.size_mb, args.seed) if args.size_mb else SMALL_SAMPLE
    with tempfile.TemporaryDirectory() as tmp:
        tmpdir = Path(tmp)
        trees = {"before": worktree(args.before, tmpdir)}
        trees["after"] = worktree(args.after, tmpdir) if args.after else ROOT
        if not args.after:  # byte-compiled like the worktrees (with PYTHONDONTWRITEBYTECODE set, runs write no .pyc)
            subprocess.run([PY, "-m", "compileall", "-q", str(ROOT / "ringtrace")], check=True)
        try:
            if args.instructions:
                print(f"### {args.before} -> {args.after or 'working tree'}: {data.stat().st_size / MB:.1f} MB "
                      "file, instructions (callgrind)\n")
                count_instructions(trees, data, tmpdir)
                print(f"\ncommand: `.venv/bin/python -m tests.bench.bench_revisions {args.before} {args.after} "
                      f"--size-mb {args.size_mb} --instructions`")
                return
            best: dict[tuple[str, str], tuple[float, float, float]] = {}
            for _ in range(max(1, args.repeat)):
                for side, tree in trees.items():
                    out = tmpdir / f"out-{side}"
                    shutil.rmtree(out, ignore_errors=True)
                    out.mkdir()
                    for job, cmd in jobs(data, out).items():
                        wall, cpu, rss, stdout = run_child(cmd, cwd=tree)
                        got = counts(job, stdout, out)
                        key = (job, side)
                        if got is not None:
                            best.setdefault((job, "counts-" + side), (float(got[0]), float(got[1]), 0.0))
                        old = best.get(key)
                        best[key] = (min(cpu, old[0]) if old else cpu, min(wall, old[1]) if old else wall,
                                     max(rss, old[2]) if old else rss)
        finally:
            for tree in trees.values():
                if tree != ROOT:
                    subprocess.run(["git", "-C", str(ROOT), "worktree", "remove", "--force", str(tree)], check=False)
    load = os.getloadavg()
    print(f"### {args.before} -> {args.after or 'working tree'}: {data.stat().st_size / MB:.0f} MB file, "
          f"best of {args.repeat}, load average {load[0]:.2f} {load[1]:.2f} {load[2]:.2f}\n")
    print("| job | CPU before | CPU after | after/before | wall before | wall after | peak RSS before / after |")
    print("|---|---|---|---|---|---|---|")
    for job in jobs(data, ROOT):
        b, a = best[(job, "before")], best[(job, "after")]
        print(f"| {job} | {b[0]:.2f} s | {a[0]:.2f} s | {a[0] / b[0]:.3f} | {b[1]:.2f} s | {a[1]:.2f} s | "
              f"{b[2]:.0f} / {a[2]:.0f} MB |")
        cb, ca = best.get((job, "counts-before")), best.get((job, "counts-after"))
        if cb is not None and cb != ca:
            print(f"\n**{job}: the revisions read different figures: {cb[:2]} vs {ca[:2] if ca else None}**")
    print(f"\ncommand: `.venv/bin/python -m tests.bench.bench_revisions {args.before} {args.after} "
          f"--size-mb {args.size_mb} --repeat {args.repeat}`")


if __name__ == "__main__":
    main()
