"""The app's ``reader`` task: asks the synchronous :class:`Tailer` which file is due and reads it one
slice (``follower.SLICE`` bytes, ``SUMMARY_SLICE`` when no sink takes records) at a time with aiofiles.

Contract: the events go on ``queue`` in batches, each with its weight in the in-flight bound (the input
bytes it came from plus :data:`EVENT_WEIGHT` per event); the bytes are held in ``in_flight`` before they
are read, so the reader waits for room (back-pressure); None on ``queue`` ends the stream.  Paths the
watch reported jump the backlog between two slices; ticks finish idle runs, rescans catch lost events.
``ready`` is True from the moment the watch runs until reading ends or the app's stop clears it
(``ready_or_done`` is set at the first and at the end).  Whatever touches a file or the tailer runs on
``pool``, the reader thread; time comes from ``clock`` (monotonic) and ``wall``.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import TypeVar

import aiofiles

from ringtrace.config import Config
from ringtrace.model.records import SinkEvent
from ringtrace.reading.saving import Saver
from ringtrace.reading.tail.follower import Follower, Slice
from ringtrace.reading.tail.tailer import Tailer
from ringtrace.reading.waits import InFlight, wait_any
from ringtrace.reading.watching import Watch

_T = TypeVar("_T")

EVENT_WEIGHT = 1024
"""What one event counts for in the in-flight bound besides the bytes it came from."""
TICK_SECONDS = 0.5
"""How often idle runs are looked at (at most; while polling, at least every poll interval)."""


def _nonblocking(path: str, flags: int) -> int:
    """Open without blocking: a FIFO named like a scope_stats file must not hang the reader."""
    return os.open(path, flags | os.O_NONBLOCK)


class ReaderTask:
    """The reading of one app; ``run()`` is its task, until ``stopping`` is set (``--once``: until all is read).
    With a ``saver``, open runs are left for the restart at the stop; without one they finish as ``shutdown``."""

    def __init__(self, tailer: Tailer, watch: Watch, in_flight: InFlight, pool: ThreadPoolExecutor,
                 saver: Saver | None, cfg: Config, *, clock: Callable[[], float], wall: Callable[[], float],
                 stopping: asyncio.Event, wake: asyncio.Event) -> None:
        self.tailer = tailer
        self.watch = watch
        self.in_flight = in_flight
        self.saver = saver
        self.cfg = cfg
        self.clock = clock
        self.wall = wall
        self.queue: asyncio.Queue[tuple[list[SinkEvent], int] | None] = asyncio.Queue()
        self.ready = False
        self.ready_or_done = asyncio.Event()  # set when ready becomes True, and when reading ends
        self._pool = pool
        self._stopping = stopping
        self._wake = wake  # set by the watch (changes), and by the stop

    async def _on_reader(self, fn: Callable[..., _T], *args: object) -> _T:
        return await asyncio.get_running_loop().run_in_executor(self._pool, fn, *args)

    async def _emit(self, events: list[SinkEvent], acquired: int = 0) -> None:
        """Queue ``events``; ``acquired`` bytes of the budget are already held for them."""
        weight = EVENT_WEIGHT * len(events)
        if self.saver is not None:
            self.saver.handed(events)
        if events:
            if acquired:
                self.in_flight.add(weight)
            else:
                await self.in_flight.acquire(weight)
            await self.queue.put((events, acquired + weight))
        elif acquired:
            await self.in_flight.release(acquired)

    async def _call(self, fn: Callable[..., list[SinkEvent]], *args: object) -> None:
        await self._emit(await self._on_reader(fn, *args))

    async def run(self) -> None:
        tailer = self.tailer
        try:
            await self._call(tailer.discover, self.clock(), self.wall())
            await self._update_watch_points()
            if not self.cfg.once:  # ready once the watch runs: a file written from now on sends an event
                with contextlib.suppress(TimeoutError):
                    async with asyncio.timeout(10):
                        await wait_any(self.watch.watching, self._stopping)
                self.ready = True
                self.ready_or_done.set()
            next_rescan = self.clock() + self.cfg.rescan_interval
            while not self._stopping.is_set():
                await self._drain()
                if self.cfg.once or self._stopping.is_set():
                    break
                tick = min(TICK_SECONDS, self.cfg.poll_interval) if self.watch.polling else TICK_SECONDS
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(self._wake.wait(), tick)
                self._wake.clear()
                if self._stopping.is_set():
                    break
                now = self.clock()
                await self._take_dirty()
                if self.watch.polling:
                    await self._on_reader(tailer.poll_active)
                if now >= next_rescan or self.watch.rescan_due:
                    self.watch.rescan_due = False
                    next_rescan = now + self.cfg.rescan_interval
                    await self._call(tailer.discover, now, self.wall())
                    await self._update_watch_points()
                    if self.saver is not None:
                        await self.saver.save()
                await self._call(tailer.tick, self.clock())
            if self.cfg.once:
                await self._call(tailer.finish_all, "eof")
                await self._call(tailer.log_only_runs, self.clock(), True)
            elif self.saver is None:  # no later run: what was read is reported, as ``shutdown``
                await self._call(tailer.finish_all, "shutdown")
            # with --state-dir an open run is read whole after the restart: no partial is emitted now
        finally:
            self.ready = False
            self.ready_or_done.set()
            await self.queue.put(None)  # the sink worker saves the state once everything is delivered

    async def _take_dirty(self) -> None:
        """Hand the paths the watch reported to the tailer, on the reader thread (lstat, walks of new
        directories)."""
        if self.watch.dirty:
            await self._on_reader(self.tailer.changed, self.watch.take_dirty())

    async def _drain(self) -> None:
        """Read every due file, a slice at a time, until none is due or the app stops."""
        tailer = self.tailer
        next_tick = self.clock() + TICK_SECONDS
        while not self._stopping.is_set():
            await self._take_dirty()  # live files jump the backlog
            due = tailer.next_due()
            if due is None:
                return
            f, urgent = due
            more = await self._read_slice(f)
            tailer.done(f, more, urgent)
            if self.clock() >= next_tick:  # a long backlog must not keep idle runs from finishing
                next_tick = self.clock() + TICK_SECONDS
                await self._call(tailer.tick, self.clock())

    async def _read_slice(self, f: Follower) -> bool:
        """Look at ``f`` once: at most one slice read; returns whether more is due.  A fault stays with the file.

        Every step that touches the file runs on the reader thread: the reads (aiofiles), and ``look``,
        ``take`` and ``vanished``, which may finish a run and so read its host log (seconds for a big one)."""
        held = 0
        try:
            async with aiofiles.open(f.path, "rb", buffering=0, opener=_nonblocking, executor=self._pool) as fh:
                st, events, want = await self._on_reader(self._look, f, fh.fileno())
                await self._emit(events)
                if want is None:
                    return False
                await self.in_flight.acquire(want.length)
                held = want.length
                head = b""
                if want.head:
                    await fh.seek(0)
                    head = await fh.read(want.head)
                await fh.seek(want.offset)
                data = await fh.read(want.length)
            events, more = await self._on_reader(f.take, want, head, data, self.clock(), st)
        except FileNotFoundError:
            await self._emit(await self._on_reader(self._vanished, f), held)
            return False
        except Exception as err:  # EIO, EACCES, a FIFO or directory in the file's place, a decoder bug...
            if held:
                await self.in_flight.release(held)
            self.tailer.fault(f, err)
            return False
        await self._emit(events, held)
        return more

    def _look(self, f: Follower, fd: int) -> tuple[os.stat_result, list[SinkEvent], Slice | None]:
        """On the reader thread: fstat the open file and ``look`` (which may end a rewritten run)."""
        st = os.fstat(fd)
        events, want = f.look(st, self.clock(), self.wall())
        return st, events, want

    def _vanished(self, f: Follower) -> list[SinkEvent]:
        """On the reader thread: ``f``'s path is gone.  When its directory is gone too (a directory
        renamed or removed) the verdict waits for the next rescan: a rename's events make the tailer
        follow the file at its new path meanwhile, so a renamed run is not ended as ``deleted``."""
        if not os.path.isdir(f.path.parent):
            return []
        return self.tailer.vanished(f)

    async def _update_watch_points(self) -> None:
        """After a scan: the directories to watch (computed on the reader thread: it stats the roots)."""
        self.watch.set_points(await self._on_reader(self.tailer.watch_points))
