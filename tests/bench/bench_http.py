"""Benchmark: scrape latency of the metrics server (aiohttp, ``ringtrace.sinks.prometheus.server``) against the
hand-written threaded server it replaced (``threaded_http.py``), in one run.

Each server runs in a child process of its own (``--serve old|new``) over the same fixed
registry: a :class:`PrometheusSink` fed ``--runs`` copies of the sample runs under distinct run
labels.  The parent scrapes ``/metrics`` (plain HTTP, Prometheus's ``Accept`` header, gzip):

* ``sequential``: ``--requests`` requests one after another, a new connection each;
* ``keep-alive``: ``--requests`` requests on one connection;
* ``concurrent``: ``--concurrency`` clients at once, ``--requests`` in all, a new connection each.

Prints per-request latency p50 / p99, requests/s and the server's CPU seconds per 1,000
requests, as a markdown table.  Nothing is asserted.

    .venv/bin/python -m tests.bench.bench_http [--requests 1000] [--concurrency 50] [--runs 1]
"""

from __future__ import annotations

import argparse
import asyncio
import concurrent.futures
import http.client
import os
import signal
import statistics
import subprocess
import sys
import time
from pathlib import Path

import msgspec
import psutil

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from ringtrace.config import Thresholds  # noqa: E402
from ringtrace.model.records import Source  # noqa: E402
from ringtrace.sinks.prometheus import PrometheusSink  # noqa: E402
from ringtrace.sources.paths import find_sources, source_labels  # noqa: E402
from ringtrace.stages.run import Run  # noqa: E402

SAMPLES = ROOT / "tests" / "fixtures" / "samples"
ACCEPT = "application/openmetrics-text;version=1.0.0,text/plain;version=0.0.4;q=0.5,*/*;q=0.1"
HEADERS = {"Accept": ACCEPT, "Accept-Encoding": "gzip"}


def fixed_sink(copies: int) -> PrometheusSink:
    """The sample runs, ``copies`` times under distinct run labels, all finished (nothing expires)."""
    sink = PrometheusSink(series_ttl=1e9)
    files, _ = find_sources([str(SAMPLES)])
    for i in range(copies):
        for f in files:
            labels = source_labels(f)
            src = Source(f"{f}#{i}", msgspec.structs.replace(labels, run=f"{labels.run}-{i}"))
            run = Run(src, Thresholds())
            for ev in [*run.feed(f.read_bytes()), *run.finish("eof")]:
                sink.receive(ev)
    return sink


def serve(kind: str, copies: int) -> None:
    """Child process: serve the fixed registry on a free port, print it, run until SIGTERM."""
    sink = fixed_sink(copies)
    if kind == "old":
        from tests.bench.threaded_http import ThreadedServer

        old = ThreadedServer("127.0.0.1", 0, sink.render)
        old.start()
        print(old.port, flush=True)
        signal.sigwait({signal.SIGTERM})
        old.stop()
        return

    from ringtrace.sinks.prometheus.server import MetricsServer

    async def main() -> None:
        srv = MetricsServer("127.0.0.1:0", sink.render)
        await srv.start()
        print(srv.port, flush=True)
        stop = asyncio.Event()
        asyncio.get_running_loop().add_signal_handler(signal.SIGTERM, stop.set)
        await stop.wait()
        await srv.stop()

    asyncio.run(main())


def scrape(port: int, conn: http.client.HTTPConnection | None = None) -> float:
    """One GET /metrics (on ``conn`` when given, else a new connection); its latency in seconds."""
    t0 = time.perf_counter()
    c = conn or http.client.HTTPConnection("127.0.0.1", port, timeout=30)
    c.request("GET", "/metrics", headers=HEADERS)
    resp = c.getresponse()
    body = resp.read()
    if resp.status != 200 or not body:
        raise RuntimeError(f"scrape failed: {resp.status}")
    if conn is None:
        c.close()
    return time.perf_counter() - t0


def measure(kind: str, args: argparse.Namespace) -> list[tuple[str, list[float], float, float]]:
    """(scenario, latencies, wall seconds, server CPU seconds) for each scenario."""
    child = subprocess.Popen([sys.executable, "-m", "tests.bench.bench_http", "--serve", kind, "--runs",
                              str(args.runs)], stdout=subprocess.PIPE, text=True, cwd=ROOT)
    assert child.stdout is not None
    port = int(child.stdout.readline())
    proc = psutil.Process(child.pid)
    out = []
    try:
        for _ in range(20):  # warm up
            scrape(port)
        for scenario in ("sequential", "keep-alive", "concurrent"):
            cpu0 = sum(proc.cpu_times()[:2])
            t0 = time.perf_counter()
            if scenario == "sequential":
                lat = [scrape(port) for _ in range(args.requests)]
            elif scenario == "keep-alive":
                conn = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
                lat = [scrape(port, conn) for _ in range(args.requests)]
                conn.close()
            else:
                with concurrent.futures.ThreadPoolExecutor(args.concurrency) as pool:
                    lat = list(pool.map(lambda _: scrape(port), range(args.requests)))
            out.append((scenario, lat, time.perf_counter() - t0, sum(proc.cpu_times()[:2]) - cpu0))
    finally:
        child.send_signal(signal.SIGTERM)
        child.wait(timeout=30)
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--requests", type=int, default=1000)
    ap.add_argument("--concurrency", type=int, default=50)
    ap.add_argument("--runs", type=int, default=1, help="copies of the sample runs in the registry")
    ap.add_argument("--serve", choices=("old", "new"), help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.serve:
        serve(args.serve, args.runs)
        return
    body = fixed_sink(args.runs).render(ACCEPT)[0]
    print(f"registry: {args.runs} x sample runs, /metrics {len(body) / 1024:.0f} KiB (OpenMetrics, before gzip); "
          f"load average {os.getloadavg()[0]:.2f}, {os.cpu_count()} CPUs\n")
    print("| server | scenario | p50 ms | p99 ms | requests/s | server CPU s / 1,000 requests |")
    print("|---|---|---|---|---|---|")
    for kind, name in (("old", "threaded (before)"), ("new", "aiohttp")):
        for scenario, lat, wall, cpu in measure(kind, args):
            q = statistics.quantiles(lat, n=100)
            print(f"| {name} | {scenario} | {q[49] * 1e3:.2f} | {q[98] * 1e3:.2f} | {len(lat) / wall:.0f} | "
                  f"{cpu * 1000 / len(lat):.2f} |", flush=True)


if __name__ == "__main__":
    main()
