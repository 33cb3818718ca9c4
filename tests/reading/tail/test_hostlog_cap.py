"""Host logs read whole up to the cap, and past it at both ends (``read_log``), and log-only runs
decided on the monotonic clock, never on the log's mtime (``Tailer.log_only_runs``).

Caps and times are passed in, so the logs here are a few KB and no test waits for a clock."""

from __future__ import annotations

import logging
import os
import shutil
import time
from pathlib import Path

import pytest

from ringtrace.config import Thresholds
from ringtrace.hostlog.read import read_log
from ringtrace.reading.tail.tailer import Tailer
from tests._support.events import finished
from tests._support.samples import SAMPLES

HEAP_LOG = SAMPLES / "failed" / "HeapRingDeadlock" / "host.log"
ABORT = SAMPLES / "failed" / "VectorExample_heap128k_abort"  # a host log and no scope_stats file
INFO = b"[mono_ns=1249472550575][T0x7fe141880b80][INFO] run: [aicpu_executor.cpp:867] Thread 0: dispatched task\n"


def filler(n: int) -> bytes:
    return INFO * (n // len(INFO) + 1)


def test_a_log_under_the_cap_is_read_whole(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    log = tmp_path / "host.log"
    log.write_bytes(filler(50_000) + HEAP_LOG.read_bytes())
    (part,) = read_log(log, limit=log.stat().st_size)
    assert part.orch_error_code == 2 and part.failed
    assert not [p for p in part.problems if p.reason == "skipped"] and "cap" not in caplog.text


def test_a_failure_at_the_end_of_a_log_over_the_cap_is_found(tmp_path: Path,
                                                            caplog: pytest.LogCaptureFixture) -> None:
    log = tmp_path / "host.log"
    log.write_bytes(filler(200_000) + HEAP_LOG.read_bytes())
    with caplog.at_level(logging.WARNING, "ringtrace.reading.tail"):
        (part,) = read_log(log, limit=40_000, edge=15_000)
    assert part.orch_error_code == 2 and part.failed and part.deadlock is not None
    (skipped,) = [p for p in part.problems if p.reason == "skipped"]
    assert skipped.severity == "warning" and "not read" in skipped.message
    assert "over the cap" in caplog.text and str(log) in caplog.text  # said in a log line too


def test_a_failure_in_the_middle_of_a_log_over_the_cap_is_missed_and_said(tmp_path: Path) -> None:
    log = tmp_path / "host.log"
    log.write_bytes(filler(100_000) + HEAP_LOG.read_bytes() + filler(100_000))
    (part,) = read_log(log, limit=40_000, edge=15_000)
    assert part.orch_error_code is None  # the documented cost of the cap
    assert [p.reason for p in part.problems] == ["skipped"]


def test_the_head_and_the_tails_first_line_are_read_whole(tmp_path: Path) -> None:
    head = b"[ERROR] report_deadlock: [pto_ring_buffer.h:425] FATAL: Task Allocator Deadlock - Heap Exhausted! ring=1\n"
    tail_line = (b"[ERROR] validate_runtime_impl: [runtime_maker.cpp:1019] PTO2 runtime failed: "
                 b"orch_error_code=2 sched_error_code=0 runtime_status=-2\n")
    edge = len(tail_line)
    log = tmp_path / "host.log"
    log.write_bytes(head + filler(10_000) + tail_line)  # the tail starts exactly at a line
    (part,) = read_log(log, limit=2 * edge, edge=edge)
    assert part.orch_error_code == 2  # read whole although it starts right at the tail's edge
    assert part.deadlock is not None and part.deadlock.ring == 1


def tailer(root: Path, idle: float = 1.0) -> Tailer:
    return Tailer([str(root)], Thresholds(), idle, log_name="*.log")


def test_a_log_dated_in_the_future_is_decided_on_the_monotonic_clock(tmp_path: Path) -> None:
    tree = tmp_path / "tree"
    shutil.copytree(ABORT, tree / ABORT.name)
    log = tree / ABORT.name / "host.log"
    future = time.time() + 86_400  # clock skew: written by a machine a day ahead
    os.utime(log, (future, future))
    t = tailer(tree, idle=1.0)
    assert finished(t.discover(100.0, 0.0)) == []  # first seen now: the wait starts
    assert finished(t.discover(100.9, 0.0)) == []
    (fin,) = finished(t.discover(101.0, 0.0))  # 1 s of the monotonic clock later, whatever the mtime says
    assert fin.source.path == "" and fin.host_log is not None and fin.host_log.failed
    assert finished(t.discover(150.0, 0.0)) == []  # decided once
    # a change is a new version: its own wait, from when it was seen
    with log.open("ab") as fh:
        fh.write(b"one more line\n")
    os.utime(log, (future + 5, future + 5))
    assert finished(t.discover(200.0, 0.0)) == []
    assert finished(t.discover(200.5, 0.0)) == []
    assert len(finished(t.discover(201.0, 0.0))) == 1


def test_a_log_that_keeps_changing_waits_from_its_last_change(tmp_path: Path) -> None:
    tree = tmp_path / "tree"
    shutil.copytree(ABORT, tree / ABORT.name)
    log = tree / ABORT.name / "host.log"
    past = time.time() - 86_400  # an mtime long past says nothing either: the log is still being written
    t = tailer(tree, idle=1.0)
    for i, now in enumerate((10.0, 10.6, 11.2, 11.8)):
        with log.open("ab") as fh:
            fh.write(b"line %d\n" % i)
        os.utime(log, (past, past))
        assert finished(t.discover(now, 0.0)) == [], now
    assert finished(t.discover(12.7, 0.0)) == []
    assert len(finished(t.discover(12.8, 0.0))) == 1


def test_once_decides_at_once(tmp_path: Path) -> None:
    tree = tmp_path / "tree"
    shutil.copytree(ABORT, tree / ABORT.name)
    future = time.time() + 86_400
    os.utime(tree / ABORT.name / "host.log", (future, future))
    t = tailer(tree, idle=30.0)
    assert len(finished(t.log_only_runs(5.0, final=True))) == 1
