"""The watch path in bounded memory: slices, a byte-bounded hand-off, live files before the backlog.

In-process tests drive a real :class:`App` over real files with a sink slower than the reader
(Perfetto), so the hand-off fills and the reader has to wait; the bound on what is in flight
(``InFlight.peak``, the bytes the app accounts, not the machine's memory) must hold at every
moment.  What that costs in memory and time is measured by ``tests/bench/bench_bounded.py``.
"""

from __future__ import annotations

import asyncio
import os
import shutil
from pathlib import Path

import pytest

from ringtrace import config
from ringtrace.demo.sim import generate_bytes
from ringtrace.model.records import WANT_ALL, RunFinished, RunProgress, SinkEvent
from ringtrace.reading.app import App
from ringtrace.reading.reader_task import EVENT_WEIGHT
from ringtrace.reading.tail.follower import SLICE
from ringtrace.sinks import FanOut
from ringtrace.sinks.perfetto import PerfettoDirSink
from ringtrace.sinks.prometheus import PrometheusSink
from tests._support.app import AppThread
from tests._support.samples import NESTED
from tests._support.sinks import Stepping
from tests._support.writer import wait_for

pytestmark = pytest.mark.slow  # the live app over tens of megabytes

LIMIT = 2 * SLICE


def run_app(roots: list[Path], sinks: list[object], tmp: Path, **cfg: object) -> tuple[App, list[SinkEvent]]:
    seen: list[SinkEvent] = []
    app = App(config.build({"once": True, **cfg}, env={}), [str(r) for r in roots],
              FanOut(sinks),  # type: ignore[arg-type]
              on_batch=seen.extend, in_flight_bytes=LIMIT)
    asyncio.run(app.run())
    return app, seen


def bound_holds(app: App, events: int = 8) -> None:
    """Never more than the limit plus one slice (and the few events that slice made) in flight."""
    assert app.in_flight.peak <= LIMIT + SLICE + 64 + events * EVENT_WEIGHT
    assert app.in_flight.level == 0  # everything delivered at the end


def test_one_large_file_is_read_in_slices_within_the_bound(tmp_path: Path) -> None:
    d = tmp_path / "big" / "scope_stats"
    d.mkdir(parents=True)
    size = generate_bytes(24 << 20)(d / "scope_stats.jsonl")
    app, seen = run_app([tmp_path], [PerfettoDirSink(tmp_path / "traces")], tmp_path)
    bound_holds(app)
    assert app.in_flight.peak >= LIMIT - SLICE  # the slower sink made the reader wait: the bound was in play
    progress = [e for e in seen if isinstance(e, RunProgress)]
    assert len(progress) >= size // SLICE  # one batch per slice, not one for the file
    fins = [e for e in seen if isinstance(e, RunFinished)]
    assert [f.reason for f in fins] == ["complete"]
    assert fins[0].summary.records == sum(len(p.records) for p in progress)


def test_a_backlog_of_many_files_stays_within_the_bound(tmp_path: Path) -> None:
    for i in range(60):
        d = tmp_path / f"run{i:03d}" / "scope_stats"
        d.mkdir(parents=True)
        shutil.copy(NESTED, d / "scope_stats.jsonl")
    app, seen = run_app([tmp_path], [PerfettoDirSink(tmp_path / "traces")], tmp_path)
    bound_holds(app)
    fins = [e for e in seen if isinstance(e, RunFinished)]
    assert len(fins) == 60 and {f.summary.records for f in fins} == {1362}
    # backlog files are read one at a time: a run finishes before the next one starts
    open_runs, most = 0, 0
    for e in seen:
        if isinstance(e, RunProgress) and e.records and e.records[0].line <= 2:
            open_runs += 1
        elif isinstance(e, RunFinished):
            open_runs -= 1
        most = max(most, open_runs)
    assert most == 1


def test_summaries_only_sinks_get_no_records(tmp_path: Path) -> None:
    d = tmp_path / "r" / "scope_stats"
    d.mkdir(parents=True)
    shutil.copy(NESTED, d / "scope_stats.jsonl")
    seen: list[SinkEvent] = []
    prom = PrometheusSink()
    app = App(config.build({"once": True}, env={}), [str(tmp_path)], FanOut([prom]), on_batch=seen.extend)
    asyncio.run(app.run())
    progress = [e for e in seen if isinstance(e, RunProgress)]
    assert progress and all(not p.records and not p.events for p in progress)
    assert progress[-1].summary is not None and progress[-1].summary.records == 1362
    fin = next(e for e in seen if isinstance(e, RunFinished))
    assert fin.summary.scopes == 681
    # and a sink that wants records gets them
    seen.clear()
    app = App(config.build({"once": True}, env={}), [str(tmp_path)], FanOut([prom]), on_batch=seen.extend,
              wants=WANT_ALL)
    asyncio.run(app.run())
    assert sum(len(e.records) for e in seen if isinstance(e, RunProgress)) == 1362


def test_a_live_file_is_read_before_the_backlog(tmp_path: Path) -> None:
    """While a 40-file backlog is read, a run that appears in a live file reaches the sinks before the
    backlog is done (urgent files jump the queue between slices).  The sink takes nothing until the
    watcher has reported the live file, so the reader is held by the in-flight bound in the middle of
    the backlog when it appears (a condition, not a race with the backlog's speed)."""
    backlog = tmp_path / "old"
    for i in range(40):
        d = backlog / f"run{i:03d}" / "scope_stats"
        d.mkdir(parents=True)
        shutil.copy(NESTED, d / "scope_stats.jsonl")
        os.utime(d / "scope_stats.jsonl", (1_000_000, 1_000_000))  # finished runs, written long ago
    live = tmp_path / "live" / "scope_stats"
    live.mkdir(parents=True)
    target = live / "scope_stats.jsonl"
    order: list[str] = []

    def on_batch(batch: list[SinkEvent]) -> None:
        for e in batch:
            if isinstance(e, RunFinished):
                order.append("live" if e.source.path == str(target) else "old")

    sink = Stepping()
    cfg = config.build({"idle_timeout": 600}, env={})
    app = App(cfg, [str(tmp_path)], FanOut([sink]), on_batch=on_batch, in_flight_bytes=SLICE // 4)
    running = AppThread(app)
    try:
        wait_for(lambda: app.ready and app.fanout.queued()["stepping"] > 0, what="the backlog's reading to begin")
        staged = live / ".incoming"
        shutil.copy(NESTED, staged)
        os.utime(staged, (1_000_000, 1_000_000))  # written long ago: complete as soon as it is read
        staged.rename(target)  # the whole run appears at once
        wait_for(lambda: str(target) in app.watch.dirty, what="the watcher to report the live file")
        assert len(order) < 40  # the reader is held: the sink has taken nothing
        sink.step(1_000_000)
        wait_for(lambda: len(order) == 41, timeout=60, what="every run finished")
    finally:
        sink.step(1_000_000)
        assert running.stop() == 0
    assert sorted(order) == ["live"] + ["old"] * 40
    assert order.index("live") < 5, order  # read next, between two slices of the backlog
