"""The asyncio wiring of ``ringtrace watch``: one task group, a byte-bounded hand-off, signals, shutdown.

Tasks (all in one :class:`asyncio.TaskGroup`):

* ``watcher``: file-system events (watchfiles/inotify) -> a set of dirty paths + a wake-up;
  watchfiles' polling watcher with ``--poll`` or when events are unavailable;
* ``reader``: asks the synchronous :class:`Tailer` which file is due and reads it one slice
  (``follower.SLICE`` bytes, ``SUMMARY_SLICE`` when no sink takes records) at a time with aiofiles;
  decoding and pairing a slice run in a worker thread.  Paths the watcher reported jump the
  backlog between two slices; ticks finish idle runs, rescans catch lost events;
* ``sinks``: takes event batches off the queue and submits them to the :class:`FanOut`, where
  every sink has its own queue and worker thread (a sink that blocks stops only itself: it is
  found stuck and loses events, see :mod:`ringtrace.sinks`); at the end, the sinks' shutdown;
* ``settler``: what the sinks' workers report back (a batch no sink holds any more frees its
  share of the in-flight bound; a RunFinished every sink took counts as delivered for the state);
* ``watchdog``: every tick, stuck sinks are found and shed (so they stop holding the reader);
* ``hangups``: SIGHUP reopens the sinks' outputs (``reopen()``) and calls ``on_hangup`` (the
  service re-reads the web config);
* ``saver`` (with ``--state-dir``).

Memory is bounded by :class:`InFlight`: the input bytes behind every batch read but not yet
delivered by every sink that is not stuck, the slice being read included, never exceed
``IN_FLIGHT_BYTES`` + one slice (a stuck sink keeps at most ``sinks.FINISHED_KEPT`` RunFinished
events besides).  The reader waits for room before it reads (back-pressure), whatever the
backlog or file size.

``stop()`` (SIGINT/SIGTERM) ends reading after the current slice, finishes open runs with
reason ``shutdown``, and flushes and closes every sink behind its queue: the whole shutdown
takes at most ``shutdown_seconds`` (:data:`SHUTDOWN_SECONDS`, the one budget) from the signal;
sinks get all of it but :data:`SHUTDOWN_RESERVE` (each sink's ``flush(deadline)`` gets that deadline
less :data:`ringtrace.sinks.FLUSH_MARGIN`), and a sink still blocked then is abandoned.  Time comes from the
injected ``clock`` (monotonic) and ``wall`` (for ``seen_at``).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import signal
import time
from collections.abc import Awaitable, Callable, Mapping
from concurrent.futures import ThreadPoolExecutor
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING, TypeVar

import aiofiles

from ringtrace.config import Config
from ringtrace.model.records import RunFinished, SinkEvent, Wants
from ringtrace.reading.tail import state as state_mod
from ringtrace.reading.tail.follower import SETTLE, SLICE, Follower, Slice
from ringtrace.reading.tail.hostlogs import HostLogFinder
from ringtrace.reading.tail.inotify import TreeWatcher
from ringtrace.reading.tail.tailer import Tailer
from ringtrace.sinks import STUCK_SECONDS, FanOut
from ringtrace.sources.paths import HOST_LOG_NAME

if TYPE_CHECKING:
    from collections.abc import Iterator

    from prometheus_client.core import Metric
    from prometheus_client.registry import Collector

log = logging.getLogger("ringtrace.reading.app")
_T = TypeVar("_T")

SHUTDOWN_SECONDS = 4.5
"""The shutdown budget: from SIGTERM/SIGINT (or the end of ``--once``'s reading) to the exit."""
SHUTDOWN_RESERVE = 0.5
"""The end of the budget kept from the sinks: the last state save and closing the metrics server."""
IN_FLIGHT_BYTES = 4 * SLICE
"""Input bytes whose events may wait for the sinks (plus the slice being read)."""
EVENT_WEIGHT = 1024
"""What one event counts for in the in-flight bound besides the bytes it came from."""
TICK_SECONDS = 0.5
SAVE_SECONDS = 0.2


class InFlight:
    """Bytes handed on but not yet delivered.  ``acquire`` waits while adding would pass ``limit``
    (an empty budget always admits one item, so an item larger than the limit cannot deadlock)."""

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self.level = 0
        self.peak = 0
        self._room = asyncio.Condition()

    async def acquire(self, n: int) -> None:
        async with self._room:
            await self._room.wait_for(lambda: self.level == 0 or self.level + n <= self.limit)
            self.level += n
            self.peak = max(self.peak, self.level)

    def add(self, n: int) -> None:
        """Count ``n`` more without waiting (the events of a slice whose bytes are already held)."""
        self.level += n
        self.peak = max(self.peak, self.level)

    async def release(self, n: int) -> None:
        async with self._room:
            self.level -= n
            self._room.notify_all()


def _run_id(fin: RunFinished) -> tuple[str, int]:
    """How the state names a finished run until the sinks took it: (path, generation); (key, 0) for a
    run known from its host log alone (no path)."""
    return (fin.source.path or fin.key, fin.source.generation)


def _nonblocking(path: str, flags: int) -> int:
    """Open without blocking: a FIFO named like a scope_stats file must not hang the reader."""
    return os.open(path, flags | os.O_NONBLOCK)


class App:
    """One watch process.  Construct, then ``await run()``; ``stop()`` may be called from the loop."""

    tree: TreeWatcher | None = None
    """The inotify watcher while one runs (its counts stay readable after it stops)."""
    _rewatch_due = False  # the watcher walks the whole tree again before it waits for the next event

    def __init__(self, cfg: Config, roots: list[str], fanout: FanOut, *,
                 clock: Callable[[], float] = time.monotonic, wall: Callable[[], float] = time.time,
                 on_batch: Callable[[list[SinkEvent]], None] | None = None,
                 in_flight_bytes: int = IN_FLIGHT_BYTES, wants: Wants | None = None,
                 shutdown_seconds: float = SHUTDOWN_SECONDS, stuck_seconds: float = STUCK_SECONDS,
                 on_hangup: Callable[[], Awaitable[object]] | None = None) -> None:
        self.cfg = cfg
        self.fanout = fanout
        self.clock = clock
        self.wall = wall
        self.on_batch = on_batch  # sees every batch as it is submitted to the sinks
        self.shutdown_seconds = shutdown_seconds
        self.stuck_seconds = stuck_seconds
        self.on_hangup = on_hangup  # awaited after the sinks' reopen on SIGHUP
        self.state_dir = Path(cfg.state_dir) if cfg.state_dir else None
        self.store = state_mod.Store(self.state_dir) if self.state_dir is not None else None
        saved = self.store.load() if self.store is not None else None  # an unusable state file is moved aside
        # ``wants``: what RunProgress carries; by default what the sinks read (an ``on_batch`` observer may want more)
        glob = cfg.host_log_glob  # default: a run folder's logs, as summary finds them
        self.tailer = Tailer(roots, cfg.thresholds, cfg.idle_timeout, saved, wants or fanout.wants,
                             HostLogFinder(glob), (glob or HOST_LOG_NAME) if "/" not in glob else "",
                             settle=0.0 if cfg.once else SETTLE)
        self.ready = False
        self._ready_or_done = asyncio.Event()  # set when ready becomes True, and when reading ends
        self.polling = cfg.poll
        self.in_flight = InFlight(in_flight_bytes)
        self._dirty: set[str] = set()
        self._wake = asyncio.Event()
        self._stopping = asyncio.Event()
        self._queue: asyncio.Queue[tuple[list[SinkEvent], int] | None] = asyncio.Queue()
        self._watch_points: list[tuple[Path, bool]] = []
        self._watch_changed = asyncio.Event()
        self._rescan_now = False
        self._watching = asyncio.Event()  # the watcher has set up the current watch points
        self._undelivered: set[tuple[str, int]] = set()  # finished runs queued but not yet taken by the sinks
        self._save_soon = asyncio.Event()
        self._sinks_done = asyncio.Event()
        # from the sinks' workers: ("settled", weight) / ("taken", RunFinished); None ends the settler
        self._reports: asyncio.Queue[tuple[str, object] | None] = asyncio.Queue()
        self._settled_all = asyncio.Event()
        self._hup = asyncio.Event()
        self._deadline: float | None = None  # the clock's time the shutdown budget ends
        # One thread reads and decodes: work stays on the same thread (fewer malloc arenas holding
        # freed slices than a pool of six) and in order.  Each sink has its own worker (FanOut.start);
        # this thread only waits for their shutdown.
        self._reader_pool = ThreadPoolExecutor(1, thread_name_prefix="ringtrace-reader")
        self._sink_pool = ThreadPoolExecutor(1, thread_name_prefix="ringtrace-sinks")

    async def _on_reader(self, fn: Callable[..., _T], *args: object) -> _T:
        return await asyncio.get_running_loop().run_in_executor(self._reader_pool, fn, *args)

    async def _on_sinks(self, fn: Callable[..., _T], *args: object) -> _T:
        return await asyncio.get_running_loop().run_in_executor(self._sink_pool, fn, *args)

    def stop(self) -> None:
        """Begin the shutdown (idempotent): the budget of ``shutdown_seconds`` starts at the first call."""
        self.ready = False  # /readyz says 503 from the signal on
        if self._deadline is None:
            self._deadline = self.clock() + self.shutdown_seconds
        self.fanout.hurry()  # a sink idle for a second now is stuck: it must not hold the last slice back
        self._stopping.set()
        self._wake.set()

    async def wait_ready(self) -> bool:
        """Wait (in the app's loop, while ``run()`` runs) until the watch runs; False when reading ended first."""
        await self._ready_or_done.wait()
        return self.ready

    def hangup(self) -> None:
        """SIGHUP: reopen the sinks' outputs and call ``on_hangup`` (in the ``hangups`` task)."""
        self._hup.set()

    def readiness(self) -> tuple[bool, str]:
        """For /readyz: ready once the watch runs, until the stop; not while a sink is stuck (its name given)."""
        if not self.ready:
            return False, ""
        stuck = self.fanout.stuck(self.clock())
        if stuck:
            return False, "; ".join(f"sink {name} stuck: it has taken nothing for {idle:.0f}s"
                                    for name, idle in stuck)
        return True, ""

    async def run(self) -> int:
        loop = asyncio.get_running_loop()
        handlers = {signal.SIGINT: self.stop, signal.SIGTERM: self.stop, signal.SIGHUP: self.hangup}
        before = {}
        for sig, handler in handlers.items():
            with contextlib.suppress(NotImplementedError, RuntimeError, ValueError):
                previous = signal.getsignal(sig)
                loop.add_signal_handler(sig, handler)
                before[sig] = previous

        def report(kind: str, what: object) -> None:  # on a sink's worker thread
            loop.call_soon_threadsafe(self._reports.put_nowait, (kind, what))

        self.fanout.start(clock=self.clock, settled=partial(report, "settled"), taken=partial(report, "taken"),
                          stuck_after=self.stuck_seconds)
        try:
            async with asyncio.TaskGroup() as tg:
                tg.create_task(self._sinks(), name="sinks")
                tg.create_task(self._settler(), name="settler")
                tg.create_task(self._watchdog(), name="watchdog")
                tg.create_task(self._hangups(), name="hangups")
                if self.state_dir is not None:
                    tg.create_task(self._saver(), name="saver")
                reader = tg.create_task(self._reader(), name="reader")
                if not self.cfg.once:
                    watcher = tg.create_task(self._watcher(), name="watcher")
                    await reader
                    watcher.cancel()
        finally:
            for sig, previous in before.items():  # what was there before (the CLI's start-up handlers)
                with contextlib.suppress(NotImplementedError, RuntimeError, ValueError, TypeError):
                    loop.remove_signal_handler(sig)
                    signal.signal(sig, previous)
            self._reader_pool.shutdown(wait=False)
            self._sink_pool.shutdown(wait=False)
        return 0

    # -- reader ---------------------------------------------------------------------------

    async def _emit(self, events: list[SinkEvent], acquired: int = 0) -> None:
        """Queue ``events``; ``acquired`` bytes of the budget are already held for them."""
        weight = EVENT_WEIGHT * len(events)
        for e in events:
            if type(e) is RunFinished:
                self._undelivered.add(_run_id(e))
        if events:
            if acquired:
                self.in_flight.add(weight)
            else:
                await self.in_flight.acquire(weight)
            await self._queue.put((events, acquired + weight))
        elif acquired:
            await self.in_flight.release(acquired)

    async def _call(self, fn: Callable[..., list[SinkEvent]], *args: object) -> None:
        await self._emit(await self._on_reader(fn, *args))

    async def _reader(self) -> None:
        tailer = self.tailer
        try:
            await self._call(tailer.discover, self.clock(), self.wall())
            await self._update_watch_points()
            if not self.cfg.once:  # ready once the watch runs: a file written from now on sends an event
                with contextlib.suppress(TimeoutError):
                    async with asyncio.timeout(10):
                        await self._wait_any(self._watching, self._stopping)
                self.ready = True
                self._ready_or_done.set()
            next_rescan = self.clock() + self.cfg.rescan_interval
            while not self._stopping.is_set():
                await self._drain()
                if self.cfg.once or self._stopping.is_set():
                    break
                tick = min(TICK_SECONDS, self.cfg.poll_interval) if self.polling else TICK_SECONDS
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(self._wake.wait(), tick)
                self._wake.clear()
                if self._stopping.is_set():
                    break
                now = self.clock()
                await self._take_dirty()
                if self.polling:
                    await self._on_reader(tailer.poll_active)
                if now >= next_rescan or self._rescan_now:
                    self._rescan_now = False
                    next_rescan = now + self.cfg.rescan_interval
                    await self._call(tailer.discover, now, self.wall())
                    await self._update_watch_points()
                    await self._save_state()
                await self._call(tailer.tick, self.clock())
            if self.cfg.once:
                await self._call(tailer.finish_all, "eof")
                await self._call(tailer.log_only_runs, self.clock(), True)
            elif self.state_dir is None:  # no later run: what was read is reported, as ``shutdown``
                await self._call(tailer.finish_all, "shutdown")
            # with --state-dir an open run is read whole after the restart: no partial is emitted now
        finally:
            self.ready = False
            self._ready_or_done.set()
            await self._queue.put(None)  # the sink worker saves the state once everything is delivered

    async def _take_dirty(self) -> None:
        """Hand the paths the watcher reported to the tailer, on the reader thread (lstat, walks of new
        directories)."""
        if self._dirty:
            dirty, self._dirty = self._dirty, set()
            await self._on_reader(self.tailer.changed, dirty)

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
            async with aiofiles.open(f.path, "rb", buffering=0, opener=_nonblocking, executor=self._reader_pool) as fh:
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
        """After a scan: the directories to watch (computed on the reader thread: it stats the roots).
        At the watch limit the watcher also walks the tree again, for watches freed meanwhile."""
        points = await self._on_reader(self.tailer.watch_points)
        if points != self._watch_points:
            self._watch_points = points
            self._watching.clear()
            self._watch_changed.set()
        if self.tree is not None and self.tree.degraded:
            self._rewatch_due = True
            self._watch_changed.set()

    def watch_counts(self) -> dict[str, int]:
        """The file-system watcher's counts for the metrics (empty when polling): called by the metrics
        render thread (plain ints)."""
        tree = self.tree
        if tree is None:
            return {}
        return {"inotify_watches": tree.watched, "inotify_unwatched": tree.unwatched,
                "inotify_rewatched": tree.rewatched, "inotify_overflows": tree.overflows}

    def watch_collector(self) -> Collector:
        """:meth:`watch_counts` as :func:`watch_families` (none while polling) and the reader's anomalies as
        :func:`reader_families`, read at each scrape (for the Prometheus sink's ``register``)."""
        from prometheus_client.registry import Collector as Base

        counts, inodes = self.watch_counts, self.tailer.inodes

        class WatchCollector(Base):
            def collect(self) -> Iterator[Metric]:
                c = counts()
                if c:
                    yield from watch_families(c)
                yield from reader_families(inodes.appended)

        return WatchCollector()

    async def _saver(self) -> None:
        """Save the state soon after the sinks took a finished run (at most every SAVE_SECONDS), so a
        kill -9 re-emits at most the runs finished in that window; sinks that see them again dedupe by
        ``RunFinished.key``."""
        while True:
            await self._wait_any(self._save_soon, self._sinks_done)
            if self._sinks_done.is_set():
                return
            self._save_soon.clear()
            await self._save_state()
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(SAVE_SECONDS):
                    await self._sinks_done.wait()

    async def _save_state(self) -> None:
        """Save what a restart needs: finished runs count as finished only once the sinks took them."""
        if self.state_dir is None:
            return
        try:
            await self._on_reader(self._save_snapshot, frozenset(self._undelivered))
        except OSError as err:
            log.error("cannot save state in %s: %s", self.state_dir, err)

    def _save_snapshot(self, undelivered: frozenset[tuple[str, int]]) -> None:
        assert self.store is not None
        self.store.save(self.tailer.snapshot(undelivered))  # a failure is logged once per kind

    # -- watcher --------------------------------------------------------------------------

    async def _watcher(self) -> None:
        """File-system events (inotify, one watch per directory) over the current watch points.

        Polling (``--poll``, or when inotify is unavailable) is watchfiles' polling watcher, which
        also notices new files and directories.  A watcher that fails is logged and started again
        after the next rescan; reading goes on meanwhile (rescans find what events would have).
        The inotify watcher's directory walks run on a thread of their own (``ringtrace-watcher``), so
        neither the loop nor a long read on the reader thread holds them up.
        """
        if not self.polling:
            pool = ThreadPoolExecutor(1, thread_name_prefix="ringtrace-watcher")
            loop = asyncio.get_running_loop()

            async def offload(fn: Callable[[], _T]) -> _T:
                return await loop.run_in_executor(pool, fn)

            try:
                try:
                    tree = TreeWatcher(self._changed, self._overflow, offload)
                except OSError as err:
                    log.warning("file-system events unavailable (%s); polling every %.2fs instead", err,
                                self.cfg.poll_interval)
                    self.polling = True
                else:
                    self.tree = tree
                    try:
                        await self._inotify(tree)
                    finally:
                        tree.close()
                    return
            finally:
                pool.shutdown(wait=False)
        await self._polling()

    async def _inotify(self, tree: TreeWatcher) -> None:
        while not self._stopping.is_set():
            self._watch_changed.clear()
            await tree.set_points(list(self._watch_points))
            if self._rewatch_due:
                self._rewatch_due = False
                await tree.rewatch()
            self._watching.set()
            await tree.run(self._watch_changed, self._stopping)  # returns when the points change or on stop

    def _changed(self, path: str) -> None:
        self._dirty.add(path)
        self._wake.set()

    def _overflow(self) -> None:
        self._rescan_now = True
        self._wake.set()

    async def _polling(self) -> None:
        while not self._stopping.is_set():
            self._watch_changed.clear()
            points = list(self._watch_points)
            if not points:
                self._watching.set()
                await self._wait_any(self._watch_changed, self._stopping)
                continue
            # watchfiles sets the stop event it was given when its task is cancelled: give it its own
            round_over = asyncio.Event()
            try:
                async with asyncio.TaskGroup() as tg:
                    for recursive in (True, False):
                        dirs = [str(p) for p, rec in points if rec is recursive]
                        if dirs:
                            tg.create_task(self._poll_dirs(dirs, recursive, round_over))
                    self._watching.set()
                    await self._wait_any(self._watch_changed, self._stopping)
                    round_over.set()  # ends this round's watch loops; the next round watches the new points
            except* Exception as group:  # a name that is not UTF-8, a directory it may not read...
                log.warning("polling watcher failed (%s); relying on rescans until the next one, then polling again",
                            group.exceptions[0])
                with contextlib.suppress(TimeoutError):
                    async with asyncio.timeout(self.cfg.rescan_interval):
                        await self._wait_any(self._watch_changed, self._stopping)

    async def _poll_dirs(self, dirs: list[str], recursive: bool, stop: asyncio.Event) -> None:
        import watchfiles  # --poll only

        async for changes in watchfiles.awatch(*dirs, recursive=recursive, debounce=50, step=10,
                                               watch_filter=None, stop_event=stop, force_polling=True,
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
        """Submit each batch to the sinks' outlets (never waits for a sink); at the end, their shutdown."""
        while True:
            item = await self._queue.get()
            if item is None:
                break
            batch, weight = item
            self.fanout.submit(batch, weight)  # the weight is released when no sink holds the batch any more
            if self.on_batch is not None:
                self.on_batch(batch)
        if self._deadline is None:  # --once, or the reader ended by itself: the budget starts now
            self._deadline = self.clock() + self.shutdown_seconds
        self.fanout.hurry()
        await self._on_sinks(self.fanout.shutdown, self._deadline - SHUTDOWN_RESERVE)
        self._reports.put_nowait(None)  # after every report the workers sent until now
        await self._settled_all.wait()
        await self._save_state()  # every finish all the sinks took is remembered
        self._sinks_done.set()

    async def _settler(self) -> None:
        """What the sinks' workers report: a settled batch frees its in-flight bytes; a run every sink
        took counts as delivered (the saver saves it soon)."""
        while (item := await self._reports.get()) is not None:
            kind, what = item
            if kind == "settled":
                assert isinstance(what, int)
                await self.in_flight.release(what)
            elif isinstance(what, RunFinished):
                self._undelivered.discard(_run_id(what))
                self._save_soon.set()
        self._settled_all.set()

    async def _watchdog(self) -> None:
        """Every tick: find stuck sinks and shed what they hold (nothing else wakes them while the reader waits)."""
        while not self._sinks_done.is_set():
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(TICK_SECONDS):
                    await self._sinks_done.wait()
            self.fanout.check(self.clock())

    async def _hangups(self) -> None:
        """SIGHUP: the sinks reopen their outputs (queued behind their events), then ``on_hangup``."""
        while True:
            await self._wait_any(self._hup, self._sinks_done)
            if self._sinks_done.is_set() or self._stopping.is_set():
                return
            self._hup.clear()
            n = self.fanout.reopen()
            log.info("SIGHUP: %d output(s) to reopen", n)
            if self.on_hangup is not None:
                try:
                    await self.on_hangup()
                except Exception as err:
                    log.error("SIGHUP: %s", err)


def reader_families(appended: int) -> list[Metric]:
    """``ringtrace_runs_appended_after_finish_total``: finished runs whose file grew afterwards.  Pure."""
    from prometheus_client.core import CounterMetricFamily

    return [CounterMetricFamily("ringtrace_runs_appended_after_finish", "Finished runs whose file received more "
                                "bytes afterwards (an anomaly: the runtime writes a file once); each is read again "
                                "and its figures updated where a sink can, and the events file writes it once.",
                                value=appended)]


def watch_families(counts: Mapping[str, int]) -> list[Metric]:
    """The file-system watcher's figures (:meth:`App.watch_counts`) as Prometheus families:
    ``ringtrace_inotify_watches``, ``ringtrace_inotify_unwatched_directories``,
    ``ringtrace_inotify_rewatched_total``, ``ringtrace_inotify_overflows_total``.  Pure."""
    from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily

    return [
        GaugeMetricFamily("ringtrace_inotify_watches", "Directories with an inotify watch right now.",
                          value=counts["inotify_watches"]),
        GaugeMetricFamily("ringtrace_inotify_unwatched_directories", "Directories the watcher found but could "
                          "not watch (the watch limit, permissions): changes there are seen at rescans only.",
                          value=counts["inotify_unwatched"]),
        CounterMetricFamily("ringtrace_inotify_rewatched", "Directories without a watch that got one from a walk "
                            "of the whole tree: after an inotify queue overflow (which lost their creation), and "
                            "at rescans while at the watch limit.", value=counts["inotify_rewatched"]),
        CounterMetricFamily("ringtrace_inotify_overflows", "inotify queue overflows (events lost; the tree is "
                            "walked again and rescanned).", value=counts["inotify_overflows"]),
    ]
