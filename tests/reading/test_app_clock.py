"""The live :class:`App` in-process with an injected clock (``tests/_support/app.py``), over files a real
writer process writes: what the agent decides by time follows that clock, so no test waits for it.

* a sink that is slow but keeps taking events keeps the agent ready (``/readyz``), however old its
  queue; one that holds events and takes none for ``--sink-stuck-timeout`` is stuck.
"""

from __future__ import annotations

import os
import time
from pathlib import Path

from ringtrace import config
from ringtrace.model.records import RunFinished, SinkEvent
from ringtrace.reading.app import App
from ringtrace.sinks import FanOut
from tests._support.app import AppThread, Clock
from tests._support.samples import SMALL
from tests._support.sinks import Stepping
from tests._support.writer import Writer, wait_for


def old_runs(root: Path, writer: Writer, n: int) -> None:
    """``n`` whole runs written a minute ago (so complete at once), by the writer process."""
    for i in range(n):
        d = root / f"run{i}" / "scope_stats"
        writer.do("mkdir", path=d)
        writer.do("copy", src=SMALL, dst=d / "scope_stats.jsonl")
        then = time.time() - 60
        os.utime(d / "scope_stats.jsonl", (then, then))


def test_a_slow_sink_that_keeps_taking_events_keeps_the_agent_ready(tmp_path: Path, writer: Writer) -> None:
    """A catch-up on a loaded node: every event waits long in the sink's queue, but the sink takes one every
    4 s of the clock (the timeout is 5 s).  The agent stays ready; it is not ready only while the sink takes
    nothing for longer than the timeout, and is again once it moves."""
    root = tmp_path / "tree"
    old_runs(root, writer, 4)
    clock, sink, submitted = Clock(), Stepping(), list[SinkEvent]()
    cfg = config.build({"idle_timeout": 600, "rescan_interval": 600, "sink_stuck_timeout": 5}, env={})
    app = App(cfg, [str(root)], FanOut([sink]), clock=clock, on_batch=submitted.extend,
              stuck_seconds=cfg.sink_stuck_timeout)
    running = AppThread(app)
    try:
        wait_for(lambda: app.ready and sum(isinstance(e, RunFinished) for e in submitted) == 4,
                 what="the four runs read and queued for the sink")
        total = len(submitted)
        for taken in range(1, total):
            clock.now += 4
            sink.step()
            wait_for(lambda n=taken: len(sink.events) == n, what=f"{taken} event(s) taken")  # type: ignore[misc]
            assert app.readiness() == (True, ""), f"not ready after {taken} events, the oldest waiting {4 * taken} s"
        clock.now += 6  # it holds the last event and takes nothing
        assert app.readiness() == (False, "sink stepping stuck: it has taken nothing for 6s")
        sink.step()
        wait_for(lambda: len(sink.finished) == 4, what="the last run taken")
        assert app.readiness() == (True, "")
    finally:
        sink.step(1000)  # whatever is left, so that the shutdown is not held up
        assert running.stop() == 0
    assert len(sink.events) == total and app.fanout.dropped == {"stepping": 0}
