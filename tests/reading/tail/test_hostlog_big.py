"""A 200 MB host log with the failure at its very end, read by a real ``watch --host-log-glob``.

The failure is found (the events say so, /metrics has ``ringtrace_run_failed``), and the read (about
200 MB through the parser, seconds of CPU) happens off the event loop: ``/healthz``, asked every
10 ms while the log is read, answers within 100 ms at the 99th percentile.  Both ways a run ends
with its log are covered: complete (the reader's slice) and deleted mid-run (which used to read the
log on the loop).  The log is written once per session.

Also: a failed run known only from its host log, dated a day in the future, is reported after the
idle timeout (the monotonic clock), not a day later.
"""

from __future__ import annotations

import http.client
import os
import shutil
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests._support.agent import Agent, events
from tests._support.samples import SAMPLES
from tests._support.writer import wait_for

HEAP = SAMPLES / "failed" / "HeapRingDeadlock"
ABORT = SAMPLES / "failed" / "VectorExample_heap128k_abort"
LOG_MB = 200


@pytest.fixture(scope="session")
def big_log(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """200 MB of the runtime's INFO lines (none the parser reads), then HeapRingDeadlock's log."""
    path = tmp_path_factory.mktemp("hostlog") / "host.log"
    lines = []
    for i in range(8_000):
        lines.append(b"[mono_ns=%d][T0x7fe141880b80][INFO] run: [aicpu_executor.cpp:%d] Thread %d: dispatched "
                     b"task %d to core %d (ring %d, heap_top=%d)\n" % (1248906254117 + 7919 * i, 500 + i % 400,
                                                                      i % 4, i, i % 24, i % 4, 4096 * (i % 97)))
    block = b"".join(lines)
    with path.open("wb") as fh:
        for _ in range(LOG_MB * 1_000_000 // len(block) + 1):
            fh.write(block)
        fh.write((HEAP / "host.log").read_bytes())
    assert path.stat().st_size > LOG_MB * 1_000_000
    return path


class Prober:
    """GET /healthz every 10 ms on one keep-alive connection, from a thread; keeps (start, latency)."""

    def __init__(self, port: int) -> None:
        self.port = port
        self.samples: list[tuple[float, float]] = []
        self.failures = 0
        self._stop = threading.Event()
        self._t = threading.Thread(target=self._run, daemon=True)
        self._t.start()

    def _run(self) -> None:
        conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=10)
        while not self._stop.is_set():
            t = time.monotonic()
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
                self.samples.append((t, time.monotonic() - t))
            else:
                self.failures += 1
            self._stop.wait(0.01)  # the request rate, not a synchronisation
        conn.close()

    def between(self, start: float, end: float) -> list[float]:
        return sorted(lat for t, lat in self.samples if start <= t <= end)

    def stop(self) -> None:
        self._stop.set()
        self._t.join(timeout=15)


@pytest.fixture
def prober() -> Iterator[list[Prober]]:
    started: list[Prober] = []
    yield started
    for p in started:
        p.stop()


def p99(lat: list[float]) -> float:
    return lat[max(0, -(-99 * len(lat) // 100) - 1)]


def healthz_held_up(probe: Prober, start: float, end: float, what: str) -> None:
    lat = probe.between(start, end)
    print(f"{what}: log read in {end - start:.2f} s; /healthz n={len(lat)} p50={1000 * lat[len(lat) // 2]:.1f} ms "
          f"p99={1000 * p99(lat):.1f} ms max={1000 * lat[-1]:.1f} ms")
    assert len(lat) >= 10, f"{what}: too few /healthz samples while the log was read: {len(lat)}"
    assert p99(lat) < 0.100, f"{what}: /healthz p99 {1000 * p99(lat):.0f} ms while the log was read (bound 100 ms)"


def test_a_failure_at_the_end_of_a_200_mb_log_is_found_off_the_loop(
        tmp_path: Path, big_log: Path, agents: list[Agent], prober: list[Prober]) -> None:
    tree = tmp_path / "tree"
    tree.mkdir()
    ev = tmp_path / "ev.jsonl"
    a = Agent(str(tree), ev, "--host-log-glob", "*.log", "--rescan-interval", "600", "--idle-timeout", "600")
    agents.append(a)
    wait_for(a.ready, what="the agent")
    probe = Prober(a.port)
    prober.append(probe)
    wait_for(lambda: len(probe.samples) >= 5, what="/healthz answering")

    # a run that completes: the log is read at its finish
    stats = tree / "whole" / "dfx_outputs" / "scope_stats"
    stats.mkdir(parents=True)
    os.link(big_log, tree / "whole" / "host.log")
    shutil.copy(HEAP / "dfx_outputs/scope_stats/scope_stats.jsonl", stats / ".incoming")
    start = time.monotonic()
    (stats / ".incoming").rename(stats / "scope_stats.jsonl")
    wait_for(lambda: len(events(ev)) == 1, timeout=60, what="the complete run with its log")
    healthz_held_up(probe, start, time.monotonic(), "complete run")
    (got,) = events(ev)
    assert got["reason"] == "complete"
    assert got["host_log"]["failed"] and got["host_log"]["orch_error_code"] == 2
    assert next(f for f in got["findings"] if f["rule"] == "wedged")["confirmed"] is True
    code, body = a.get("/metrics")
    failed = [line for line in body.splitlines() if line.startswith("ringtrace_run_failed{")]
    assert code == 200 and len(failed) == 1 and 'run="whole"' in failed[0] and 'code="2"' in failed[0], failed

    # a run whose file is deleted mid-run (it ends as deleted, with its log)
    cut = tree / "cut" / "dfx_outputs" / "scope_stats"
    cut.mkdir(parents=True)
    os.link(big_log, tree / "cut" / "host.log")
    meta = (HEAP / "dfx_outputs/scope_stats/scope_stats.jsonl").read_bytes().split(b"\n")[0] + b"\n"
    (cut / ".incoming").write_bytes(meta)  # the metadata line alone: the run waits for its record
    (cut / ".incoming").rename(cut / "scope_stats.jsonl")
    wait_for(lambda: f"following {cut / 'scope_stats.jsonl'}" in a.stderr()
             and 'run="cut"' in a.get("/metrics")[1], what="the cut run followed")
    start = time.monotonic()
    (cut / "scope_stats.jsonl").unlink()
    wait_for(lambda: len(events(ev)) == 2, timeout=60, what="the deleted run with its log")
    healthz_held_up(probe, start, time.monotonic(), "deleted run")
    deleted = events(ev)[1]
    assert deleted["reason"] == "deleted" and deleted["labels"]["run"] == "cut"
    assert deleted["host_log"]["failed"] and deleted["host_log"]["orch_error_code"] == 2
    probe.stop()
    assert probe.failures == 0
    assert a.stop()[0] == 0


def test_a_log_only_failure_dated_in_the_future_is_reported_after_the_idle_timeout(
        tmp_path: Path, agents: list[Agent]) -> None:
    tree = tmp_path / "tree"
    tree.mkdir()
    ev = tmp_path / "ev.jsonl"
    a = Agent(str(tree), ev, "--host-log-glob", "*.log", "--idle-timeout", "1")  # rescans every 0.5 s
    agents.append(a)
    wait_for(a.ready, what="the agent")
    staged = tmp_path / ABORT.name
    shutil.copytree(ABORT, staged)
    future = time.time() + 86_400  # written on a machine whose clock is a day ahead
    os.utime(staged / "host.log", (future, future))
    staged.rename(tree / ABORT.name)
    wait_for(lambda: len(events(ev)) == 1, timeout=10, what="the log-only run, within the idle timeout and a rescan")
    (got,) = events(ev)
    assert got["path"] is None and got["labels"]["run"] == ABORT.name
    assert [f["rule"] for f in got["findings"]] == ["failed"]
    assert a.stop()[0] == 0
