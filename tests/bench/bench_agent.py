"""Benchmark: how the watch agent answers and stops, each figure against a baseline measured in the same run.

The timings the tests used to assert (and no longer do: tests wait on conditions, never on the clock):

1. **/healthz while a big host log is read** (``--log-mb``, default 200 MB, the failure at its very
   end): p50/p99 of ``GET /healthz`` every 10 ms on one keep-alive connection while a run finishes
   and its log is read (the read happens on the reader thread, off the event loop), against the
   same agent idle (baseline).  ``tests/reading/tail/test_hostlog_big.py`` checks the log is found.
2. **SIGTERM to exit**: ``ringtrace watch`` over a backlog of ``--runs`` runs (``--state-dir``,
   stopped mid-backlog); with ``--events -`` into a pipe nobody reads (the events sink blocked,
   abandoned at the end of the 4.5 s budget); with ``--otlp-endpoint`` to a TCP black hole.  Against
   SIGTERM to an idle agent (baseline) and the budget.

    .venv/bin/python -m tests.bench.bench_agent [--log-mb 200] [--runs 300] [--repeat 3]
"""

from __future__ import annotations

import argparse
import http.client
import os
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from ringtrace.reading.app import SHUTDOWN_SECONDS  # noqa: E402
from tests._support.healthz import Prober, big_host_log, stage_run_with_log  # noqa: E402
from tests._support.otlp_receiver import Blackhole  # noqa: E402
from tests._support.ports import free_port  # noqa: E402
from tests._support.samples import NESTED  # noqa: E402

RINGTRACE = [sys.executable, "-m", "ringtrace"]


def wait(cond: Callable[[], bool], timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not cond():
        if time.monotonic() > deadline:
            raise SystemExit(f"timed out waiting for {what}")
        time.sleep(0.01)


def lines(path: Path) -> int:
    return path.read_bytes().count(b"\n") if path.exists() else 0


def get(port: int, path: str) -> tuple[int, str]:
    """(status, body) of ``path``; (0, "") while nothing answers."""
    try:
        conn = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
        conn.request("GET", path)
        resp = conn.getresponse()
        got = resp.status, resp.read().decode(errors="replace")
        conn.close()
        return got
    except OSError:
        return 0, ""


def answers(port: int, code: int, says: str = "") -> Callable[[], bool]:
    """``/readyz`` answers ``code`` (and its body holds ``says``)."""
    def check() -> bool:
        status, body = get(port, "/readyz")
        return status == code and says in body

    return check


def has_lines(path: Path, n: int) -> Callable[[], bool]:
    return lambda: lines(path) >= n


def p50_p99(xs: list[float]) -> tuple[float, float]:
    return statistics.median(xs), xs[max(0, -(-99 * len(xs) // 100) - 1)]


def healthz_rows(tmp: Path, mb: int) -> list[str]:
    tree, ev, port = tmp / "tree", tmp / "ev.jsonl", free_port()
    tree.mkdir(parents=True)
    log = big_host_log(tmp / "host.log", mb)
    proc = subprocess.Popen([*RINGTRACE, "watch", str(tree), "--events", str(ev), "--host-log-glob", "*.log",
                             "--metrics-addr", f"127.0.0.1:{port}", "--rescan-interval", "600",
                             "--idle-timeout", "600"], stderr=subprocess.DEVNULL)
    try:
        wait(answers(port, 200), 60, "the agent")
        probe = Prober(port, proc.pid)
        t0 = time.monotonic()
        time.sleep(3)  # the baseline: the same agent, idle, for 3 s
        t1 = time.monotonic()
        staged = stage_run_with_log(tree, "whole", log)
        t2 = time.monotonic()
        staged.rename(staged.with_name("scope_stats.jsonl"))
        wait(lambda: lines(ev) == 1, 300, "the run with its log")
        t3 = time.monotonic()
        probe.stop()
    finally:
        proc.terminate()
        proc.wait(60)
    b50, b99 = p50_p99(probe.between(t0, t1))
    r50, r99 = p50_p99(probe.between(t2, t3))
    return [f"| /healthz p50 / p99 while a {mb} MB host log is read ({t3 - t2:.1f} s, "
            f"{len(probe.between(t2, t3))} requests) | {1000 * r50:.1f} / {1000 * r99:.1f} ms | "
            f"{1000 * b50:.1f} / {1000 * b99:.1f} ms (idle) | {r99 / b99:.1f} |"]


def stop_time(argv: list[str], ready: Callable[[], bool], stdout: int | None = None) -> float:
    """Seconds from SIGTERM to the exit of ``argv``, once ``ready()``; exit 0 is required."""
    proc = subprocess.Popen(argv, stdout=stdout, stderr=subprocess.DEVNULL)
    try:
        wait(lambda: ready() or proc.poll() is not None, 120, "the agent")
        t = time.monotonic()
        proc.send_signal(signal.SIGTERM)
        code = proc.wait(60)
        took = time.monotonic() - t
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    if code != 0:
        raise SystemExit(f"{' '.join(argv)}: exit {code}")
    return took


def shutdown_rows(tmp: Path, runs: int, repeat: int) -> list[str]:
    tree = tmp / "backlog"
    for i in range(runs):
        d = tree / f"run{i:04d}" / "scope_stats"
        d.mkdir(parents=True)
        shutil.copy(NESTED, d / "scope_stats.jsonl")
    rows = []
    base: list[float] = []
    cases: list[tuple[str, list[float]]] = [("idle agent, `--events FILE`", base)]
    for case in ("idle", "mid-backlog", "pipe", "blackhole"):
        took: list[float] = []
        for k in range(repeat):
            ev, port = tmp / f"ev-{case}-{k}.jsonl", free_port()
            watch = [*RINGTRACE, "watch", str(tree), "--metrics-addr", f"127.0.0.1:{port}", "--idle-timeout", "600"]
            if case == "idle":
                empty = tmp / f"empty-{k}"
                empty.mkdir()
                took.append(stop_time([*RINGTRACE, "watch", str(empty), "--events", str(ev), "--metrics-addr",
                                       f"127.0.0.1:{port}"], answers(port, 200)))
            elif case == "mid-backlog":
                took.append(stop_time([*watch, "--events", str(ev), "--state-dir", str(tmp / f"state-{k}")],
                                      has_lines(ev, 3)))
            elif case == "pipe":
                r, w = os.pipe()
                try:
                    stuck = answers(port, 503, "sink events stuck")
                    took.append(stop_time([*watch, "--events", "-"], stuck, stdout=w))
                finally:
                    os.close(w)
                    os.close(r)
            else:
                with Blackhole() as hole:
                    took.append(stop_time([*watch, "--events", str(ev), "--otlp-endpoint", hole.endpoint],
                                          lambda: hole.bytes_received > 0))
        if case == "idle":
            base += took
        else:
            label = {"mid-backlog": f"SIGTERM mid-backlog ({runs} runs, `--state-dir`)",
                     "pipe": "`--events -` into a pipe nobody reads (the sink abandoned at the budget)",
                     "blackhole": "`--otlp-endpoint` to a TCP black hole"}[case]
            cases.append((label, took))
    b = statistics.median(base)
    for label, took in cases[1:]:
        m = statistics.median(took)
        rows.append(f"| SIGTERM to exit: {label}, median of {len(took)} | {m:.2f} s (max {max(took):.2f}) | "
                    f"{b:.2f} s (idle agent); budget {SHUTDOWN_SECONDS} s | {m / b:.1f}x; {m / SHUTDOWN_SECONDS:.2f} "
                    "of the budget |")
    return rows


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--log-mb", type=int, default=200)
    ap.add_argument("--runs", type=int, default=300)
    ap.add_argument("--repeat", type=int, default=3)
    args = ap.parse_args()
    print(f"load average {os.getloadavg()[0]:.2f}")
    print("| figure | ringtrace watch | baseline (same run) | ratio |\n|---|---|---|---|", flush=True)
    with tempfile.TemporaryDirectory() as d:
        tmp = Path(d)
        for row in healthz_rows(tmp / "healthz", args.log_mb) + shutdown_rows(tmp, args.runs, args.repeat):
            print(row, flush=True)


if __name__ == "__main__":
    main()
