"""The asyncio wiring of ``ringtrace watch``: one task group, bounded queues, signals, shutdown.

Tasks (all in one :class:`asyncio.TaskGroup`):

* ``watcher``: file-system events (watchfiles/inotify) -> a set of dirty paths + a wake-up;
  watchfiles' polling watcher with ``--poll`` or when events are unavailable;
* ``reader``: on each wake-up or tick, runs the synchronous :class:`Tailer` in a worker
  thread (file reads never block the loop) and puts the sink events on a bounded queue;
  ticks finish idle runs, rescans catch lost events;
* ``sinks``: takes event batches off the queue and hands them to the :class:`FanOut` in a
  worker thread.  A full queue makes the reader wait (back-pressure, bounded memory).

``stop()`` (SIGINT/SIGTERM) ends reading, finishes open runs with reason ``shutdown``,
drains the queue, flushes and closes every sink, within ``SHUTDOWN_SECONDS``.
Time comes from the injected ``clock`` (monotonic) and ``wall`` (for ``seen_at``).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import signal
import time
from collections.abc import Callable
from pathlib import Path

import watchfiles

from ringtrace.config import Config
from ringtrace.records import SinkEvent
from ringtrace.sinks import FanOut
from ringtrace.tail import state as state_mod
from ringtrace.tail.tailer import Tailer

log = logging.getLogger("ringtrace.app")

SHUTDOWN_SECONDS = 4.5
QUEUE_BATCHES = 64
TICK_SECONDS = 0.5


class App:
    """One watch process.  Construct, then ``await run()``; ``stop()`` may be called from the loop."""

    def __init__(self, cfg: Config, roots: list[str], fanout: FanOut, *,
                 clock: Callable[[], float] = time.monotonic, wall: Callable[[], float] = time.time,
                 on_batch: Callable[[list[SinkEvent]], None] | None = None) -> None:
        self.cfg = cfg
        self.fanout = fanout
        self.clock = clock
        self.wall = wall
        self.on_batch = on_batch
        self.state_dir = Path(cfg.state_dir) if cfg.state_dir else None
        saved = None
        if self.state_dir is not None:
            saved, warning = state_mod.load(self.state_dir)
            if warning:
                log.warning("%s", warning)
        self.tailer = Tailer(roots, cfg.thresholds, cfg.idle_timeout, saved)
        self.ready = False
        self.polling = cfg.poll
        self._dirty: set[str] = set()
        self._wake = asyncio.Event()
        self._stopping = asyncio.Event()
        self._queue: asyncio.Queue[list[SinkEvent] | None] = asyncio.Queue(QUEUE_BATCHES)
        self._watch_points: list[tuple[Path, bool]] = []
        self._watch_changed = asyncio.Event()

    def stop(self) -> None:
        self._stopping.set()
        self._wake.set()

    async def run(self) -> int:
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGINT, signal.SIGTERM):
            with contextlib.suppress(NotImplementedError, RuntimeError):
                loop.add_signal_handler(sig, self.stop)
        try:
            async with asyncio.TaskGroup() as tg:
                tg.create_task(self._sinks(), name="sinks")
                reader = tg.create_task(self._reader(), name="reader")
                if not self.cfg.once:
                    watcher = tg.create_task(self._watcher(), name="watcher")
                    await reader
                    watcher.cancel()
        finally:
            for sig in (signal.SIGINT, signal.SIGTERM):
                with contextlib.suppress(NotImplementedError, RuntimeError):
                    loop.remove_signal_handler(sig)
        return 0

    # -- reader ---------------------------------------------------------------------------

    async def _emit(self, events: list[SinkEvent]) -> None:
        if events:
            await self._queue.put(events)

    async def _call(self, fn: Callable[..., list[SinkEvent]], *args: object) -> None:
        await self._emit(await asyncio.to_thread(fn, *args))

    async def _reader(self) -> None:
        tailer = self.tailer
        try:
            await self._call(tailer.rescan, self.clock(), self.wall())
            self._update_watch_points()
            if self.cfg.once:
                await self._call(tailer.finish_all, "eof")
                return
            self.ready = True
            next_rescan = self.clock() + self.cfg.rescan_interval
            while not self._stopping.is_set():
                tick = min(TICK_SECONDS, self.cfg.poll_interval) if self.polling else TICK_SECONDS
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(self._wake.wait(), tick)
                self._wake.clear()
                if self._stopping.is_set():
                    break
                now = self.clock()
                if self._dirty:
                    dirty, self._dirty = self._dirty, set()
                    await self._call(tailer.changed, dirty, now, self.wall())
                if self.polling:
                    await self._call(tailer.poll_active, now, self.wall())
                if now >= next_rescan:
                    next_rescan = now + self.cfg.rescan_interval
                    await self._call(tailer.rescan, now, self.wall())
                    self._update_watch_points()
                    await self._save_state()
                await self._call(tailer.tick, self.clock())
            await self._call(tailer.finish_all, "shutdown")
        finally:
            self.ready = False
            await self._save_state()
            await self._queue.put(None)

    def _update_watch_points(self) -> None:
        points = self.tailer.watch_points()
        if points != self._watch_points:
            self._watch_points = points
            self._watch_changed.set()

    async def _save_state(self) -> None:
        if self.state_dir is None:
            return
        try:
            await asyncio.to_thread(state_mod.save, self.state_dir, self.tailer.snapshot())
        except OSError as err:
            log.error("cannot save state in %s: %s", self.state_dir, err)

    # -- watcher --------------------------------------------------------------------------

    async def _watcher(self) -> None:
        """Run watchfiles over the current watch points; restart when they change.

        Polling (``--poll``, or after events failed) is watchfiles' own polling watcher, which
        also notices new files and directories.
        """
        while not self._stopping.is_set():
            self._watch_changed.clear()
            points = list(self._watch_points)
            if not points:
                await self._wait_any(self._watch_changed, self._stopping)
                continue
            # watchfiles sets the stop event it was given when its task is cancelled: give it its own
            round_over = asyncio.Event()
            try:
                async with asyncio.TaskGroup() as tg:
                    for recursive in (True, False):
                        dirs = [str(p) for p, rec in points if rec is recursive]
                        if dirs:
                            tg.create_task(self._watch(dirs, recursive, round_over))
                    await self._wait_any(self._watch_changed, self._stopping)
                    round_over.set()  # ends this round's watch loops; the next round watches the new points
            except* Exception as group:
                if self.polling:
                    raise
                log.warning("file-system events unavailable (%s); polling every %.2fs instead",
                            group.exceptions[0], self.cfg.poll_interval)
                self.polling = True

    async def _watch(self, dirs: list[str], recursive: bool, stop: asyncio.Event) -> None:
        async for changes in watchfiles.awatch(*dirs, recursive=recursive, debounce=50, step=10,
                                               watch_filter=None, stop_event=stop,
                                               force_polling=self.polling,
                                               poll_delay_ms=max(1, int(1000 * self.cfg.poll_interval))):
            for _change, path in changes:
                self._dirty.add(path)
            self._wake.set()

    @staticmethod
    async def _wait_any(*events: asyncio.Event) -> None:
        waits = [asyncio.ensure_future(e.wait()) for e in events]
        try:
            await asyncio.wait(waits, return_when=asyncio.FIRST_COMPLETED)
        finally:
            for w in waits:
                w.cancel()

    # -- sinks ----------------------------------------------------------------------------

    async def _sinks(self) -> None:
        while True:
            batch = await self._queue.get()
            if batch is None:
                break
            await asyncio.to_thread(self.fanout.receive_all, batch)
            if self.on_batch is not None:
                self.on_batch(batch)
        try:
            async with asyncio.timeout(SHUTDOWN_SECONDS):
                await asyncio.to_thread(self.fanout.flush)
        except TimeoutError:
            log.error("sinks did not flush within %.1fs; exiting anyway", SHUTDOWN_SECONDS)
        await asyncio.to_thread(self.fanout.close)

