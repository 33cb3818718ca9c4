"""Benchmark: one agent at scale (issue 35): ``ringtrace watch --metrics-addr`` over 10,000 finished rank files.

Lays out ``--runs`` L3 runs of ``--ranks`` ranks each (default 625 x 16 = 10,000 rank files) in the runtime's
layout, ``<run>/dfx_outputs/rank<N>/d0/scope_stats/scope_stats.jsonl``, each a copy of the runtime's L3 sample
(``nested_l3``'s rank 0: 1,362 records, 313 KB, complete), cached in ``tests/bench/data/`` (3.1 GB).  Then, for
each checkout given (this one, and ``--before DIR`` with its own ``.venv``, e.g. the revision before), in the
same run and in turn:

1. **catch-up**: the agent starts on the tree; the time until its log said ``run finished`` for every rank file;
2. **series and bytes**: one scrape as Prometheus asks for it (its ``Accept`` header), without compression:
   the samples in it (all, and the per-run ones per rank file) and its bytes (and gzip's bytes);
3. **/metrics latency**, p50 and p99 of ``--scrapes`` scrapes on one keep-alive connection, three ways:
   ``steady`` (nothing changed between scrapes), ``steady+gzip`` (``Accept-Encoding: gzip``, as Prometheus
   sends it), and ``changing+gzip``: before each scrape one more rank file is written and the agent's log
   says it finished, so the scrape sees a changed set of runs (what a node running jobs sees);
4. **peak RSS** of the agent (``VmHWM``, read before it is stopped: catch-up and every scrape);
5. the agent's **CPU per scrape** (its threads' ``schedstat`` before and after each scrape), p50 and p99:
   what a scrape costs whatever the machine's load (the wall-clock figures wait for the CPU on a busy one).

Nothing here asserts a time.  The machine's load average is printed with the figures.

    .venv/bin/python -m tests.bench.bench_scale [--before /path/to/checkout] [--runs 625] [--ranks 16]
        [--scrapes 50] [--ttl 900]
"""

from __future__ import annotations

import argparse
import contextlib
import gzip
import hashlib
import http.client
import os
import shutil
import signal
import statistics
import subprocess
import sys
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from tests._support.ports import free_port  # noqa: E402

DATA = Path(__file__).resolve().parent / "data"
SAMPLE = ROOT / "tests/fixtures/samples/build_output/nested_l3_20261130_102011/dfx_outputs/rank0/d0" \
    / "scope_stats/scope_stats.jsonl"
ACCEPT = ("application/openmetrics-text;version=1.0.0,application/openmetrics-text;version=0.0.1;q=0.75,"
          "text/plain;version=0.0.4;q=0.5,*/*;q=0.1")  # what Prometheus 2.x sends
FINISHED = "run finished: "


def rank_file(root: Path, run: str, rank: int) -> Path:
    return root / run / "dfx_outputs" / f"rank{rank}" / "d0" / "scope_stats" / "scope_stats.jsonl"


def layout(runs: int, ranks: int) -> Path:
    """The cached tree of ``runs`` x ``ranks`` copies of :data:`SAMPLE` (written once)."""
    data = SAMPLE.read_bytes()
    key = hashlib.sha256(data).hexdigest()[:10]
    root = DATA / f"scale_{runs}x{ranks}_{key}"
    done = root / ".complete"
    if done.exists():
        return root / "tree"
    shutil.rmtree(root, ignore_errors=True)
    t0 = time.perf_counter()
    for r in range(runs):
        for k in range(ranks):
            path = rank_file(root / "tree", f"l3run{r:04d}_20261201_{r % 86400:06d}", k)
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_bytes(data)
    done.write_text("")
    print(f"laid out {runs * ranks} rank files ({runs * ranks * len(data) / 1e9:.1f} GB) in "
          f"{time.perf_counter() - t0:.0f} s", file=sys.stderr)
    return root / "tree"


class Agent:
    """``PYTHON -m ringtrace watch TREE --metrics-addr`` in ``checkout``, its stderr counted as it comes."""

    def __init__(self, python: str, checkout: Path, tree: Path, ttl: float, extra: list[str]) -> None:
        self.port = free_port()
        self.finished = 0
        self.lines: list[str] = []
        self._cv = threading.Condition()
        self.proc = subprocess.Popen([python, "-m", "ringtrace", "watch", str(tree), "--log-level", "info",
                                      "--metrics-addr", f"127.0.0.1:{self.port}", "--series-ttl", str(ttl),
                                      *extra], cwd=checkout, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                                     text=True, errors="replace")
        self._t = threading.Thread(target=self._read, daemon=True)
        self._t.start()

    def _read(self) -> None:
        assert self.proc.stderr is not None
        for line in self.proc.stderr:
            with self._cv:
                if FINISHED in line:
                    self.finished += 1
                elif len(self.lines) < 200:
                    self.lines.append(line)
                self._cv.notify_all()

    def wait_finished(self, n: int, timeout: float) -> None:
        with self._cv:
            if not self._cv.wait_for(lambda: self.finished >= n or self.proc.poll() is not None, timeout):
                raise SystemExit(f"timed out: {self.finished} of {n} runs finished\n{''.join(self.lines)}")
            if self.finished < n:
                raise SystemExit(f"the agent exited {self.proc.returncode}\n{''.join(self.lines)}")

    def peak_rss_mb(self) -> float:
        for line in Path(f"/proc/{self.proc.pid}/status").read_text().splitlines():
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) / 1024
        return float("nan")

    def cpu_seconds(self) -> float:
        fields = Path(f"/proc/{self.proc.pid}/stat").read_text().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")

    def cpu_ns(self) -> int:
        """CPU time of the agent's threads now (schedstat: nanoseconds, not clock ticks)."""
        total = 0
        for task in Path(f"/proc/{self.proc.pid}/task").iterdir():
            with contextlib.suppress(OSError, ValueError):  # a thread that just ended
                total += int((task / "schedstat").read_text().split()[0])
        return total

    def stop(self) -> None:
        self.proc.send_signal(signal.SIGTERM)
        try:
            self.proc.wait(timeout=120)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()


def scrape(conn: http.client.HTTPConnection, zipped: bool, agent: Agent | None = None,
           cpu: list[float] | None = None) -> tuple[float, bytes]:
    """(seconds, body as sent) of one GET /metrics on ``conn``; the agent's CPU seconds for it go to ``cpu``."""
    headers = {"Accept": ACCEPT, **({"Accept-Encoding": "gzip"} if zipped else {})}
    before = agent.cpu_ns() if agent is not None else 0
    t = time.perf_counter()
    conn.request("GET", "/metrics", headers=headers)
    resp = conn.getresponse()
    body = resp.read()
    took = time.perf_counter() - t
    if agent is not None and cpu is not None:
        cpu.append((agent.cpu_ns() - before) / 1e9)
    if resp.status != 200:
        raise SystemExit(f"/metrics answered {resp.status}")
    return took, body


def pct(values: list[float], q: float) -> float:
    s = sorted(values)
    return s[min(len(s) - 1, round(q * (len(s) - 1)))]


def measure(label: str, python: str, checkout: Path, tree: Path, files: int,
            args: argparse.Namespace) -> dict[str, object]:
    agent = Agent(python, checkout, tree, args.ttl, [])
    t0 = time.perf_counter()
    try:
        agent.wait_finished(files, timeout=1800)
        catch_up = time.perf_counter() - t0
        catch_up_cpu = agent.cpu_seconds()
        conn = http.client.HTTPConnection("127.0.0.1", agent.port, timeout=120)
        _, body = scrape(conn, False)
        text = body.decode()
        samples = [line for line in text.splitlines() if line and not line.startswith("#")]
        per_run = [line for line in samples if 'rank="' in line]
        zipped_bytes = len(gzip.compress(body, 5))
        lat: dict[str, list[float]] = {"steady": [], "steady+gzip": [], "changing+gzip": []}
        cpu: dict[str, list[float]] = {k: [] for k in lat}
        for _ in range(args.scrapes):
            lat["steady"].append(scrape(conn, False, agent, cpu["steady"])[0])
        for _ in range(args.scrapes):
            lat["steady+gzip"].append(scrape(conn, True, agent, cpu["steady+gzip"])[0])
        data = SAMPLE.read_bytes()
        for i in range(args.scrapes):  # one more finished rank file before each scrape (the agent's own tree)
            path = rank_file(tree, f"zz_{label}_{os.getpid()}", i)
            path.parent.mkdir(parents=True, exist_ok=True)
            tmp = path.with_name(".incoming")
            tmp.write_bytes(data)
            tmp.rename(path)
            agent.wait_finished(files + i + 1, timeout=120)
            lat["changing+gzip"].append(scrape(conn, True, agent, cpu["changing+gzip"])[0])
        conn.close()
        rss = agent.peak_rss_mb()
    finally:
        agent.stop()
        shutil.rmtree(tree / f"zz_{label}_{os.getpid()}", ignore_errors=True)
    return {"label": label, "catch_up": catch_up, "catch_up CPU": catch_up_cpu, "series": len(samples),
            "per_rank": len(per_run) / files, "bytes": len(body), "gzip_bytes": zipped_bytes, "rss": rss,
            **{f"{k} p50": pct(v, 0.5) for k, v in lat.items()}, **{f"{k} p99": pct(v, 0.99) for k, v in lat.items()},
            **{f"{k} CPU p50": pct(v, 0.5) for k, v in cpu.items()},
            **{f"{k} CPU p99": pct(v, 0.99) for k, v in cpu.items()}}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--before", type=Path, help="another checkout (with its .venv) measured in the same run")
    ap.add_argument("--runs", type=int, default=625)
    ap.add_argument("--ranks", type=int, default=16)
    ap.add_argument("--scrapes", type=int, default=50)
    ap.add_argument("--ttl", type=float, default=900.0)
    ap.add_argument("--repeat", type=int, default=1, help="rounds (before, after) in turn; medians reported")
    args = ap.parse_args()
    tree = layout(args.runs, args.ranks)
    files = args.runs * args.ranks
    subjects = [("after", str(ROOT / ".venv/bin/python"), ROOT)]
    if args.before is not None:
        subjects.insert(0, ("before", str(args.before / ".venv/bin/python"), args.before))
    rows: dict[str, list[dict[str, object]]] = {}
    for _ in range(args.repeat):
        for label, python, checkout in subjects:
            print(f"{label}: {checkout} (load average {os.getloadavg()[0]:.1f})", file=sys.stderr)
            rows.setdefault(label, []).append(measure(label, python, checkout, tree, files, args))
    keys = [k for k in rows[subjects[0][0]][0] if k != "label"]
    print(f"\n{files:,} rank files ({args.runs} runs x {args.ranks} ranks); {args.scrapes} scrapes each way; "
          f"median of {args.repeat}; load average {' '.join(f'{x:.1f}' for x in os.getloadavg())}\n")
    print("| figure | " + " | ".join(label for label, _, _ in subjects) + (" | after/before |" if len(subjects) > 1
                                                                            else " |"))
    print("|---|" + "---|" * (len(subjects) + (len(subjects) > 1)))
    for k in keys:
        vals = [statistics.median(float(r[k]) for r in rows[label]) for label, _, _ in subjects]  # type: ignore[arg-type]
        unit = " ms" if k.endswith(("p50", "p99")) else ""  # wall, and the agent's CPU for the scrape
        shown = [f"{v * 1000:.0f}{unit}" if unit else (f"{v:,.1f}" if v < 1000 else f"{v:,.0f}") for v in vals]
        ratio = f" | {vals[1] / vals[0]:.2f}" if len(vals) > 1 and vals[0] else (" | -" if len(vals) > 1 else "")
        print(f"| {k} | " + " | ".join(shown) + ratio + " |")


if __name__ == "__main__":
    main()
