"""What the benchmarks share: the cached simulator files, a timed child process, a live appender, and
:func:`peak_rss`, the peak RSS of a command measured right: it is started from a small launcher process
(``python -S``) that waits for it with ``wait4`` (a child spawned straight from a large process, pytest
or a benchmark, would count that process's pages in its ``ru_maxrss`` until its exec).

Imported by the ``bench_*`` scripts once they have put the checkout on ``sys.path``.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import msgspec

from ringtrace.demo import sim

ROOT = Path(__file__).resolve().parents[2]
DATA = Path(__file__).resolve().parent / "data"


MB = 1 << 20


def data_file(size_mb: int, seed: int) -> Path:
    """The cached benchmark file of ~``size_mb`` MB (regenerated when the scenario or the simulator changes)."""
    scn = sim.bench_scenario(size_mb * MB, seed)
    key = hashlib.sha256(msgspec.json.encode(scn) + Path(sim.__file__).read_bytes()).hexdigest()[:10]
    path = DATA / f"bench_{size_mb}mb_seed{seed}_{key}.jsonl"
    if not path.exists():
        DATA.mkdir(parents=True, exist_ok=True)
        tmp = path.with_suffix(".tmp")
        t0 = time.perf_counter()
        size = sim.write_file(tmp, scn)
        tmp.rename(path)
        print(f"generated {path.name}: {size / MB:.1f} MB in {time.perf_counter() - t0:.1f} s", file=sys.stderr)
    return path


REAL_SAMPLE = ROOT / "tests/fixtures/samples/outputs/TestPagedAttention_big16x2048_tight_20261130_101530" \
    / "scope_stats/scope_stats.jsonl"
"""The runtime's largest sample here: 1,984 records (470 KB) of a paged-attention run, 4 rings."""

_COUNTERS = ("task_window", "heap", "dep_pool")


def real_file(size_mb: int) -> Path:
    """~``size_mb`` MB made of :data:`REAL_SAMPLE` (cached): its root scope's begin, then its other records
    repeated, each copy's counters moved on by the previous copies' last heads on that ring (so every ring's
    counters stay monotonic and every scope's figures are the sample's), then the root's end.  At 41 MB
    about the size of the real 168,450-record run the issue measured (which is not in the repository)."""
    raw = REAL_SAMPLE.read_bytes()
    key = hashlib.sha256(raw + Path(__file__).read_bytes()).hexdigest()[:10]
    path = DATA / f"real_{size_mb}mb_{key}.jsonl"
    if path.exists():
        return path
    meta, first, *body, last = raw.splitlines()
    recs = [json.loads(line) for line in body]
    step: dict[int, dict[str, int]] = {}
    for r in recs:  # a copy moves each ring's counters on by the copy's last heads on that ring
        step[r["ring"]] = {c: r[f"{c}_end"] - (1 if c == "dep_pool" else 0) for c in _COUNTERS}
    parts: list[bytes] = []
    size, copies = len(meta) + len(first) + len(last), 0
    while size < size_mb * MB:
        lines = []
        for r in recs:
            moved = dict(r)
            for c in _COUNTERS:
                shift = copies * step[r["ring"]][c]
                moved[f"{c}_start"] += shift
                moved[f"{c}_end"] += shift
            lines.append(json.dumps(moved).encode())
        parts.append(b"\n".join(lines) + b"\n")
        size += len(parts[-1])
        copies += 1
    m = json.loads(meta)
    m["total"] = copies * len(recs) + 2
    DATA.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".tmp")
    tmp.write_bytes(b"".join([json.dumps(m).encode(), b"\n", first, b"\n", *parts, last, b"\n"]))
    tmp.rename(path)
    return path


def run_child(cmd: list[str], cwd: Path = ROOT, env: dict[str, str] | None = None) -> tuple[float, float, float, bytes]:
    """Run ``cmd`` in ``cwd``; returns (wall seconds, CPU seconds, peak RSS in MB of that child, stdout)."""
    with tempfile.TemporaryFile() as out:
        t0 = time.perf_counter()
        proc = subprocess.Popen(cmd, stdout=out, cwd=cwd, env=env)
        _, status, usage = os.wait4(proc.pid, 0)
        wall = time.perf_counter() - t0
        proc.returncode = os.waitstatus_to_exitcode(status)
        out.seek(0)
        text = out.read()
    if proc.returncode != 0:
        raise SystemExit(f"{' '.join(cmd)} exited {proc.returncode}")
    return wall, usage.ru_utime + usage.ru_stime, usage.ru_maxrss / 1024, text  # ru_maxrss: KiB on Linux


_LAUNCHER = (
    "import os, sys, time\n"
    "fd = os.open(sys.argv[1], os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)\n"
    "t = time.perf_counter()\n"
    "pid = os.posix_spawn(sys.argv[2], sys.argv[2:], os.environ, file_actions=[(os.POSIX_SPAWN_DUP2, fd, 1), "
    "(os.POSIX_SPAWN_OPEN, 2, os.devnull, os.O_WRONLY, 0)])\n"
    "_, status, u = os.wait4(pid, 0)\n"
    "print(time.perf_counter() - t, u.ru_utime + u.ru_stime, u.ru_maxrss, os.waitstatus_to_exitcode(status))\n")


def run_small(cmd: list[str], env: dict[str, str] | None = None) -> tuple[float, float, float, bytes]:
    """:func:`run_child`, started from a small launcher (``python -S``, ~9 MB) so that the child's peak RSS
    does not count this process's pages (a child counts its parent's until its exec); stderr is dropped."""
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "stdout"
        exe = cmd[0] if os.sep in cmd[0] else shutil.which(cmd[0]) or cmd[0]
        res = subprocess.run([sys.executable, "-S", "-c", _LAUNCHER, str(out), exe, *cmd[1:]], env=env,
                             capture_output=True, text=True, check=True, cwd=ROOT)
        wall, cpu, rss_kb, code = res.stdout.split()
        if int(code) != 0:
            raise SystemExit(f"{' '.join(cmd)} exited {code}")
        return float(wall), float(cpu), int(rss_kb) / 1024, out.read_bytes()


APPENDER = r"""
import os, sys, time
path, n, gap = sys.argv[1], int(sys.argv[2]), float(sys.argv[3])
lines = open(sys.argv[4], "rb").read().splitlines(keepends=True)
fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
os.write(fd, lines[0])
stamps = []
nxt = time.monotonic()
for i in range(1, n + 1):
    nxt += gap
    while time.monotonic() < nxt:
        time.sleep(0.0005)
    os.write(fd, lines[i])
    stamps.append(time.monotonic())
os.close(fd)
print(" ".join(f"{t:.6f}" for t in stamps))
"""


LAUNCHER = (
    "import os, sys, time\n"
    "t = time.monotonic()\n"
    "pid = os.posix_spawn(sys.argv[1], sys.argv[1:], os.environ,\n"
    "                     file_actions=[(os.POSIX_SPAWN_OPEN, 1, os.devnull, os.O_WRONLY, 0)])\n"
    "_, status, usage = os.wait4(pid, 0)\n"
    "print(usage.ru_maxrss, time.monotonic() - t, os.waitstatus_to_exitcode(status))\n")


def peak_rss(args: list[str], timeout: float = 1800) -> tuple[float, float, int]:
    """(peak RSS in MB, wall seconds, exit code) of ``args`` run to its end from the launcher."""
    out = subprocess.run([sys.executable, "-S", "-c", LAUNCHER, *args], capture_output=True, text=True,
                         check=True, timeout=timeout)
    rss_kb, wall, code = out.stdout.split()
    return int(rss_kb) / 1024, float(wall), int(code)
