"""The watch path in bounded memory: slices, a byte-bounded hand-off, live files before the backlog.

In-process tests drive a real :class:`App` over real files with a sink slower than the reader
(Perfetto), so the hand-off fills and the reader has to wait; the bound on what is in flight
(``InFlight.peak``) must hold at every moment.  A subprocess test checks the peak RSS of
``watch --once`` on a ~100 MB file (a memory bound, not a time).
"""

from __future__ import annotations

import asyncio
import shutil
import sys
import time
from pathlib import Path

import pytest

from ringtrace import config
from ringtrace.demo.sim import generate_bytes
from ringtrace.model.records import WANT_ALL, RunFinished, RunProgress, SinkEvent
from ringtrace.reading.app import EVENT_WEIGHT, App
from ringtrace.reading.tail.follower import SLICE
from ringtrace.sinks import FanOut
from ringtrace.sinks.perfetto import PerfettoDirSink
from ringtrace.sinks.prometheus import PrometheusSink
from tests._support.rss import peak_rss
from tests._support.samples import NESTED

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
    """While a 40-file backlog is read, records appended to a live file reach the sinks before the
    backlog is done (urgent files jump the queue between slices)."""
    backlog = tmp_path / "old"
    for i in range(40):
        d = backlog / f"run{i:03d}" / "scope_stats"
        d.mkdir(parents=True)
        shutil.copy(NESTED, d / "scope_stats.jsonl")
    live = tmp_path / "live" / "scope_stats"
    live.mkdir(parents=True)
    target = live / "scope_stats.jsonl"
    lines = NESTED.read_bytes().splitlines(keepends=True)
    order: list[str] = []

    def on_batch(batch: list[SinkEvent]) -> None:
        for e in batch:
            if isinstance(e, RunFinished):
                order.append("live" if e.source.path == str(target) else "old")

    async def main() -> None:
        cfg = config.build({"idle_timeout": 600}, env={})
        app = App(cfg, [str(tmp_path)], FanOut([PerfettoDirSink(tmp_path / "traces")]), on_batch=on_batch)
        task = asyncio.create_task(app.run())
        deadline = time.monotonic() + 60
        while not app.ready and time.monotonic() < deadline:
            await asyncio.sleep(0.005)
        with open(target, "wb") as fh:  # the whole run, once the backlog reading has begun
            fh.write(b"".join(lines))
        while (len(order) < 41) and time.monotonic() < deadline:
            await asyncio.sleep(0.01)
        app.stop()
        await task

    asyncio.run(main())
    assert sorted(order) == ["live"] + ["old"] * 40
    assert order.index("live") < 40, order  # not last: it did not wait for the whole backlog


@pytest.mark.slow
def test_watch_once_on_a_100_mb_file_stays_small(tmp_path: Path) -> None:
    d = tmp_path / "big" / "scope_stats"
    d.mkdir(parents=True)
    generate_bytes(100 << 20)(d / "scope_stats.jsonl")
    ev = tmp_path / "events.jsonl"
    args = [sys.executable, "-m", "ringtrace", "watch", str(tmp_path), "--once", "--events", str(ev),
            "--perfetto-dir", str(tmp_path / "traces")]
    peak_mb, _, code = peak_rss(args)
    assert code == 0
    print(f"watch --once on 100 MB: peak RSS {peak_mb:.0f} MB")
    assert peak_mb < 100  # the file is 100 MB; before slices this was ~300 MB (3x the file)
    assert ev.read_text().count("\n") == 1
