"""Benchmarks of the bounded-memory live path (issue 10's figures).  Not a test: run it by hand.

    .venv/bin/python tests/bench/bench_bounded.py [--big-mb 500] [--runs 2000] [--scrape-runs 1000]
                                                  [--many-runs 10000] [--appends 1000]

Every figure is measured against a baseline in the same run:

1. **One big file** (``--big-mb``, written by the simulator in one go): peak RSS (``wait4``'s
   ru_maxrss) and wall time of ``watch --once`` with ``--events`` + ``--metrics-addr``, and with
   every sink on (``--perfetto-dir``, ``--otlp-endpoint`` to a local gRPC receiver), against
   ``ringtrace summary --format json`` on the same tree.
2. **A backlog** of ``--runs`` finished runs (copies of a real 313 KB sample): the same figures.
3. **Live latency during the backlog**: an in-process App (Prometheus, events and Perfetto sinks)
   starts over the backlog; a writer process appends one record every 5 ms to a live file; the
   time from a line's write to its record reaching the sinks, p50/p99, and how much of the
   backlog was still unread when the appends ended.
4. **/metrics with ``--scrape-runs`` finished runs**: ``PrometheusSink.render`` (cached lines)
   against a fresh collection through prometheus_client's encoder (the old path), p50/p99 of 50
   scrapes; then 100 scrapes over HTTP of a real ``ringtrace watch`` following that tree.
5. **``--many-runs`` tracked runs**: RSS of a ``ringtrace watch`` service once it followed them
   all, and its scrape time (p50/p99 of 10).
"""

from __future__ import annotations

import argparse
import asyncio
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
from collections.abc import Iterable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import psutil

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from prometheus_client.exposition import generate_latest  # noqa: E402

from ringtrace import config  # noqa: E402
from ringtrace.config import Thresholds  # noqa: E402
from ringtrace.demo.sim import generate_bytes  # noqa: E402
from ringtrace.gather.oneshot import read_files  # noqa: E402
from ringtrace.model.records import WANT_ALL, RunFinished, RunProgress, SinkEvent  # noqa: E402
from ringtrace.reading.app import App  # noqa: E402
from ringtrace.sinks import FanOut  # noqa: E402
from ringtrace.sinks.events import EventsSink  # noqa: E402
from ringtrace.sinks.perfetto import PerfettoDirSink  # noqa: E402
from ringtrace.sinks.prometheus import PrometheusSink  # noqa: E402
from tests._support.otlp_receiver import OtlpReceiver  # noqa: E402
from tests._support.ports import free_port  # noqa: E402
from tests.bench.common import APPENDER, peak_rss  # noqa: E402

SAMPLE = ROOT / "tests/fixtures/samples/outputs/NestedScopes_small_20261130_101702/scope_stats/scope_stats.jsonl"
SMALL = ROOT / "tests/fixtures/samples/outputs/TestBenchmarkBgemm_Case0_20261130_101845/scope_stats/scope_stats.jsonl"
RINGTRACE = [sys.executable, "-m", "ringtrace"]


def measure(args: list[str]) -> tuple[float, float]:
    """(peak RSS in MB, wall seconds) of one command run to its end (see tests/bench/common.py)."""
    rss, wall, code = peak_rss(args)
    if code != 0:
        raise SystemExit(f"{' '.join(args)}: exit {code}")
    return rss, wall


def backlog(root: Path, n: int, sample: Path = SAMPLE) -> Path:
    for i in range(n):
        d = root / f"run{i:05d}" / "scope_stats"
        d.mkdir(parents=True)
        shutil.copy(sample, d / "scope_stats.jsonl")
    return root


def memory_rows(tree: Path, tmp: Path, what: str, otlp: str) -> list[str]:
    s_rss, s_wall = measure([*RINGTRACE, "summary", "--format", "json", str(tree)])
    light = [*RINGTRACE, "watch", str(tree), "--once", "--events", str(tmp / "ev.jsonl"),
             "--metrics-addr", "127.0.0.1:0"]
    l_rss, l_wall = measure(light)
    a_rss, a_wall = measure([*light, "--perfetto-dir", str(tmp / "traces"), "--otlp-endpoint", otlp])
    return [f"| {what}: peak RSS, events + metrics | {l_rss:.0f} MB | {s_rss:.0f} MB (`summary`) | "
            f"{l_rss / s_rss:.2f} |",
            f"| {what}: peak RSS, all sinks | {a_rss:.0f} MB | {s_rss:.0f} MB (`summary`) | {a_rss / s_rss:.2f} |",
            f"| {what}: wall time, events + metrics | {l_wall:.2f} s | {s_wall:.2f} s (`summary`) | "
            f"{l_wall / s_wall:.2f} |",
            f"| {what}: wall time, all sinks | {a_wall:.2f} s | {s_wall:.2f} s (`summary`) | "
            f"{a_wall / s_wall:.2f} |"]


def live_latency(tree: Path, tmp: Path, appends: int) -> tuple[float, float, int, int]:
    live = tree / "zz_live" / "scope_stats"
    live.mkdir(parents=True)
    target = live / "scope_stats.jsonl"
    n_backlog = sum(1 for _ in tree.glob("run*"))
    seen: dict[int, float] = {}
    finished_old = [0]

    def on_batch(batch: list[SinkEvent]) -> None:
        now = time.monotonic()
        for e in batch:
            if isinstance(e, RunProgress) and e.source.path == str(target):
                for r in e.records:
                    seen.setdefault(r.line, now)
            elif isinstance(e, RunFinished) and e.source.path != str(target):
                finished_old[0] += 1

    cfg = config.build({"idle_timeout": 600}, env={})
    sinks = FanOut([PrometheusSink(), EventsSink(open(os.devnull, "wb"), owns=True),  # noqa: SIM115
                    PerfettoDirSink(tmp / "lat-traces")])

    async def main() -> tuple[list[float], int]:
        app = App(cfg, [str(tree)], sinks, on_batch=on_batch, wants=WANT_ALL)
        task = asyncio.create_task(app.run())
        while not app.ready:
            await asyncio.sleep(0.005)
        proc = await asyncio.create_subprocess_exec(sys.executable, "-c", APPENDER, str(target), str(appends),
                                                    "0.005", str(SAMPLE), stdout=subprocess.PIPE)
        out, _ = await proc.communicate()
        unread = n_backlog - finished_old[0]
        deadline = time.monotonic() + 30
        while len(seen) < appends and time.monotonic() < deadline:
            await asyncio.sleep(0.01)
        app.stop()
        await task
        return [float(x) for x in out.split()], unread

    stamps, unread = asyncio.run(main())
    lat = sorted(seen[i + 2] - t for i, t in enumerate(stamps) if i + 2 in seen)
    return statistics.median(lat), lat[int(0.99 * (len(lat) - 1))], unread, n_backlog


def slice_reads(path: Path, repeat: int = 3) -> tuple[float, float]:
    """Seconds per 1 MiB slice: the app's aiofiles path (open, seek, read, close: each a hop to the
    reader thread) against one hop doing os.open + pread + close, over the whole file; best of ``repeat``."""
    import aiofiles

    from ringtrace.reading.tail.follower import SLICE

    size = path.stat().st_size
    offsets = range(0, size, SLICE)

    async def via_aiofiles(pool: ThreadPoolExecutor) -> float:
        t = time.perf_counter()
        for off in offsets:
            async with aiofiles.open(path, "rb", buffering=0, executor=pool) as fh:
                await fh.seek(off)
                await fh.read(SLICE)
        return (time.perf_counter() - t) / len(offsets)

    def pread(off: int) -> bytes:
        fd = os.open(path, os.O_RDONLY)
        try:
            return os.pread(fd, SLICE, off)
        finally:
            os.close(fd)

    async def one_hop(pool: object) -> float:
        loop = asyncio.get_running_loop()
        t = time.perf_counter()
        for off in offsets:
            await loop.run_in_executor(pool, pread, off)  # type: ignore[arg-type]
        return (time.perf_counter() - t) / len(offsets)


    with ThreadPoolExecutor(1) as pool:
        a = min(asyncio.run(via_aiofiles(pool)) for _ in range(repeat))
        b = min(asyncio.run(one_hop(pool)) for _ in range(repeat))
    return a, b


def pct(xs: list[float]) -> tuple[float, float]:
    xs = sorted(xs)
    return statistics.median(xs), xs[int(0.99 * (len(xs) - 1))]


def render_rows(tree: Path, n: int) -> list[str]:
    sink = PrometheusSink()
    files = sorted(tree.glob("run*/scope_stats/scope_stats.jsonl"))[:n]
    read_files(files, FanOut([sink]), Thresholds())
    sink.render("")  # the first scrape formats the finished runs once
    new, old = [], []
    for _ in range(50):
        t = time.perf_counter()
        sink.render("")
        new.append(time.perf_counter() - t)
        t = time.perf_counter()
        generate_latest(sink.registry)
        old.append(time.perf_counter() - t)
    (n50, n99), (o50, o99) = pct(new), pct(old)
    return [f"| /metrics render, {n} finished runs, p50 | {1000 * n50:.1f} ms | {1000 * o50:.1f} ms (fresh "
            f"collection) | {n50 / o50:.3f} |",
            f"| /metrics render, {n} finished runs, p99 | {1000 * n99:.1f} ms | {1000 * o99:.1f} ms | "
            f"{n99 / o99:.3f} |"]



def served(tree: Path, n: int, scrapes: int) -> tuple[float, float, float]:
    """(p50, p99 seconds, RSS MB) of a watch service following ``n`` finished runs under ``tree``."""
    port = free_port()
    proc = subprocess.Popen([*RINGTRACE, "watch", str(tree), "--metrics-addr", f"127.0.0.1:{port}"],
                            cwd=ROOT, stderr=subprocess.DEVNULL)
    url = f"http://127.0.0.1:{port}/metrics"
    try:
        deadline = time.monotonic() + 1800
        while time.monotonic() < deadline:
            try:
                body = urllib.request.urlopen(url, timeout=60).read()
            except OSError:
                time.sleep(0.2)
                continue
            done = sum(float(line.split()[-1]) for line in body.splitlines()
                       if line.startswith(b"ringtrace_runs_finished_total{"))
            if done >= n:
                break
            time.sleep(0.5)
        times = []
        for _ in range(scrapes):
            t = time.perf_counter()
            urllib.request.urlopen(url, timeout=60).read()
            times.append(time.perf_counter() - t)
        rss = psutil.Process(proc.pid).memory_info().rss / (1 << 20)
    finally:
        proc.terminate()
        proc.wait(30)
    p50, p99 = pct(times)
    return p50, p99, rss


class Rows(list[str]):
    """Rows printed as they are measured (a long run shows its figures as it goes)."""

    def append(self, row: str) -> None:
        print(row, flush=True)
        super().append(row)

    def __iadd__(self, rows: Iterable[str]) -> Rows:  # type: ignore[override,misc]  # list's += takes any iterable
        for r in rows:
            self.append(r)
        return self


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--big-mb", type=int, default=500)
    ap.add_argument("--runs", type=int, default=2000)
    ap.add_argument("--scrape-runs", type=int, default=1000)
    ap.add_argument("--many-runs", type=int, default=10000)
    ap.add_argument("--appends", type=int, default=1000)
    args = ap.parse_args()
    rows = Rows()
    print("| figure | ringtrace watch | baseline | ratio |")
    print("|---|---|---|---|", flush=True)
    with tempfile.TemporaryDirectory() as d, OtlpReceiver(keep=False) as rx:
        tmp = Path(d)
        big = tmp / "big" / "run" / "scope_stats"
        big.mkdir(parents=True)
        generate_bytes(args.big_mb << 20)(big / "scope_stats.jsonl")
        a, b = slice_reads(big / "scope_stats.jsonl")
        rows.append(f"| reading one 1 MiB slice: aiofiles (open, seek, read, close) | {1000 * a:.3f} ms | "
                    f"{1000 * b:.3f} ms (one hop: os.open + pread) | {a / b:.2f} |")
        rows += memory_rows(tmp / "big", tmp, f"{args.big_mb} MB file", rx.grpc_endpoint)
        shutil.rmtree(tmp / "big")
        tree = backlog(tmp / "backlog", args.runs)
        rows += memory_rows(tree, tmp, f"backlog of {args.runs} runs", rx.grpc_endpoint)
        p50, p99, unread, total = live_latency(tree, tmp, args.appends)
        rows.append(f"| live latency p50 / p99 during the backlog ({unread} of {total} runs still unread "
                    f"when the appends ended) | {1000 * p50:.1f} / {1000 * p99:.1f} ms | goal 500 ms (p99) | "
                    f"{p99 / 0.5:.2f} |")
        shutil.rmtree(tree / "zz_live")
        rows += render_rows(tree, args.scrape_runs)
        scrape_tree = tmp / "scrape"
        scrape_tree.mkdir()
        for f in sorted(tree.glob("run*"))[: args.scrape_runs]:
            f.rename(scrape_tree / f.name)
        s50, s99, rss = served(scrape_tree, args.scrape_runs, 100)
        rows.append(f"| GET /metrics, {args.scrape_runs} finished runs, p50 / p99 (watch service RSS "
                    f"{rss:.0f} MB) | {1000 * s50:.1f} / {1000 * s99:.1f} ms | goal 250 ms (p99) | {s99 / 0.25:.2f} |")
        shutil.rmtree(tmp / "backlog")
        shutil.rmtree(scrape_tree)
        many = backlog(tmp / "many", args.many_runs, SMALL)
        m50, m99, mrss = served(many, args.many_runs, 10)
        rows.append(f"| {args.many_runs} tracked runs: watch service RSS; GET /metrics p50 / p99 | {mrss:.0f} MB; "
                    f"{1000 * m50:.0f} / {1000 * m99:.0f} ms | - | - |")


if __name__ == "__main__":
    main()
