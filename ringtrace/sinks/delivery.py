"""Delivery: the fan-out, and each sink's own hand-off (its *outlet*).

:class:`FanOut` delivers each event to every sink (:class:`~ringtrace.sinks.base.Sink`) and survives a
failing one: the failure is logged and counted per sink (each error of an :class:`ExceptionGroup`
counts), and the other sinks and the reader carry on.  A sink that cannot write an output raises, so it
is counted.

Three ways to drive it.

* **Direct** (``summary``, ``check``, ``report``, tests): :meth:`FanOut.receive_all`,
  :meth:`~FanOut.flush` and :meth:`~FanOut.close` call every sink on the caller's thread.
* **Outlets** (``watch``): :meth:`FanOut.start`; from then on every sink has its own *outlet*, a queue
  and a daemon worker thread, so one sink that blocks (an events pipe nobody reads, a hung NFS mount, an
  OTLP receiver that does not answer) stops only itself.  This is the OpenTelemetry SDK's split: the
  outlet is the processor (queue, worker, flush, shutdown), the sink the exporter it calls.
* **One-shot outlets** (``convert`` with a sink that ``blocks``: OTLP): :meth:`FanOut.start_oneshot`;
  every sink on its outlet, so the network overlaps the reading, and :meth:`~FanOut.receive_all` waits
  while a few batches are unsettled (back-pressure: a one-shot reader may wait, so no sink is ever
  called stuck and nothing is shed).

With outlets:

* :meth:`FanOut.submit` queues a batch on every outlet at once and never waits.  A batch is
  *settled* (``settled(token)``; the app then frees its share of the in-flight bound) once
  every outlet delivered it or shed it, and a :class:`RunFinished` is *taken*
  (``taken(fin)``; the app then counts the run finished in its state) once every sink's
  ``receive`` returned for it.  A sink that is slow but keeps taking events holds batches
  unsettled, so the reader waits for it (back-pressure, no loss).
* A sink is *stuck* when it holds events (queued, or in a call) and has taken nothing for
  longer than ``stuck_after`` seconds (:data:`STUCK_SECONDS`, ``--sink-stuck-timeout``; once
  shutdown began :data:`STUCK_SECONDS_AT_SHUTDOWN`, a flush or close excepted).  How old its
  queue is does not matter: a sink that is slow but keeps taking events (a loaded node during a
  catch-up) is not stuck, it holds the reader back instead.  A
  stuck sink stops holding the reader and the other sinks back: what it holds and what comes
  for it is *shed*, so it loses events (counted per sink, ``dropped[name]``, logged when it is
  found stuck and when it takes events again).  The drop policy: RunStarted and RunProgress
  are dropped; RunFinished (one per run: the events file's line, the final metrics) is kept,
  up to :data:`FINISHED_KEPT` per sink, and delivered when the sink moves again.  A dropped
  RunFinished is never *taken*: with ``--state-dir`` the restart reads that run again.  Sinks
  are told which runs lost events (:meth:`~ringtrace.sinks.base.Sink.dropped`) before their next event.
* :meth:`FanOut.shutdown` tells every sink the deadline at once
  (:meth:`~ringtrace.sinks.base.Sink.shutdown_begins`), queues ``flush`` and ``close`` behind each
  outlet's events and waits until every outlet closed or the deadline; an outlet still busy then is
  abandoned: its worker (a daemon thread) is left to the process exit, what it still held is dropped,
  and it counts one failure in ``errors`` and ``abandoned``.

Time comes from the ``clock`` given to :meth:`FanOut.start` (monotonic seconds); the app calls
:meth:`FanOut.check` now and then (its wake-up), which is when a stuck sink is found while
nothing is submitted.
"""


from __future__ import annotations

import logging
import math
import threading
import time
from collections import deque
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from functools import partial
from typing import TYPE_CHECKING, Literal, TypeVar

from ringtrace.model.records import RunFinished, RunProgress, SinkEvent, Source, Wants
from ringtrace.sinks.base import Sink

if TYPE_CHECKING:
    from prometheus_client.core import Metric

log = logging.getLogger("ringtrace.sinks")
_T = TypeVar("_T")

STUCK_SECONDS = 5.0
"""A sink that holds events and took none for this long is stuck (it loses events; /readyz says 503); the
default of ``--sink-stuck-timeout``."""
STUCK_SECONDS_AT_SHUTDOWN = 1.0
"""The same, once shutdown began: the budget is a few seconds, a sink that takes nothing for one will not make it."""
FINISHED_KEPT = 1000
"""RunFinished events a stuck sink keeps queued (beyond them they are dropped too): about 10 MB."""
FLUSH_MARGIN = 0.5
ONESHOT_WINDOW = 100_000
"""What a one-shot reader may have unsettled on the outlets, in items (an event, and each record and pair
event a RunProgress carries): about six chunks of 1 MiB of input; a larger batch goes alone."""
ONESHOT_CLOSE_SECONDS = 60.0
"""How long a one-shot command waits for a sink's ``close`` (each sink bounds its own) before abandoning it."""
"""At shutdown a sink's ``flush`` must end this long before the deadline, to close and say what it lost."""

Op = Literal["", "flush", "close", "reopen"]


@dataclass(eq=False, slots=True)
class _Batch:
    """One submitted batch: ``unsettled`` outlets still hold it; ``untaken[i]``: sinks yet to take its i-th event."""

    token: object
    events: Sequence[SinkEvent]
    unsettled: int
    untaken: dict[int, int]


@dataclass(eq=False, slots=True)
class _Entry:
    """What an outlet queues: a batch's events for this sink (index in the batch, event), or an operation."""

    at: float  # when it was queued (the clock's time)
    batch: _Batch | None = None
    events: list[tuple[int, SinkEvent]] = field(default_factory=list)
    op: Op = ""
    deadline: float = math.inf  # flush: the sink's deadline (time.monotonic())
    settled: bool = False  # this outlet no longer holds the batch (delivered, or shed to its RunFinished)
    done: int = 0  # events the worker has delivered of it so far


class _Outlet:
    """One sink's bounded hand-off: its queue and its worker thread (see the module docstring)."""

    def __init__(self, fanout: FanOut, sink: Sink) -> None:
        self.fanout = fanout
        self.sink = sink
        self.name = sink.name
        self.cond = threading.Condition()
        self.queue: deque[_Entry] = deque()
        self.current: _Entry | None = None
        self.kept = 0  # RunFinished events held in shed entries
        self.gaps: set[Source] = set()  # runs that lost events, for the sink's ``dropped`` hook
        self.stuck_at: float | None = None  # when it was found stuck (None: it is not)
        self.lost_since = 0  # events dropped since it was found stuck
        self.moved_at = fanout.clock()  # when its worker last began or ended a call (written without the lock)
        self.closing = False  # close is queued: nothing more is accepted
        self.closed = False
        self.abandoned = False
        self.thread = threading.Thread(target=self._work, name=f"ringtrace-sink-{self.name}", daemon=True)

    # -- the submitting side (the app's loop) ---------------------------------------------------

    def idle(self, now: float) -> float | None:
        """Under ``cond``: how long it has taken nothing while it held events (queued, or in a call): the time
        since it last moved or since its oldest event came, whichever is shorter; None when it holds nothing.
        A sink that still takes events is not stuck however old its queue.  Once shutdown began a flush or
        close is not counted (the deadline bounds those)."""
        head = self.current if self.current is not None else (self.queue[0] if self.queue else None)
        if head is None:
            return None
        if self.fanout.hurried and head.op in ("flush", "close"):
            return None
        return min(now - head.at, now - self.moved_at)

    def offer(self, entry: _Entry, now: float) -> list[_Batch]:
        """Queue ``entry`` (shed at once when the sink is stuck); the batches this outlet let go of."""
        with self.cond:
            if self.closing or self.abandoned:
                return self._lose(entry, "it is closed")
            settle = self._police(now)
            if self.stuck_at is not None and entry.batch is not None:
                settle += self._shed(entry)
                if not entry.events:
                    return settle
            self.queue.append(entry)
            self.cond.notify_all()
        return settle

    def control(self, op: Op, now: float, deadline: float = math.inf) -> bool:
        """Queue an operation behind the events (``flush``: with its deadline); False when the outlet is closing."""
        with self.cond:
            if self.closing or self.abandoned:
                return False
            self.closing = op == "close"
            self.queue.append(_Entry(now, op=op, deadline=deadline))
            self.cond.notify_all()
        return True

    def check(self, now: float) -> list[_Batch]:
        with self.cond:
            return self._police(now)

    def stuck_for(self, now: float) -> float | None:
        """Seconds it has taken nothing while holding events, when that makes it stuck; else None."""
        with self.cond:
            idle = self.idle(now)
        return idle if idle is not None and idle > self.fanout.stuck_after else None

    def _police(self, now: float) -> list[_Batch]:
        """Under ``cond``: mark the sink stuck or moving again (logged once each way); shed while stuck."""
        idle = self.idle(now)
        stuck = idle is not None and idle > self.fanout.stuck_after
        if stuck and self.stuck_at is None:
            self.stuck_at = now
            self.lost_since = 0
            log.error("sink %s is stuck: it has taken nothing for %.1fs; it loses events from now on "
                      "(RunFinished kept, up to %d) and the others carry on", self.name, idle, FINISHED_KEPT)
        elif not stuck and self.stuck_at is not None:
            log.warning("sink %s takes events again after %.1fs stuck; %d event(s) were dropped for it",
                        self.name, now - self.stuck_at, self.lost_since)
            self.stuck_at = None
        if self.stuck_at is None:
            return []
        settle: list[_Batch] = []
        for entry in self.queue:
            settle += self._shed(entry)
        if any(not e.events and not e.op for e in self.queue):
            self.queue = deque(e for e in self.queue if e.events or e.op)
        return settle

    def _shed(self, entry: _Entry) -> list[_Batch]:
        """Under ``cond``: keep only ``entry``'s RunFinished events (up to FINISHED_KEPT); the batch it let go of."""
        if entry.batch is None or entry.settled:
            return []
        kept: list[tuple[int, SinkEvent]] = []
        for i, ev in entry.events:
            if type(ev) is RunFinished and self.kept < FINISHED_KEPT:
                kept.append((i, ev))
                self.kept += 1
            else:
                self._count_lost(ev)
        entry.events = kept
        entry.settled = True
        return [entry.batch]

    def _count_lost(self, ev: SinkEvent) -> None:
        self.gaps.add(ev.source)
        self.lost_since += 1
        self.fanout.count_dropped(self.name, 1)

    def _lose(self, entry: _Entry, why: str) -> list[_Batch]:
        """Under ``cond``: drop all of ``entry`` (counted); the batch it let go of."""
        for _, ev in entry.events:
            self._count_lost(ev)
        if entry.events:
            log.debug("sink %s: %d event(s) dropped: %s", self.name, len(entry.events), why)
        if entry.settled:
            self.kept -= sum(1 for _, ev in entry.events if type(ev) is RunFinished)
        entry.events = []
        if entry.batch is None or entry.settled:
            return []
        entry.settled = True
        return [entry.batch]

    def abandon(self) -> tuple[int, list[_Batch]]:
        """Give up on the sink (shutdown's deadline passed): drop what it holds; (events dropped, batches let go)."""
        with self.cond:
            self.abandoned = True
            entries = list(self.queue)
            self.queue.clear()
            current = self.current
            if current is not None:  # its worker is blocked in a call on it: the rest is never delivered
                current.events = current.events[current.done:]
                entries.append(current)
            held = sum(len(e.events) for e in entries)
            settle: list[_Batch] = []
            for e in entries:
                settle += self._lose(e, "abandoned at shutdown")
            self.cond.notify_all()
        return held, settle

    def wait_idle(self, seconds: float) -> bool:
        """Wait until it holds nothing (queue empty, no call in progress) or ``seconds`` passed; whether it does."""
        end = time.monotonic() + seconds
        with self.cond:
            while (self.queue or self.current is not None) and not self.abandoned:
                left = end - time.monotonic()
                if left <= 0:
                    return False
                self.cond.wait(left)
        return True

    def wait_closed(self, seconds: float) -> bool:
        end = time.monotonic() + seconds
        with self.cond:
            while not self.closed:
                left = end - time.monotonic()
                if left <= 0:
                    return False
                self.cond.wait(left)
        return True

    # -- the worker ---------------------------------------------------------------------------

    def _work(self) -> None:
        fanout, sink = self.fanout, self.sink
        while True:
            with self.cond:
                while not self.queue and not self.abandoned:
                    self.cond.wait()
                if self.abandoned:
                    return
                entry = self.current = self.queue.popleft()
                self.moved_at = fanout.clock()
                gaps, self.gaps = self.gaps, set()
            for src in gaps:
                fanout.guard(sink, "dropped", partial(sink.dropped, src))
            if entry.op:
                call = (partial(sink.flush, entry.deadline) if entry.op == "flush" else
                        sink.close if entry.op == "close" else sink.reopen)
                if fanout.guard(sink, entry.op, call) and entry.op == "reopen":
                    log.info("sink %s reopened its output", self.name)
            else:
                for i, ev in entry.events:
                    fanout.guard(sink, "receive", partial(sink.receive, ev))
                    entry.done += 1
                    self.moved_at = fanout.clock()
                    if self.abandoned:
                        return
                    if type(ev) is RunFinished and entry.batch is not None:
                        fanout.took(entry.batch, i)
            with self.cond:
                self.current = None
                self.moved_at = fanout.clock()
                if self.abandoned:
                    return
                settle = entry.batch is not None and not entry.settled
                if entry.settled:
                    self.kept -= sum(1 for _, ev in entry.events if type(ev) is RunFinished)
                entry.settled = True
                self.closed = entry.op == "close"
                self.cond.notify_all()
            if settle and entry.batch is not None:
                fanout.settle([entry.batch])
            if entry.op == "close":
                return


class _Window:
    """One-shot back-pressure: :meth:`acquire` waits while the unsettled items and ``n`` would pass the limit
    (a batch larger than the limit goes when nothing is unsettled); :meth:`release` is the ``settled`` callback
    (its token: the batch's size)."""

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self.held = 0
        self.cond = threading.Condition()

    def acquire(self, n: int) -> None:
        with self.cond:
            while self.held and self.held + n > self.limit:
                self.cond.wait()
            self.held += n

    def release(self, token: object) -> None:
        with self.cond:
            self.held -= token if isinstance(token, int) else 0
            self.cond.notify_all()


class FanOut:
    """Delivers to many sinks; counts and logs each sink's failures (``errors[name]``).

    See the module docstring: direct calls (``receive_all``, ``flush``, ``close``, ``reopen``),
    or, after :meth:`start`, each sink on its own outlet (``submit``, ``check``, ``reopen``, ``shutdown``).
    """

    name = "fanout"

    def __init__(self, sinks: Sequence[Sink]) -> None:
        self.sinks = list(sinks)
        self.errors: dict[str, int] = {s.name: 0 for s in self.sinks}
        self.dropped: dict[str, int] = {s.name: 0 for s in self.sinks}
        """Events a sink lost (it was stuck, or abandoned at shutdown), by sink."""
        self.abandoned: dict[str, int] = {s.name: 0 for s in self.sinks}
        """Sinks given up on at shutdown (still blocked at the deadline), by sink."""
        self.stuck_after = STUCK_SECONDS
        self.hurried = False  # shutdown began (see hurry)
        self.clock: Callable[[], float] = time.monotonic
        self._lock = threading.Lock()  # the counters and the batches' counts
        self._outlets: list[_Outlet] | None = None
        self._settled: Callable[[object], None] = lambda token: None
        self._taken: Callable[[RunFinished], None] = lambda fin: None
        self._window: _Window | None = None  # one-shot outlets: what the reader may have unsettled

    def add(self, sink: Sink) -> None:
        """Add a sink before the first event (used while wiring the app)."""
        if self._outlets is not None:
            raise RuntimeError("FanOut.add after start()")
        self.sinks.append(sink)
        for counts in (self.errors, self.dropped, self.abandoned):
            counts.setdefault(sink.name, 0)

    @property
    def wants(self) -> Wants:
        """What any of the sinks reads of RunProgress (the union of their ``wants``; the widest bands)."""
        each = [s.wants for s in self.sinks]
        return Wants(any(w.records for w in each), any(w.events for w in each), max((w.bands for w in each), default=0))

    def guard(self, sink: Sink, what: str, call: Callable[[], object]) -> bool:
        """``call()`` on behalf of ``sink``; an exception is logged and counted, never raised (False)."""
        try:
            call()
            return True
        except Exception as err:  # a sink's bug must not stop the reader or the other sinks
            # an ExceptionGroup is several failures at once (e.g. traces of several runs): each counts
            for one in err.exceptions if isinstance(err, ExceptionGroup) else (err,):
                with self._lock:
                    self.errors[sink.name] = self.errors.get(sink.name, 0) + 1
                log.error("sink %s failed in %s: %s", sink.name, what, one, exc_info=log.isEnabledFor(logging.DEBUG))
            return False

    def count_dropped(self, name: str, n: int) -> None:
        with self._lock:
            self.dropped[name] = self.dropped.get(name, 0) + n

    def dropped_counts(self) -> dict[str, int]:
        """A copy of :attr:`dropped` (read from other threads: scrapes)."""
        with self._lock:
            return dict(self.dropped)

    # -- direct calls (convert, summary, tests) ---------------------------------------------------

    def _direct(self) -> None:
        if self._outlets is not None:
            raise RuntimeError("the fan-out was started: use submit()/shutdown()")

    def start_oneshot(self, window: int = ONESHOT_WINDOW) -> None:
        """One-shot outlets (see the module docstring): ``receive_all`` submits each batch and waits while
        ``window`` of them are unsettled; ``flush`` and ``close`` wait for every outlet; nothing is shed."""
        win = self._window = _Window(window)
        self.start(settled=win.release, stuck_after=math.inf)

    def receive(self, event: SinkEvent) -> None:
        self._direct()
        for sink in self.sinks:
            self.guard(sink, "receive", partial(sink.receive, event))

    def receive_all(self, events: Iterable[SinkEvent]) -> None:
        if self._window is not None:  # one-shot outlets: a batch, once fewer than the window are unsettled
            batch = list(events)
            if batch:
                size = sum(1 + len(ev.records) + len(ev.events) if type(ev) is RunProgress else 1 for ev in batch)
                self._window.acquire(size)
                self.submit(batch, size)
            return
        for event in events:
            self.receive(event)

    def flush(self, deadline: float) -> None:
        """Every sink's ``flush(deadline)`` (``deadline``: ``time.monotonic()``): direct, one after the other;
        one-shot outlets: each sink told the deadline at once, its flush queued behind its events, waited for."""
        if self._window is not None and self._outlets is not None:
            self._tell_deadline(deadline)
            now = self.clock()
            for o in self._outlets:
                o.control("flush", now, deadline)
            for o in self._outlets:
                o.wait_idle(max(0.0, deadline - time.monotonic()) + FLUSH_MARGIN)
            return
        self._direct()
        for sink in self.sinks:
            self.guard(sink, "flush", partial(sink.flush, deadline))

    def close(self) -> None:
        """Every sink's ``close``: direct; one-shot outlets: queued behind its events and waited for (a sink
        not closed within :data:`ONESHOT_CLOSE_SECONDS` is abandoned, as at a shutdown)."""
        if self._window is not None and self._outlets is not None:
            now = self.clock()
            for o in self._outlets:
                o.control("close", now)
            for o in self._outlets:
                if not (o.abandoned or o.wait_closed(ONESHOT_CLOSE_SECONDS)):
                    self._abandon(o)
            return
        self._direct()
        for sink in self.sinks:
            self.guard(sink, "close", sink.close)

    def _tell_deadline(self, deadline: float) -> None:
        """Every sink's ``shutdown_begins(deadline)``, now, on this thread (its worker may be inside a call)."""
        for sink in self.sinks:
            self.guard(sink, "shutdown_begins", partial(sink.shutdown_begins, deadline))

    def reopen(self) -> int:
        """Reopen the outputs of the sinks that can (``reopen()``); how many were asked.

        Direct: called now, on this thread.  Started: queued behind each such sink's events, run by
        its worker (a stuck sink reopens when it moves again)."""
        if self._outlets is None:
            sinks = [s for s in self.sinks if s.can_reopen()]
            for sink in sinks:
                self.guard(sink, "reopen", sink.reopen)
            return len(sinks)
        now = self.clock()
        able = [o for o in self._outlets if o.sink.can_reopen()]
        return sum(o.control("reopen", now) for o in able)

    # -- outlets (watch) --------------------------------------------------------------------------

    def start(self, *, clock: Callable[[], float] = time.monotonic, settled: Callable[[object], None] | None = None,
              taken: Callable[[RunFinished], None] | None = None, stuck_after: float = STUCK_SECONDS) -> None:
        """Give every sink its outlet and start the workers.  ``settled(token)`` and ``taken(fin)`` are
        called from the workers (or from :meth:`submit`'s thread): they must be thread-safe and quick."""
        if self._outlets is not None:
            raise RuntimeError("FanOut.start called twice")
        self.clock = clock
        self.stuck_after = stuck_after
        if settled is not None:
            self._settled = settled
        if taken is not None:
            self._taken = taken
        self._outlets = [_Outlet(self, s) for s in self.sinks]
        for o in self._outlets:
            o.thread.start()

    @property
    def started(self) -> bool:
        return self._outlets is not None

    def submit(self, events: Sequence[SinkEvent], token: object = None) -> None:
        """Queue ``events`` on every outlet; returns at once.  ``settled(token)`` follows (see the module docstring)."""
        outlets = self._outlets
        if outlets is None:
            raise RuntimeError("FanOut.submit before start()")
        untaken = {i: len(outlets) for i, ev in enumerate(events) if type(ev) is RunFinished}
        batch = _Batch(token, events, len(outlets), untaken)
        if not outlets:  # nothing to wait for: settled, and every RunFinished taken by all (none) of the sinks
            self._callback(self._settled, token)
            for ev in events:
                if type(ev) is RunFinished:
                    self._callback(self._taken, ev)
            return
        now = self.clock()
        pairs = list(enumerate(events))
        for o in outlets:
            self.settle(o.offer(_Entry(now, batch, list(pairs)), now))

    def settle(self, batches: list[_Batch]) -> None:
        """Outlets let go of ``batches`` (each once); ``settled`` for those no outlet holds any more."""
        done = []
        with self._lock:
            for b in batches:
                b.unsettled -= 1
                if b.unsettled <= 0:
                    done.append(b.token)
        for token in done:
            self._callback(self._settled, token)

    def took(self, batch: _Batch, i: int) -> None:
        """One sink's ``receive`` returned for the RunFinished ``batch.events[i]``."""
        with self._lock:
            left = batch.untaken[i] = batch.untaken[i] - 1
        if left == 0:
            fin = batch.events[i]
            assert type(fin) is RunFinished
            self._callback(self._taken, fin)

    @staticmethod
    def _callback(fn: Callable[[_T], None], arg: _T) -> None:
        try:
            fn(arg)
        except Exception as err:  # the app's loop is gone (an abandoned worker woke up late)
            log.debug("fan-out callback failed: %s", err)

    def check(self, now: float | None = None) -> None:
        """Find stuck sinks (logged once) and shed what they hold; the app calls it every tick."""
        now = self.clock() if now is None else now
        for o in self._outlets or []:
            self.settle(o.check(now))

    def stuck(self, now: float | None = None) -> list[tuple[str, float]]:
        """(name, seconds it has taken nothing) of every stuck sink (for /readyz)."""
        now = self.clock() if now is None else now
        out = []
        for o in self._outlets or []:
            waited = o.stuck_for(now)
            if waited is not None:
                out.append((o.name, waited))
        return out

    def hurry(self) -> None:
        """Shutdown began: a sink that takes nothing for STUCK_SECONDS_AT_SHUTDOWN is stuck (so the last
        slice and the ``shutdown`` finishes are not held back by it), one that still moves is not."""
        if self._window is None:  # one-shot outlets shed nothing: the command may wait for its sinks
            self.stuck_after = min(self.stuck_after, STUCK_SECONDS_AT_SHUTDOWN)
        self.hurried = True

    def queued(self) -> dict[str, int]:
        """Events each sink has not taken yet (queued or in a call)."""
        out: dict[str, int] = {s.name: 0 for s in self.sinks}
        for o in self._outlets or []:
            with o.cond:
                n = sum(len(e.events) for e in o.queue) + (len(o.current.events) if o.current else 0)
            out[o.name] = out.get(o.name, 0) + n
        return out

    def shutdown(self, deadline: float) -> None:
        """Flush and close every sink behind its queued events, in parallel, until ``deadline`` (the
        clock's time); a sink still busy then is abandoned (logged, counted in ``errors`` and
        ``abandoned``, what it held in ``dropped``).  Each sink's ``flush`` gets the same deadline less
        :data:`FLUSH_MARGIN` (in ``time.monotonic()`` terms), so it can still close and say what it
        lost.  Direct mode: ``flush`` then ``close``."""
        flush_by = time.monotonic() + max(0.0, deadline - self.clock() - FLUSH_MARGIN)
        if self._outlets is None:
            self.flush(flush_by)
            self.close()
            return
        self.hurry()
        self._tell_deadline(flush_by)
        now = self.clock()
        for o in self._outlets:
            o.control("flush", now, flush_by)
            o.control("close", now)
        for o in self._outlets:
            if o.abandoned or o.wait_closed(max(0.0, deadline - self.clock())):
                continue
            self._abandon(o)
        for name, n in self.dropped_counts().items():
            if not n:
                continue
            log.warning("sink %s lost %d event(s) in all (stuck or abandoned)", name, n)

    def _abandon(self, o: _Outlet) -> None:
        held, settle = o.abandon()
        self.settle(settle)
        with self._lock:
            self.errors[o.name] = self.errors.get(o.name, 0) + 1
            self.abandoned[o.name] = self.abandoned.get(o.name, 0) + 1
        log.error("sink %s did not finish within the shutdown budget: abandoned (%d event(s) it had not "
                  "taken are lost; its thread is left to the exit)", o.name, held)

    def collector(self) -> SinkCollector:
        """The outlets' figures as Prometheus families, for ``PrometheusSink.register``."""
        return SinkCollector(self)


class SinkCollector:
    """``ringtrace_sink_events_dropped_total{sink}``, ``ringtrace_sink_stuck{sink}`` and
    ``ringtrace_sink_queued_events{sink}``, read at each scrape (the failures are ``ringtrace_sink_errors_total``)."""

    def __init__(self, fanout: FanOut) -> None:
        self.fanout = fanout

    def collect(self) -> Iterator[Metric]:
        from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily  # only when metrics are served

        f = self.fanout
        dropped = f.dropped_counts()
        stuck = dict(f.stuck())
        queued = f.queued()
        names = list(dict.fromkeys(s.name for s in f.sinks))
        fams = (CounterMetricFamily("ringtrace_sink_events_dropped", "Events an output sink lost because it was "
                                    "stuck (RunProgress/RunStarted first) or abandoned at shutdown, by sink.",
                                    labels=["sink"]),
                GaugeMetricFamily("ringtrace_sink_stuck", "1 while an output sink holds events and has taken none "
                                  "for --sink-stuck-timeout (it loses events; /readyz says 503), by sink.",
                                  labels=["sink"]),
                GaugeMetricFamily("ringtrace_sink_queued_events", "Events queued for an output sink, not yet "
                                  "taken, by sink.", labels=["sink"]))
        for name in names:
            fams[0].add_metric([name], dropped.get(name, 0))
            fams[1].add_metric([name], 1 if name in stuck else 0)
            fams[2].add_metric([name], queued.get(name, 0))
        yield from fams
