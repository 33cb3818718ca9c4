"""TreeWatcher in-process over a real inotify instance: the walk after a queue overflow gives back
the watches whose creation events were lost, and a renamed directory is watched under its new name.

The overflow is injected through the watcher's own handler (a real overflow from a real process is
in ``test_watch_recovery.py``).  Waits are conditions with deadlines; the deadline is the assertion."""

from __future__ import annotations

import asyncio
import contextlib
import os
import time
from collections.abc import Awaitable, Callable
from pathlib import Path

from asyncinotify import Event, Mask

from ringtrace.reading.tail.inotify import TreeWatcher


class Seen:
    """What the watcher reported, with a way to wait for a path."""

    def __init__(self) -> None:
        self.changes: list[str] = []
        self.overflows = 0
        self.news = asyncio.Event()

    def change(self, path: str) -> None:
        self.changes.append(path)
        self.news.set()

    def overflow(self) -> None:
        self.overflows += 1

    async def wait_for(self, cond: Callable[[], bool], timeout: float, what: str) -> None:
        deadline = time.monotonic() + timeout
        while not cond():
            left = deadline - time.monotonic()
            assert left > 0, f"not within {timeout}s: {what}"
            self.news.clear()
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self.news.wait(), left)


def dirs_below(root: Path) -> int:
    return 1 + sum(len(dirs) for _, dirs, _ in os.walk(root))


def running(tree: TreeWatcher, body: Callable[[], Awaitable[None]]) -> None:
    """Run the watcher's event loop around ``body``."""

    async def main() -> None:
        stop = asyncio.Event()
        task = asyncio.create_task(tree.run(stop))
        try:
            await body()
        finally:
            stop.set()
            await task
            tree.close()

    asyncio.run(main())


def test_an_overflow_gives_back_every_lost_watch(tmp_path: Path) -> None:
    root = tmp_path / "tree"
    (root / "old" / "scope_stats").mkdir(parents=True)
    seen = Seen()

    async def body() -> None:
        tree = TreeWatcher(seen.change, seen.overflow)
        await tree.set_points([(root, True)])
        assert tree.watched == 3
        # directories created while nothing reads the queue: their events are the ones an overflow loses
        for i in range(50):
            (root / f"run{i:02d}" / "scope_stats").mkdir(parents=True)
        await tree.handle(Event(None, Mask.Q_OVERFLOW, 0, None))
        assert (tree.rewatched, tree.overflows, seen.overflows) == (100, 1, 1)
        assert tree.watched == dirs_below(root) == 103 and tree.unwatched == 0
        await tree.handle(Event(None, Mask.Q_OVERFLOW, 0, None))  # nothing missing now: nothing added
        assert tree.rewatched == 100 and tree.watched == 103

        async def events() -> None:
            target = root / "run49" / "scope_stats" / "scope_stats.jsonl"
            target.write_bytes(b"{}\n")
            await seen.wait_for(lambda: str(target) in seen.changes, 1.0, "the write in a rewatched directory")

        stop = asyncio.Event()
        task = asyncio.create_task(tree.run(stop))
        try:
            await events()
        finally:
            stop.set()
            await task
            tree.close()

    asyncio.run(body())


def test_a_renamed_directory_is_watched_under_its_new_name(tmp_path: Path) -> None:
    root = tmp_path / "tree"
    root.mkdir()
    seen = Seen()
    tree = TreeWatcher(seen.change, seen.overflow)
    asyncio.run(tree.set_points([(root, True)]))  # a fresh loop below: the watcher is not bound to one

    async def body() -> None:
        (root / "run_a" / "scope_stats").mkdir(parents=True)
        await seen.wait_for(lambda: tree.watched == 3, 1.0, "run_a and its scope_stats folder watched")
        (root / "run_a").rename(root / "run_b")
        await seen.wait_for(lambda: str(root / "run_b") in seen.changes, 1.0, "the new name reported")
        await seen.wait_for(lambda: tree.watched == 3, 1.0, "the watches moved with it")
        f = root / "run_b" / "scope_stats" / "scope_stats.jsonl"
        f.write_bytes(b"{}\n")
        await seen.wait_for(lambda: str(f) in seen.changes, 1.0, "a write under the new name, named so")
        # the old name is free again: a new run_a is a directory of its own
        (root / "run_a" / "scope_stats").mkdir(parents=True)
        g = root / "run_a" / "scope_stats" / "scope_stats.jsonl"
        await seen.wait_for(lambda: tree.watched == 5, 1.0, "the new run_a watched")
        g.write_bytes(b"{}\n")
        await seen.wait_for(lambda: str(g) in seen.changes, 1.0, "a write in the new run_a")
        assert not any(c.startswith(str(root / "run_a" / "scope_stats" / "scope_stats.jsonl")) and c != str(g)
                       for c in seen.changes)
        # moved out of the tree: its watches are dropped
        (root / "run_b").rename(tmp_path / "elsewhere")
        await seen.wait_for(lambda: tree.watched == 3, 1.0, "run_b's watches dropped")
        before = len(seen.changes)
        (tmp_path / "elsewhere" / "scope_stats" / "x").write_bytes(b"")
        (root / "run_a" / "probe").write_bytes(b"")
        await seen.wait_for(lambda: str(root / "run_a" / "probe") in seen.changes, 1.0, "the probe")
        assert not any("elsewhere" in c or c.startswith(str(root / "run_b")) for c in seen.changes[before:])

    running(tree, body)
