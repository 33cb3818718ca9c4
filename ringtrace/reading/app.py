"""The asyncio wiring of ``ringtrace watch``: one task group, a byte-bounded hand-off, signals, shutdown.

Tasks (all in one :class:`asyncio.TaskGroup`), each in its room:

* ``watcher`` (:mod:`.watching`): file-system events (inotify; watchfiles' polling watcher with
  ``--poll`` or when events are unavailable) -> a set of dirty paths + a wake-up;
* ``reader`` (:mod:`.reader_task`): asks the synchronous :class:`Tailer` which file is due and reads it
  a slice at a time with aiofiles; decoding and pairing a slice run on the reader thread;
* ``sinks``: takes event batches off the reader's queue and submits them to the :class:`FanOut`, where
  every sink has its own queue and worker thread (a sink that blocks stops only itself: it is
  found stuck and loses events, see :mod:`ringtrace.sinks`); at the end, the sinks' shutdown;
* ``settler``: what the sinks' workers report back (a batch no sink holds any more frees its
  share of the in-flight bound; a RunFinished every sink took counts as delivered for the state);
* ``watchdog``: every tick, stuck sinks are found and shed (so they stop holding the reader);
* ``hangups``: SIGHUP reopens the sinks' outputs (``reopen()``) and calls ``on_hangup`` (the
  service re-reads the web config);
* ``saver`` (:mod:`.saving`, with ``--state-dir``).

Memory is bounded by :class:`~ringtrace.reading.waits.InFlight`: the input bytes behind every batch read
but not yet delivered by every sink that is not stuck, the slice being read included, never exceed
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
import signal
import time
from collections.abc import Awaitable, Callable
from concurrent.futures import ThreadPoolExecutor
from functools import partial
from pathlib import Path
from typing import TypeVar

from ringtrace.config import Config
from ringtrace.model.records import RunFinished, SinkEvent, Wants
from ringtrace.reading.reader_task import TICK_SECONDS, ReaderTask
from ringtrace.reading.saving import Saver
from ringtrace.reading.tail.follower import SETTLE, SLICE
from ringtrace.reading.tail.hostlogs import HostLogFinder
from ringtrace.reading.tail.state import Store
from ringtrace.reading.tail.tailer import Tailer
from ringtrace.reading.waits import InFlight, wait_any
from ringtrace.reading.watching import Watch
from ringtrace.sinks import STUCK_SECONDS, FanOut
from ringtrace.sources.paths import HOST_LOG_NAME

log = logging.getLogger("ringtrace.reading.app")
_T = TypeVar("_T")

SHUTDOWN_SECONDS = 4.5
"""The shutdown budget: from SIGTERM/SIGINT (or the end of ``--once``'s reading) to the exit."""
SHUTDOWN_RESERVE = 0.5
"""The end of the budget kept from the sinks: the last state save and closing the metrics server."""
IN_FLIGHT_BYTES = 4 * SLICE
"""Input bytes whose events may wait for the sinks (plus the slice being read)."""


class App:
    """One watch process.  Construct, then ``await run()``; ``stop()`` may be called from the loop."""

    def __init__(self, cfg: Config, roots: list[str], fanout: FanOut, *,
                 clock: Callable[[], float] = time.monotonic, wall: Callable[[], float] = time.time,
                 on_batch: Callable[[list[SinkEvent]], None] | None = None,
                 in_flight_bytes: int = IN_FLIGHT_BYTES, wants: Wants | None = None,
                 shutdown_seconds: float = SHUTDOWN_SECONDS, stuck_seconds: float = STUCK_SECONDS,
                 on_hangup: Callable[[], Awaitable[object]] | None = None) -> None:
        self.cfg = cfg
        self.fanout = fanout
        self.clock = clock
        self.on_batch = on_batch  # sees every batch as it is submitted to the sinks
        self.shutdown_seconds = shutdown_seconds
        self.stuck_seconds = stuck_seconds
        self.on_hangup = on_hangup  # awaited after the sinks' reopen on SIGHUP
        store = Store(Path(cfg.state_dir)) if cfg.state_dir else None
        saved = store.load() if store is not None else None  # an unusable state file is moved aside
        # ``wants``: what RunProgress carries; by default what the sinks read (an ``on_batch`` observer may want more)
        glob = cfg.host_log_glob  # default: a run folder's logs, as summary finds them
        self.tailer = Tailer(roots, cfg.thresholds, cfg.idle_timeout, saved, wants or fanout.wants,
                             HostLogFinder(glob), (glob or HOST_LOG_NAME) if "/" not in glob else "",
                             settle=0.0 if cfg.once else SETTLE)
        # One thread reads and decodes: work stays on the same thread (fewer malloc arenas holding
        # freed slices than a pool of six) and in order.  Each sink has its own worker (FanOut.start);
        # the second thread only waits for their shutdown.
        self._reader_pool = ThreadPoolExecutor(1, thread_name_prefix="ringtrace-reader")
        self._sink_pool = ThreadPoolExecutor(1, thread_name_prefix="ringtrace-sinks")
        self.in_flight = InFlight(in_flight_bytes)
        self._wake = asyncio.Event()
        self._stopping = asyncio.Event()
        self.watch = Watch(self._wake, self._stopping, poll=cfg.poll, poll_interval=cfg.poll_interval,
                           rescan_interval=cfg.rescan_interval)
        self.saver = Saver(store, self.tailer.snapshot, self._reader_pool) if store is not None else None
        self.reader = ReaderTask(self.tailer, self.watch, self.in_flight, self._reader_pool, self.saver, cfg,
                                 clock=clock, wall=wall, stopping=self._stopping, wake=self._wake)
        self._sinks_done = asyncio.Event()
        # from the sinks' workers: ("settled", weight) / ("taken", RunFinished); None ends the settler
        self._reports: asyncio.Queue[tuple[str, object] | None] = asyncio.Queue()
        self._settled_all = asyncio.Event()
        self._hup = asyncio.Event()
        self._deadline: float | None = None  # the clock's time the shutdown budget ends

    @property
    def ready(self) -> bool:
        """True once the watch runs, until the stop or the end of reading."""
        return self.reader.ready

    def stop(self) -> None:
        """Begin the shutdown (idempotent): the budget of ``shutdown_seconds`` starts at the first call."""
        self.reader.ready = False  # /readyz says 503 from the signal on
        if self._deadline is None:
            self._deadline = self.clock() + self.shutdown_seconds
        self.fanout.hurry()  # a sink idle for a second now is stuck: it must not hold the last slice back
        self._stopping.set()
        self._wake.set()

    async def wait_ready(self) -> bool:
        """Wait (in the app's loop, while ``run()`` runs) until the watch runs; False when reading ended first."""
        await self.reader.ready_or_done.wait()
        return self.ready

    async def _on_sinks(self, fn: Callable[..., _T], *args: object) -> _T:
        return await asyncio.get_running_loop().run_in_executor(self._sink_pool, fn, *args)

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
                if self.saver is not None:
                    tg.create_task(self.saver.run(self._sinks_done), name="saver")
                reader = tg.create_task(self.reader.run(), name="reader")
                if not self.cfg.once:
                    watcher = tg.create_task(self.watch.run(), name="watcher")
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

    # -- sinks ----------------------------------------------------------------------------

    async def _sinks(self) -> None:
        """Submit each batch to the sinks' outlets (never waits for a sink); at the end, their shutdown."""
        while True:
            item = await self.reader.queue.get()
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
        if self.saver is not None:
            await self.saver.save()  # every finish all the sinks took is remembered
        self._sinks_done.set()

    async def _settler(self) -> None:
        """What the sinks' workers report: a settled batch frees its in-flight bytes; a run every sink
        took counts as delivered (the saver saves it soon)."""
        while (item := await self._reports.get()) is not None:
            kind, what = item
            if kind == "settled":
                assert isinstance(what, int)
                await self.in_flight.release(what)
            elif isinstance(what, RunFinished) and self.saver is not None:
                self.saver.taken(what)
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
            await wait_any(self._hup, self._sinks_done)
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

