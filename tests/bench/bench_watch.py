"""Benchmarks of ``ringtrace watch`` (issue 3's figures).  Not a test: run it by hand.

    .venv/bin/python tests/bench/bench_watch.py [--appends 1000] [--files 1000] [--size-mb 100]

1. Latency: a writer process appends one record line every 5 ms (1,000 appends) to a file
   that an in-process ``App`` follows; the latency of a line is the time from its write
   returning in the writer (CLOCK_MONOTONIC is shared between processes) to the record
   reaching the sink.  Reported as p50/p99 with file-system events, and with ``--poll``
   (poll interval 0.1 s) as the baseline in the same run.
2. Idle cost: CPU used by a ``ringtrace watch`` process over 20 s while 1,000 finished
   files sit under watch, as a share of one core; events vs polling.
3. Throughput: a ~100 MB file written in one write; time from the write to the finished
   run in the watcher, against ``ringtrace summary --format json`` on the same file.
"""

from __future__ import annotations

import argparse
import asyncio
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import psutil

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from ringtrace import config  # noqa: E402
from ringtrace.demo.sim import generate_bytes, named, write_file  # noqa: E402
from ringtrace.model.records import WANT_ALL, RunFinished, RunProgress, SinkEvent  # noqa: E402
from ringtrace.reading.app import App  # noqa: E402
from ringtrace.sinks import FanOut  # noqa: E402
from tests.bench.common import APPENDER  # noqa: E402


def latency(tmp: Path, appends: int, poll: bool) -> tuple[float, float]:
    src = tmp / "src.jsonl"
    write_file(src, named("healthy", seed=1))
    n = min(appends, len(src.read_bytes().splitlines()) - 1)
    root = tmp / ("lat-poll" if poll else "lat-events")
    (root / "scope_stats").mkdir(parents=True)
    target = root / "scope_stats" / "scope_stats.jsonl"
    seen: dict[int, float] = {}

    def on_batch(batch: list[SinkEvent]) -> None:
        now = time.monotonic()
        for e in batch:
            if isinstance(e, RunProgress):
                for r in e.records:
                    seen.setdefault(r.line, now)

    cfg = config.build({"poll": poll, "poll_interval": 0.1, "idle_timeout": 600}, env={})

    async def main() -> list[float]:
        app = App(cfg, [str(root)], FanOut([]), on_batch=on_batch, wants=WANT_ALL)
        task = asyncio.create_task(app.run())
        while not app.ready:
            await asyncio.sleep(0.01)
        proc = await asyncio.create_subprocess_exec(sys.executable, "-c", APPENDER, str(target), str(n), "0.005",
                                                    str(src), stdout=subprocess.PIPE)
        out, _ = await proc.communicate()
        stamps = [float(x) for x in out.split()]
        deadline = time.monotonic() + 10
        while len(seen) < n and time.monotonic() < deadline:
            await asyncio.sleep(0.01)
        app.stop()
        await task
        return stamps

    stamps = asyncio.run(main())
    lat = sorted(seen[i + 2] - t for i, t in enumerate(stamps) if i + 2 in seen)
    if len(lat) < len(stamps):
        print(f"  warning: {len(stamps) - len(lat)} lines not seen", file=sys.stderr)
    return statistics.median(lat), lat[int(0.99 * (len(lat) - 1))]


def idle_cost(tmp: Path, files: int, poll: bool, seconds: float = 20.0) -> float:
    root = tmp / "idle"
    if not root.exists():
        one = tmp / "one.jsonl"
        write_file(one, named("healthy", seed=2))
        for i in range(files):
            d = root / f"run{i:04d}" / "scope_stats"
            d.mkdir(parents=True)
            shutil.copy(one, d / "scope_stats.jsonl")
    ev = tmp / f"idle-{poll}.jsonl"
    args = [sys.executable, "-m", "ringtrace", "watch", str(root), "--events", str(ev)]
    if poll:
        args.append("--poll")
    proc = subprocess.Popen(args, cwd=ROOT)
    ps = psutil.Process(proc.pid)
    deadline = time.monotonic() + 120
    while (not ev.exists() or len(ev.read_bytes().splitlines()) < files) and time.monotonic() < deadline:
        time.sleep(0.05)
    t0, c0 = time.monotonic(), sum(ps.cpu_times()[:2])
    time.sleep(seconds)  # measuring an idle process: the point is to let time pass
    t1, c1 = time.monotonic(), sum(ps.cpu_times()[:2])
    proc.terminate()
    proc.wait()
    return float(100 * (c1 - c0) / (t1 - t0))


def throughput(tmp: Path, size_mb: int) -> tuple[float, float, int]:
    big = tmp / "big.jsonl"
    generate_bytes(size_mb << 20)(big)
    t = time.monotonic()
    subprocess.run([sys.executable, "-m", "ringtrace", "summary", "--format", "json", str(big)], cwd=ROOT,
                   check=True, stdout=subprocess.DEVNULL)
    summary_s = time.monotonic() - t
    root = tmp / "tp"
    (root / "scope_stats").mkdir(parents=True)
    done: list[float] = []
    records = [0]

    def on_batch(batch: list[SinkEvent]) -> None:
        for e in batch:
            if isinstance(e, RunFinished):
                records[0] = e.summary.records
                done.append(time.monotonic())

    cfg = config.build({"idle_timeout": 600}, env={})

    async def main() -> float:
        app = App(cfg, [str(root)], FanOut([]), on_batch=on_batch)
        task = asyncio.create_task(app.run())
        while not app.ready:
            await asyncio.sleep(0.01)
        data = big.read_bytes()
        start = time.monotonic()
        (root / "scope_stats" / "scope_stats.jsonl").write_bytes(data)  # one write, like the runtime's fwrite
        while not done:
            await asyncio.sleep(0.005)
        app.stop()
        await task
        return done[0] - start

    watch_s = asyncio.run(main())
    return watch_s, summary_s, records[0]


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--appends", type=int, default=1000)
    ap.add_argument("--files", type=int, default=1000)
    ap.add_argument("--size-mb", type=int, default=100)
    ap.add_argument("--idle-seconds", type=float, default=20.0)
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as d:
        tmp = Path(d)
        ev50, ev99 = latency(tmp, args.appends, poll=False)
        po50, po99 = latency(tmp, args.appends, poll=True)
        idle_ev = idle_cost(tmp, args.files, poll=False, seconds=args.idle_seconds)
        idle_po = idle_cost(tmp, args.files, poll=True, seconds=args.idle_seconds)
        watch_s, summary_s, records = throughput(tmp, args.size_mb)
    print("| figure | file-system events | baseline | ratio |")
    print("|---|---|---|---|")
    print(f"| latency p50, {args.appends} appends | {1000 * ev50:.1f} ms | {1000 * po50:.1f} ms (--poll 0.1 s) | "
          f"{ev50 / po50:.2f} |")
    print(f"| latency p99 | {1000 * ev99:.1f} ms | {1000 * po99:.1f} ms (--poll 0.1 s) | {ev99 / po99:.2f} |")
    print(f"| idle CPU, {args.files} finished files | {idle_ev:.2f}% of a core | {idle_po:.2f}% (--poll) | "
          f"{idle_ev / max(idle_po, 1e-9):.2f} |")
    print(f"| {args.size_mb} MB file in one write ({records} records) | {watch_s:.2f} s | {summary_s:.2f} s "
          f"(`ringtrace summary`) | {watch_s / summary_s:.2f} |")


if __name__ == "__main__":
    main()
