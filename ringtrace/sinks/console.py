"""The watch's own log: one line per finished run (run, its verdict, the largest proven need) on stderr.

A sink like the others (receive / flush / close, from its own worker): it formats a line from the
finished run and hands it to the ``ringtrace.watch`` logger, which writes it in the configured
``--log-format`` (text or JSON).  ``--quiet`` leaves the sink out.
"""

from __future__ import annotations

import logging

from ringtrace.model.records import WANT_SUMMARIES, RunFinished, SinkEvent
from ringtrace.sinks.base import Sink
from ringtrace.stages.need import proven_need


def worst(fin: RunFinished) -> str:
    """``; largest proven need ring R RES N%`` (a need the records prove, as every surface says it), or ""."""
    best = max(((proven_need(p, fin.summary).value / p.capacity, p) for p in fin.summary.peaks if p.capacity),
               key=lambda x: x[0], default=None)
    if best is None or best[0] <= 0:
        return ""
    return f"; largest proven need ring {best[1].ring} {best[1].resource} {100 * best[0]:.0f}%"


class WatchLogSink(Sink):
    """Logs each finished run at INFO on ``logger`` (the caller enables it: ``watch`` does unless ``--quiet``)."""

    name = "log"
    wants = WANT_SUMMARIES

    def __init__(self, logger: logging.Logger) -> None:
        self.log = logger
        self.finished = 0

    def receive(self, event: SinkEvent) -> None:
        if not isinstance(event, RunFinished):
            return
        self.finished += 1
        name = event.source.name if event.source.path else f"{event.source.labels.run} (host log only)"
        self.log.info("run finished: %s: %s: %s (%s)%s", name, event.verdict.severity, event.verdict.text,
                      event.reason, worst(event))

    def flush(self, deadline: float) -> None:
        """Nothing is buffered."""

    def close(self) -> None:
        """Nothing to release."""
