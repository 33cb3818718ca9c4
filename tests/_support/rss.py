"""Peak RSS of a command, measured right: ``peak_rss(args) -> (MB, wall seconds, exit code)``.

The command is started from a small launcher process (``python -S``) that waits for it with
``wait4``: a child spawned straight from a large process (pytest, a benchmark) would count that
process's pages in its ``ru_maxrss`` until its exec.
"""

from __future__ import annotations

import subprocess
import sys

LAUNCHER = (
    "import os, sys, time\n"
    "t = time.monotonic()\n"
    "pid = os.posix_spawn(sys.argv[1], sys.argv[1:], os.environ,\n"
    "                     file_actions=[(os.POSIX_SPAWN_OPEN, 1, os.devnull, os.O_WRONLY, 0)])\n"
    "_, status, usage = os.wait4(pid, 0)\n"
    "print(usage.ru_maxrss, time.monotonic() - t, os.waitstatus_to_exitcode(status))\n")


def peak_rss(args: list[str], timeout: float = 1800) -> tuple[float, float, int]:
    out = subprocess.run([sys.executable, "-S", "-c", LAUNCHER, *args], capture_output=True, text=True,
                         check=True, timeout=timeout)
    rss_kb, wall, code = out.stdout.split()
    return int(rss_kb) / 1024, float(wall), int(code)
