"""The app's file-system watch in-process: a write under a watched directory becomes a dirty path and
a wake-up, by inotify and by polling (chosen, or when inotify is unavailable); an inotify overflow
asks for a rescan; the task ends at the stop.  Waits are conditions with deadlines."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from pathlib import Path

import pytest
from asyncinotify import Event, Mask

from ringtrace.reading import watching
from ringtrace.reading.watching import Watch

DEADLINE = 10.0
"""Against hanging only."""


async def woken_until(wake: asyncio.Event, cond: Callable[[], bool], what: str) -> None:
    """Wait on ``wake`` (the reader's wake-up) until ``cond()``; the deadline is the assertion."""
    try:
        async with asyncio.timeout(DEADLINE):
            while not cond():
                await wake.wait()
                wake.clear()
    except TimeoutError:
        raise AssertionError(f"not within {DEADLINE}s: {what}") from None


def test_new_points_are_watched_again_and_dirty_paths_are_taken_once(tmp_path: Path) -> None:
    w = Watch(asyncio.Event(), asyncio.Event(), poll=False, poll_interval=0.05, rescan_interval=600)
    w.watching.set()
    w.set_points([(tmp_path, True)])
    assert not w.watching.is_set()  # the watcher sets it once these points are watched
    w.watching.set()
    w.set_points([(tmp_path, True)])
    assert w.watching.is_set()  # the same points: nothing to do
    w.dirty.update({"/a", "/b"})
    assert w.take_dirty() == {"/a", "/b"} and w.take_dirty() == set()


@pytest.mark.parametrize("how", ["inotify", "poll", "inotify unavailable"])
def test_a_write_is_a_dirty_path_and_a_wake_up(tmp_path: Path, how: str, monkeypatch: pytest.MonkeyPatch,
                                               caplog: pytest.LogCaptureFixture) -> None:
    if how == "inotify unavailable":
        def no_inotify(*args: object) -> None:
            raise OSError(38, "Function not implemented")

        monkeypatch.setattr(watching, "TreeWatcher", no_inotify)
    target = tmp_path / "run" / "scope_stats" / "scope_stats.jsonl"
    target.parent.mkdir(parents=True)

    async def body() -> Watch:
        wake, stopping = asyncio.Event(), asyncio.Event()
        w = Watch(wake, stopping, poll=how == "poll", poll_interval=0.05, rescan_interval=600)
        w.set_points([(tmp_path, True)])
        task = asyncio.create_task(w.run())
        async with asyncio.timeout(DEADLINE):
            await w.watching.wait()
        target.write_bytes(b"{}\n")
        await woken_until(wake, lambda: str(target) in w.dirty, "the write reported")
        if w.tree is not None:  # events lost: the reader is asked to rescan
            await w.tree.handle(Event(None, Mask.Q_OVERFLOW, 0, None))
            assert w.rescan_due and wake.is_set()
        stopping.set()
        async with asyncio.timeout(DEADLINE):
            await task
        return w

    with caplog.at_level(logging.WARNING):
        w = asyncio.run(body())
    assert w.polling is (how != "inotify") and (w.tree is None) is w.polling
    assert ("file-system events unavailable" in caplog.text) is (how == "inotify unavailable")
