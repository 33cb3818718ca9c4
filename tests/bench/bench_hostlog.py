"""Benchmark: the host-log parser against the floor of any Python line reader, in one run.

Input: the five real host logs of ``tests/fixtures`` concatenated and repeated to ``--size-mb``
(in memory; nothing is written).  Each reader is fed the same 1 MiB chunks:

* baseline: split into lines and decode each (what every line parser must do at least);
* ``HostLogParser.feed`` + ``finish``.

Prints MB/s, lines/s and the ratio (best of ``--repeat``), plus the CPU load average.

    .venv/bin/python -m tests.bench.bench_hostlog [--size-mb 50] [--repeat 3]
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from collections.abc import Callable
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from ringtrace.hostlog.parse import HostLogParser  # noqa: E402

LOGS = [*sorted((ROOT / "tests/fixtures/samples/failed").glob("*/host.log")),
        *sorted((ROOT / "tests/fixtures/hostlogs").glob("*/host.log"))]
CHUNK = 1 << 20


def baseline(chunks: list[bytes]) -> int:
    n, pending = 0, b""
    for chunk in chunks:
        lines = (pending + chunk).split(b"\n")
        pending = lines.pop()
        for line in lines:
            line.decode("utf-8", "replace")
            n += 1
    return n


def parser(chunks: list[bytes]) -> int:
    p = HostLogParser("bench.log")
    for chunk in chunks:
        p.feed(chunk)
    logs = p.finish()
    assert logs[0].orch_error_code is not None
    return p.lines


def best(fn: Callable[[list[bytes]], int], chunks: list[bytes], repeat: int) -> tuple[float, int]:
    times, lines = [], 0
    for _ in range(repeat):
        t0 = time.process_time()
        lines = fn(chunks)
        times.append(time.process_time() - t0)
    return min(times), lines


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--size-mb", type=float, default=50)
    ap.add_argument("--repeat", type=int, default=3)
    args = ap.parse_args()
    failing = b"".join(p.read_bytes() for p in LOGS)
    info = b"".join(line + b"\n" for line in failing.split(b"\n") if b"[ERROR]" not in line)
    print(f"load average {os.getloadavg()[0]:.2f}; {len(LOGS)} real logs")
    print("| input | reader | CPU s | MB/s | lines/s | vs baseline |\n|---|---|---|---|---|---|")
    for label, one, tail in (("the real logs repeated (failure-dense)", failing, b""),
                             ("their non-ERROR lines repeated, then the real logs", info, failing)):
        data = one * max(1, int(args.size_mb * (1 << 20) / len(one))) + tail
        chunks = [data[i:i + CHUNK] for i in range(0, len(data), CHUNK)]
        mb = len(data) / (1 << 20)
        base = 0.0
        for name, fn in (("baseline: split + decode", baseline), ("HostLogParser", parser)):
            cpu, lines = best(fn, chunks, args.repeat)
            base = base or cpu
            print(f"| {label}, {mb:.0f} MB | {name} | {cpu:.2f} | {mb / cpu:.1f} | {lines / cpu:,.0f} | "
                  f"{cpu / base:.1f}x |")


if __name__ == "__main__":
    main()
