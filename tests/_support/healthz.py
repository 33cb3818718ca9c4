"""A big host log, and a prober of a watch agent's ``/healthz`` (the host-log test and ``bench_agent``).

:func:`big_host_log` writes ``mb`` MB of the runtime's INFO lines (none the parser reads), then
HeapRingDeadlock's real log (the failure at the very end); :func:`stage_run_with_log` puts that run
beside it.  :class:`Prober` asks ``GET /healthz`` every 10 ms on one keep-alive connection from a
thread and keeps, for each answer, when it was asked, how long it took, and how many bytes the agent
process had read (``rchar`` of ``/proc/PID/io``) when it was asked and when it was answered: an answer
between two points of a read was given while it went on.
"""

from __future__ import annotations

import http.client
import os
import shutil
import threading
import time
from pathlib import Path
from typing import NamedTuple

from tests._support.samples import FAILED

HEAP = FAILED / "HeapRingDeadlock"


def big_host_log(path: Path, mb: int) -> Path:
    block = b"".join(b"[mono_ns=%d][T0x7fe141880b80][INFO] run: [aicpu_executor.cpp:%d] Thread %d: dispatched "
                     b"task %d to core %d (ring %d, heap_top=%d)\n" % (1248906254117 + 7919 * i, 500 + i % 400,
                                                                      i % 4, i, i % 24, i % 4, 4096 * (i % 97))
                     for i in range(8_000))
    with path.open("wb") as fh:
        for _ in range(mb * 1_000_000 // len(block) + 1):
            fh.write(block)
        fh.write((HEAP / "host.log").read_bytes())
    return path


def stage_run_with_log(tree: Path, name: str, log: Path) -> Path:
    """HeapRingDeadlock's run as ``tree/name`` (L2 layout) with ``log`` hard-linked as its ``host.log``, its
    scope_stats file staged as ``.incoming``: renaming that to ``scope_stats.jsonl`` makes the run appear."""
    stats = tree / name / "dfx_outputs" / "scope_stats"
    stats.mkdir(parents=True)
    os.link(log, tree / name / "host.log")
    shutil.copy(HEAP / "dfx_outputs/scope_stats/scope_stats.jsonl", stats / ".incoming")
    return stats / ".incoming"


class Answer(NamedTuple):
    at: float  # time.monotonic() when asked
    took: float  # seconds to the answer
    read_before: int  # bytes the agent had read when asked
    read_after: int  # and when answered


class Prober:
    """See the module docstring; ``failures`` counts requests that got no 200."""

    def __init__(self, port: int, pid: int) -> None:
        self.port = port
        self.io = Path(f"/proc/{pid}/io")
        self.answers: list[Answer] = []
        self.failures = 0
        self._stop = threading.Event()
        self._t = threading.Thread(target=self._run, daemon=True)
        self._t.start()

    def read_bytes(self) -> int:
        """Bytes the agent process has read so far (``rchar``)."""
        return int(next(x for x in self.io.read_text().splitlines() if x.startswith("rchar:")).split()[1])

    def _run(self) -> None:
        conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=10)
        while not self._stop.is_set():
            before, t = self.read_bytes(), time.monotonic()
            try:
                conn.request("GET", "/healthz")
                resp = conn.getresponse()
                resp.read()
                ok = resp.status == 200
            except (OSError, http.client.HTTPException):
                ok = False
                conn.close()
                conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=10)
            if ok:
                self.answers.append(Answer(t, time.monotonic() - t, before, self.read_bytes()))
            else:
                self.failures += 1
            self._stop.wait(0.01)  # the request rate, not a synchronisation
        conn.close()

    def between(self, start: float, end: float) -> list[float]:
        """The latencies of the requests asked between ``start`` and ``end``, sorted."""
        return sorted(a.took for a in self.answers if start <= a.at <= end)

    def stop(self) -> None:
        self._stop.set()
        self._t.join(timeout=15)
