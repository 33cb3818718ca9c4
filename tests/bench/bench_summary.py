"""Benchmark: ``ringtrace summary --format json`` against the guide's naive reader, in one run.

Generates realistic files with the simulator (cached in ``tests/bench/data/``, git-ignored),
then runs each reader as its own subprocess and measures wall time and the child's exact peak
RSS (``os.wait4`` rusage of that child).  Goals (issue 2): ringtrace at least 5x the naive
reader's records/s on the ~100 MB file, and at most 100 MB peak RSS on a ~500 MB file.  The
naive reader (about 6x the file size in memory) runs on the 100 MB file only.

    .venv/bin/python tests/bench/bench_summary.py [--size-mb 100] [--skip-500] [--repeat N] [--profile]

Prints a markdown table the README can take.  ``--profile`` adds, on the smaller file, the CPU
time of each reading stage in process (with a msgspec ``decode_lines`` lower bound) and a
cProfile of ``ringtrace.cli.main(["summary", "--format", "json", FILE])``.
"""

from __future__ import annotations

import argparse
import contextlib
import cProfile
import io
import json
import os
import pstats
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import msgspec

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from tests.bench.common import MB, data_file, run_child  # noqa: E402

NAIVE = Path(__file__).resolve().parent / "naive.py"


class Result(msgspec.Struct, frozen=True):
    reader: str
    file_mb: float
    records: int
    wall_s: float
    cpu_s: float  # user + system time of the child: steadier than wall time on a busy machine
    rss_mb: float

    @property
    def rate(self) -> float:
        return self.records / self.wall_s


def best_of(reader: str, path: Path, cmd: list[str], repeat: int) -> tuple[Result, bytes]:
    """Run ``cmd`` ``repeat`` times: the smallest wall and CPU times, the largest peak RSS."""
    runs = [run_child(cmd) for _ in range(max(1, repeat))]
    out = runs[0][3]
    res = Result(reader, path.stat().st_size / MB, 0, min(r[0] for r in runs), min(r[1] for r in runs),
                 max(r[2] for r in runs))
    return res, out


def bench_ringtrace(path: Path, repeat: int) -> Result:
    cmd = [sys.executable, "-m", "ringtrace", "summary", "--format", "json", str(path)]
    res, out = best_of("ringtrace summary --format json", path, cmd, repeat)
    [obj] = json.loads(out)["files"]
    assert obj["complete"] and obj["parse_errors"] == 0, obj
    return msgspec.structs.replace(res, records=obj["records"])


def bench_naive(path: Path, records: int, repeat: int) -> Result:
    res, out = best_of("naive (guide §5 snippet)", path, [sys.executable, str(NAIVE), str(path)], repeat)
    assert out.startswith(b"fatal="), out[:200]
    return msgspec.structs.replace(res, records=records)


def profile(path: Path, top: int = 15) -> str:
    """cProfile of the summary command in this process; the top functions by own time, with shares."""
    from ringtrace import cli

    prof = cProfile.Profile()
    with contextlib.redirect_stdout(io.StringIO()):
        prof.runcall(cli.main, ["summary", "--format", "json", str(path)])
    stats = pstats.Stats(prof)
    total = sum(v[2] for v in stats.stats.values())  # type: ignore[attr-defined]
    rows = sorted(stats.stats.items(), key=lambda kv: kv[1][2], reverse=True)[:top]  # type: ignore[attr-defined]
    lines = [f"cProfile of `ringtrace summary --format json` on {path.name} (own time, {total:.2f} s in all):", "",
             "| own time | share | calls | function |", "|---|---|---|---|"]
    for (file, line, func), (_, calls, own, _cum, _) in rows:
        where = f"{Path(file).relative_to(ROOT)}:{line}" if file.startswith(str(ROOT)) else f"{file}:{line}"
        lines.append(f"| {own:.2f} s | {100 * own / total:.0f}% | {calls} | `{where}({func})` |")
    return "\n".join(lines)


def stages(path: Path) -> str:
    """CPU time of the reading stages in this process, next to the naive reader and a lower bound.

    The bound is what msgspec can do: ``decode_lines`` on each 1 MiB chunk plus a minimal
    depth-stack pairing (heap high water only) -- what a leaner hot loop could approach.
    """
    from ringtrace.model.records import Meta, Record, Source
    from ringtrace.stages.decode import Decoder, _RawRecord
    from ringtrace.stages.pair import Pairer
    from ringtrace.stages.run import Run
    from tests.bench import naive

    data = path.read_bytes()
    chunks = [data[i:i + MB] for i in range(0, len(data), MB)]
    raw: msgspec.json.Decoder[Any] = msgspec.json.Decoder(_RawRecord)  # its fields are made from the table

    def decode() -> None:
        d = Decoder()
        for c in chunks:
            d.feed(c)
        d.finish()

    def decode_pair() -> None:
        d, p = Decoder(), Pairer()
        for c in chunks:
            items = d.feed(c)
            for item in items:
                if isinstance(item, Meta):
                    p.meta = item
            p.push_many([item for item in items if type(item) is Record])

    def run() -> None:
        r = Run(Source(str(path)))
        for c in chunks:
            r.feed(c)
        r.finish("eof")

    def bound() -> None:
        stack: list[Any] = []
        peaks: dict[int, int] = {}
        rest = b""
        for i, c in enumerate(chunks):
            c = rest + c
            cut = c.rfind(b"\n") + 1
            body, rest = c[:cut], c[cut:]
            if i == 0:
                body = body[body.find(b"\n") + 1:]
            for r in raw.decode_lines(body):
                if r.phase == "begin":
                    stack.append(r)
                elif stack:
                    b = stack.pop()
                    if r.heap_end - b.heap_start > peaks.get(r.ring, -1):
                        peaks[r.ring] = r.heap_end - b.heap_start

    steps: list[tuple[str, Callable[[], object]]] = [
             ("bytes.split into lines", lambda: [c.split(b"\n") for c in chunks]),
             ("msgspec decode, one call per line", lambda: [raw.decode(x) for x in data.splitlines()[1:]]),
             ("ringtrace Decoder.feed (decode.py)", decode),
             ("Decoder + Pairer.push (pair.py)", decode_pair),
             ("Run.feed + finish (run.py: decode, pair, events)", run),
             ("bound: msgspec decode_lines + minimal pairing", bound),
             ("naive reader (guide snippet), in process", lambda: naive.naive_summary(str(path)))]
    lines = [f"CPU time by stage on {path.name}, in this process (no startup):", "", "| stage | CPU |", "|---|---|"]
    for name, fn in steps:
        t0 = time.process_time()
        fn()
        lines.append(f"| {name} | {time.process_time() - t0:.2f} s |")
    return "\n".join(lines)


def table(results: list[Result]) -> str:
    rows = ["| reader | file | records | wall | CPU | records/s (wall) | peak RSS |", "|---|---|---|---|---|---|---|"]
    for r in results:
        rows.append(f"| {r.reader} | {r.file_mb:.0f} MB | {r.records:,} | {r.wall_s:.2f} s | {r.cpu_s:.2f} s "
                    f"| {r.rate:,.0f} | {r.rss_mb:.0f} MB |")
    return "\n".join(rows)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    ap.add_argument("--size-mb", type=int, default=100, help="size of the file both readers run on (default 100)")
    ap.add_argument("--big-mb", type=int, default=500, help="size of the ringtrace-only RSS file (default 500)")
    ap.add_argument("--skip-500", action="store_true", help="skip the big file")
    ap.add_argument("--repeat", type=int, default=1, help="runs per reader; the smallest times count (default 1)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--profile", action="store_true", help="also cProfile ringtrace on the --size-mb file")
    args = ap.parse_args(argv)

    small = data_file(args.size_mb, args.seed)
    big = None if args.skip_500 else data_file(args.big_mb, args.seed)
    rt = bench_ringtrace(small, args.repeat)
    naive = bench_naive(small, rt.records, args.repeat)
    results = [rt, naive]
    if big is not None:
        results.append(bench_ringtrace(big, args.repeat))
    ratio, cpu_ratio = rt.rate / naive.rate, naive.cpu_s / rt.cpu_s
    print(f"python {sys.version.split()[0]}, {os.cpu_count()} CPUs; command: "
          f"`python tests/bench/bench_summary.py --size-mb {args.size_mb}"
          f"{' --skip-500' if big is None else ''}`\n")
    print(table(results))
    print()
    print(f"- throughput: ringtrace {ratio:.1f}x the naive reader's records/s by wall time, {cpu_ratio:.1f}x by "
          f"CPU time (goal >= 5x): {'met' if min(ratio, cpu_ratio) >= 5 else 'NOT met'}")
    print(f"- load average while measuring: {os.getloadavg()[0]:.1f} on {os.cpu_count()} CPUs")
    print(f"- naive peak RSS: {naive.rss_mb / naive.file_mb:.1f}x the file size")
    if big is not None:
        big_rt = results[-1]
        print(f"- ringtrace peak RSS on {big_rt.file_mb:.0f} MB: {big_rt.rss_mb:.0f} MB (goal <= 100 MB): "
              f"{'met' if big_rt.rss_mb <= 100 else 'NOT met'}")
    if args.profile:
        print()
        print(stages(small))
        print()
        print(profile(small))
    return 0


if __name__ == "__main__":
    sys.exit(main())
