"""The restart state's saver: a finished run handed to the sinks stays open in the saved state until
every sink took it, a take is saved soon without being asked, and a failed save is said, not raised.

The tailer's snapshot is stood in for by a recorder of what it was asked; the store is real."""

from __future__ import annotations

import asyncio
import logging
import threading
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from ringtrace.model.records import RunFinished, RunStarted, Source, empty_summary
from ringtrace.reading.saving import Saver
from ringtrace.reading.tail.state import State, Store

DEADLINE = 10.0
"""Against hanging only."""


def finished(path: str, key: str = "", generation: int = 0) -> RunFinished:
    return RunFinished(Source(path, generation=generation), empty_summary(None), (), "complete", key=key)


class Snapshots:
    """The tailer's ``snapshot`` as the saver calls it (on the reader thread): what it was told is undelivered."""

    def __init__(self, fail: OSError | None = None) -> None:
        self.asked: list[frozenset[tuple[str, int]]] = []
        self.fail = fail
        self.thread = ""
        self._news: tuple[asyncio.AbstractEventLoop, asyncio.Event] | None = None

    def __call__(self, undelivered: frozenset[tuple[str, int]]) -> State:
        self.thread = threading.current_thread().name
        self.asked.append(undelivered)
        if self._news is not None:
            loop, news = self._news
            loop.call_soon_threadsafe(news.set)
        if self.fail is not None:
            raise self.fail
        return State()

    async def wait_for(self, n: int) -> None:
        """Until ``n`` snapshots were taken (the deadline is the assertion)."""
        news = asyncio.Event()
        self._news = (asyncio.get_running_loop(), news)
        async with asyncio.timeout(DEADLINE):
            while len(self.asked) < n:
                news.clear()
                await news.wait()


def saver(tmp_path: Path, snapshots: Snapshots, pool: ThreadPoolExecutor) -> Saver:
    return Saver(Store(tmp_path / "state"), snapshots, pool)


def test_a_finished_run_stays_open_in_the_state_until_every_sink_took_it(tmp_path: Path) -> None:
    snapshots = Snapshots()
    a, b, log_only = finished("/t/a.jsonl", generation=2), finished("/t/b.jsonl"), finished("", key="logkey")

    async def body(s: Saver) -> None:
        s.handed([RunStarted(Source("/t/c.jsonl"), None), a, b, log_only])
        await s.save()
        s.taken(a)
        s.taken(log_only)
        await s.save()

    with ThreadPoolExecutor(1, thread_name_prefix="test-reader") as pool:
        s = saver(tmp_path, snapshots, pool)
        asyncio.run(body(s))
    assert snapshots.asked == [frozenset({("/t/a.jsonl", 2), ("/t/b.jsonl", 0), ("logkey", 0)}),
                               frozenset({("/t/b.jsonl", 0)})]
    assert snapshots.thread.startswith("test-reader")  # the tailer is the reader thread's
    assert s.store.path.is_file()


def test_the_saver_task_saves_soon_after_a_take_and_ends_when_told(tmp_path: Path) -> None:
    snapshots = Snapshots()

    async def body(s: Saver) -> None:
        done = asyncio.Event()
        task = asyncio.create_task(s.run(done))
        s.handed([finished("/t/a.jsonl")])
        s.taken(finished("/t/a.jsonl"))
        await snapshots.wait_for(1)  # nobody called save(): the task did
        done.set()
        async with asyncio.timeout(DEADLINE):
            await task

    with ThreadPoolExecutor(1) as pool:
        asyncio.run(body(saver(tmp_path, snapshots, pool)))
    assert snapshots.asked == [frozenset()]


def test_a_failed_save_is_logged_not_raised(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    snapshots = Snapshots(OSError(5, "Input/output error"))
    with ThreadPoolExecutor(1) as pool, caplog.at_level(logging.ERROR):
        asyncio.run(saver(tmp_path, snapshots, pool).save())
    assert f"cannot save state in {tmp_path / 'state'}: [Errno 5] Input/output error" in caplog.text
