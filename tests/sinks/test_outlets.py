"""Each sink on its own outlet (``FanOut.start``): a sink that blocks stops only itself.

The sinks here block on a gate the test opens; time is an injected clock the test moves, and
waits are conditions with deadlines.  A blocked sink is found stuck once it has taken nothing for
``stuck_after`` on that clock (however old its queue: a slow sink that moves is not stuck); then
it loses RunStarted/RunProgress (counted), keeps
RunFinished (delivered when it moves again, after its ``dropped`` hook), and no longer holds
batches unsettled.  ``shutdown`` abandons a sink still blocked at the deadline.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator

import pytest

from ringtrace.model.records import RunFinished, RunProgress, RunStarted, SinkEvent, Source, empty_summary
from ringtrace.sinks import FINISHED_KEPT, FLUSH_MARGIN, FanOut, Sink
from tests._support.writer import wait_for


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


class GateSink(Sink):
    """Keeps what it receives; ``receive`` waits while ``gate`` is clear (the test opens it)."""

    def __init__(self, name: str, blocked: bool = False) -> None:
        self.name = name
        self.gate = threading.Event()
        if not blocked:
            self.gate.set()
        self.inside = threading.Event()  # a receive has started
        self.got: list[SinkEvent] = []
        self.calls: list[str] = []
        self.deadlines: list[float] = []  # what flush was given
        self.gaps: list[Source] = []

    def receive(self, event: SinkEvent) -> None:
        self.inside.set()
        self.gate.wait()
        self.got.append(event)

    def dropped(self, source: Source) -> None:
        self.gaps.append(source)

    def flush(self, deadline: float) -> None:
        self.calls.append("flush")
        self.deadlines.append(deadline)

    def close(self) -> None:
        self.calls.append("close")


class Reopening(GateSink):
    def __init__(self, name: str, fail: bool = False) -> None:
        super().__init__(name)
        self.fail = fail

    def reopen(self) -> None:
        self.calls.append("reopen")
        if self.fail:
            raise OSError(13, "Permission denied")


def run_events(name: str, progress: int = 2) -> list[SinkEvent]:
    src = Source(f"/t/{name}/scope_stats.jsonl")
    return [RunStarted(src, None), *(RunProgress(src, (), (), ()) for _ in range(progress)),
            RunFinished(src, empty_summary(None), (), "complete", key=name)]


class Harness:
    """A started fan-out and what its callbacks reported."""

    def __init__(self, sinks: list[GateSink], stuck_after: float = 5.0) -> None:
        self.clock = Clock()
        self.fanout = FanOut(sinks)
        self.settled: list[object] = []
        self.taken: list[str] = []
        self.fanout.start(clock=self.clock, settled=self.settled.append, taken=lambda f: self.taken.append(f.key),
                          stuck_after=stuck_after)
        self.sinks = sinks

    def open_all(self) -> None:
        for s in self.sinks:
            s.gate.set()


@pytest.fixture
def harnesses() -> Iterator[list[Harness]]:
    made: list[Harness] = []
    yield made
    for h in made:  # no worker stays blocked after the test
        h.open_all()


def test_a_blocked_sink_does_not_stop_the_others_and_loses_only_what_it_must(harnesses: list[Harness]) -> None:
    stuck, ok = GateSink("stuck", blocked=True), GateSink("ok")
    h = Harness([stuck, ok])
    harnesses.append(h)
    first, second = run_events("a"), run_events("b")
    h.fanout.submit(first, "w1")
    wait_for(lambda: len(ok.got) == 4 and stuck.inside.is_set(), what="the free sink to take the first run")
    assert h.settled == [] and h.taken == []  # the blocked sink still holds the batch: the reader would wait
    h.fanout.submit(second, "w2")
    wait_for(lambda: len(ok.got) == 8, what="the free sink to take the second run")
    assert h.fanout.stuck() == []  # 0 s on the clock: slow is not stuck
    h.clock.now += 5.5
    assert [name for name, _ in h.fanout.stuck()] == ["stuck"]
    h.fanout.check()
    # shed: the queued run loses its RunStarted/RunProgress, keeps its RunFinished; the batch is let go
    assert h.settled == ["w2"] and h.fanout.dropped["stuck"] == 3 and h.fanout.dropped["ok"] == 0
    third = run_events("c")
    h.fanout.submit(third, "w3")  # shed at once while stuck
    assert h.fanout.dropped["stuck"] == 6
    wait_for(lambda: len(ok.got) == 12 and h.settled == ["w2", "w3"], what="the free sink to take the third run")
    assert h.taken == []  # nobody took a RunFinished that the blocked sink has not
    stuck.gate.set()  # it moves again: first run whole (it was in its call), then the kept RunFinished
    wait_for(lambda: len(stuck.got) == 6, what="the sink that was blocked to catch up")
    assert stuck.got == [*first, second[-1], third[-1]]
    assert set(stuck.gaps) == {second[0].source, third[0].source}  # told before the RunFinished of those runs
    wait_for(lambda: sorted(h.taken) == ["a", "b", "c"] and "w1" in h.settled, what="every run taken")
    h.clock.now += 1
    h.fanout.check()
    assert h.fanout.stuck() == []
    before = time.monotonic()
    h.fanout.shutdown(h.clock.now + 5)
    assert stuck.calls == ok.calls == ["flush", "close"]
    assert h.fanout.errors == {"stuck": 0, "ok": 0} and h.fanout.abandoned == {"stuck": 0, "ok": 0}
    # the budget reaches each sink's flush as one monotonic deadline, less the margin kept for close
    [a], [b] = stuck.deadlines, ok.deadlines
    assert a == b and before + 5 - FLUSH_MARGIN <= a <= time.monotonic() + 5 - FLUSH_MARGIN


def test_a_stuck_sink_keeps_at_most_finished_kept_runfinished(harnesses: list[Harness]) -> None:
    stuck = GateSink("stuck", blocked=True)
    h = Harness([stuck])
    harnesses.append(h)
    h.fanout.submit(run_events("first", 0)[:1], 0)
    wait_for(stuck.inside.is_set, what="the sink to block")
    h.clock.now += 6
    h.fanout.check()
    for i in range(FINISHED_KEPT + 5):
        h.fanout.submit(run_events(f"r{i}", 0)[1:], i + 1)  # RunFinished only
    assert h.fanout.dropped["stuck"] == 5  # beyond the cap RunFinished is dropped too
    assert len(h.settled) == FINISHED_KEPT + 5  # and none holds the reader
    stuck.gate.set()
    wait_for(lambda: len(stuck.got) == 1 + FINISHED_KEPT, what="the kept RunFinished delivered")
    wait_for(lambda: len(h.taken) == FINISHED_KEPT, what="the kept runs taken")
    assert f"r{FINISHED_KEPT}" not in h.taken  # a dropped RunFinished is never taken: the state reads it again


def test_shutdown_abandons_a_sink_blocked_at_the_deadline(harnesses: list[Harness]) -> None:
    stuck, ok = GateSink("stuck", blocked=True), GateSink("ok")
    h = Harness([stuck, ok])
    harnesses.append(h)
    h.fanout.submit(run_events("a"), "w1")
    wait_for(stuck.inside.is_set, what="the sink to block")
    closer = threading.Thread(target=h.fanout.shutdown, args=(h.clock.now + 0.3,))
    closer.start()  # the clock does not move: the wait is the 0.3 s it says are left, not the blocked sink
    closer.join(60)  # a deadline against hanging
    assert not closer.is_alive()
    assert ok.calls == ["flush", "close"] and len(ok.got) == 4
    assert stuck.calls == [] and h.fanout.abandoned == {"stuck": 1, "ok": 0}
    assert h.fanout.errors["stuck"] == 1 and h.fanout.dropped["stuck"] == 4  # the one in its call too
    assert h.settled == ["w1"] and h.taken == []
    stuck.gate.set()  # waking up later, the abandoned worker calls nothing more
    assert stuck.calls == []


class StepSink(GateSink):
    """Takes one event per permit the test releases."""

    def __init__(self, name: str) -> None:
        super().__init__(name)
        self.permits = threading.Semaphore(0)

    def receive(self, event: SinkEvent) -> None:
        self.inside.set()
        self.permits.acquire()
        self.got.append(event)


def test_once_shutdown_began_a_sink_that_still_moves_is_not_stuck(harnesses: list[Harness]) -> None:
    step, blocked = StepSink("step"), GateSink("blocked", blocked=True)
    h = Harness([step, blocked])
    harnesses.append(h)
    h.fanout.submit(run_events("a"), 1)
    h.fanout.submit(run_events("b"), 2)
    wait_for(lambda: step.inside.is_set() and blocked.inside.is_set(), what="both sinks in a call")
    h.clock.now += 3
    assert h.fanout.stuck() == []  # 3 s < 5 s
    h.fanout.hurry()  # shutdown began: 1 s without moving is stuck
    assert sorted(name for name, _ in h.fanout.stuck()) == ["blocked", "step"]
    step.permits.release()  # it takes an event now
    wait_for(lambda: len(step.got) == 1, what="one event taken")
    h.clock.now += 0.5
    assert [name for name, _ in h.fanout.stuck()] == ["blocked"]  # its queue is old, but it moves
    h.fanout.check()
    assert h.fanout.dropped == {"step": 0, "blocked": 3}  # only the stuck one is shed (its queued run but its end)
    for _ in range(7):
        step.permits.release()
    wait_for(lambda: len(step.got) == 8, what="the moving sink to take the rest")
    h.fanout.shutdown(h.clock.now + 1)  # the moving sink has only its flush and close left
    assert step.calls == ["flush", "close"]
    assert h.fanout.abandoned == {"step": 0, "blocked": 1}
    assert h.fanout.dropped == {"step": 0, "blocked": 8}  # abandoned: its first run and the kept RunFinished


def test_a_slow_sink_that_keeps_taking_events_is_not_stuck_however_old_its_queue(harnesses: list[Harness]) -> None:
    """A loaded node catching up: the sink takes an event every 4 s of the clock while its oldest queued
    event waits 20 s and more.  It is not stuck (nothing is shed, /readyz stays 200), and the batches it
    holds hold the reader back instead; once it takes nothing for ``stuck_after`` it is."""
    slow = StepSink("slow")
    h = Harness([slow], stuck_after=5.0)
    harnesses.append(h)
    for i in range(6):
        h.fanout.submit(run_events(f"r{i}"), i)  # 24 events queued at the clock's 100 s
    wait_for(slow.inside.is_set, what="the sink in its first call")
    for taken in range(1, 12):
        h.clock.now += 4  # less than stuck_after since it last took one
        slow.permits.release()
        wait_for(lambda n=taken: len(slow.got) == n, what=f"{taken} event(s) taken")  # type: ignore[misc]
        h.fanout.check()
        assert h.fanout.stuck() == [], f"called stuck after {taken} events, its queue {4 * taken} s old"
    assert h.fanout.dropped["slow"] == 0 and len(h.settled) < 6  # nothing shed: the reader waited for it
    h.clock.now += 5.5  # now it takes nothing for longer than stuck_after
    assert [name for name, _ in h.fanout.stuck()] == ["slow"]
    h.fanout.check()
    assert h.fanout.dropped["slow"] > 0
    for _ in range(24):
        slow.permits.release()


def test_reopen_runs_on_each_sinks_worker_behind_its_events_and_failures_count(harnesses: list[Harness]) -> None:
    good, bad, plain = Reopening("good"), Reopening("bad", fail=True), GateSink("plain")
    good.gate.clear()
    h = Harness([good, bad, plain])
    harnesses.append(h)
    h.fanout.submit(run_events("a"), 1)
    assert h.fanout.reopen() == 2  # the sinks that have reopen()
    wait_for(lambda: bad.calls == ["reopen"], what="the failing reopen")
    assert good.calls == []  # queued behind its events
    good.gate.set()
    wait_for(lambda: good.calls == ["reopen"], what="the reopen after the events")
    assert len(good.got) == 4
    wait_for(lambda: h.fanout.errors["bad"] == 1, what="the failure counted")
    assert h.fanout.errors["good"] == 0
    h.fanout.shutdown(h.clock.now + 5)
    assert h.fanout.reopen() == 0  # closed: nothing is queued


def test_direct_fanout_reopen_and_its_failure() -> None:
    good, bad, plain = Reopening("good"), Reopening("bad", fail=True), GateSink("plain")
    fanout = FanOut([good, bad, plain])
    assert fanout.reopen() == 2
    assert good.calls == bad.calls == ["reopen"] and fanout.errors == {"good": 0, "bad": 1, "plain": 0}


def test_a_sink_that_raises_is_counted_and_the_outlet_goes_on(harnesses: list[Harness]) -> None:
    class Raising(GateSink):
        def receive(self, event: SinkEvent) -> None:
            if isinstance(event, RunProgress):
                raise ValueError("boom")
            super().receive(event)

    bad, ok = Raising("bad"), GateSink("ok")
    h = Harness([bad, ok])
    harnesses.append(h)
    h.fanout.submit(run_events("a"), 1)
    wait_for(lambda: h.taken == ["a"] and h.settled == [1], what="the run taken by both")
    assert h.fanout.errors == {"bad": 2, "ok": 0} and len(bad.got) == 2
    h.fanout.shutdown(h.clock.now + 5)
