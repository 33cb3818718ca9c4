"""What the benchmarks share: the cached simulator files, a timed child process, a live appender, and
:func:`peak_rss`, the peak RSS of a command measured right: it is started from a small launcher process
(``python -S``) that waits for it with ``wait4`` (a child spawned straight from a large process, pytest
or a benchmark, would count that process's pages in its ``ru_maxrss`` until its exec).

Imported by the ``bench_*`` scripts once they have put the checkout on ``sys.path``.
"""

from __future__ import annotations

import hashlib
import os
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


def run_child(cmd: list[str], cwd: Path = ROOT) -> tuple[float, float, float, bytes]:
    """Run ``cmd`` in ``cwd``; returns (wall seconds, CPU seconds, peak RSS in MB of that child, stdout)."""
    with tempfile.TemporaryFile() as out:
        t0 = time.perf_counter()
        proc = subprocess.Popen(cmd, stdout=out, cwd=cwd)
        _, status, usage = os.wait4(proc.pid, 0)
        wall = time.perf_counter() - t0
        proc.returncode = os.waitstatus_to_exitcode(status)
        out.seek(0)
        text = out.read()
    if proc.returncode != 0:
        raise SystemExit(f"{' '.join(cmd)} exited {proc.returncode}")
    return wall, usage.ru_utime + usage.ru_stime, usage.ru_maxrss / 1024, text  # ru_maxrss: KiB on Linux


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
