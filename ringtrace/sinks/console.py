"""The watch's own log: one line per finished run (run, verdict, worst resource) on stderr.

A sink like the others (receive / flush / close, from its own worker): it formats a line from the
finished run and hands it to the ``ringtrace.watch`` logger, which writes it in the configured
``--log-format`` (text or JSON).  ``--quiet`` leaves the sink out.
"""

from __future__ import annotations

import logging

from ringtrace.model.records import WANT_SUMMARIES, RunFinished, SinkEvent
from ringtrace.model.runtime import error_name


def verdict(fin: RunFinished) -> str:
    """``wedged in SITE (ring R, likely CODE NAME)`` / ``failed: CODE NAME`` / ``N errors, M warnings`` / ``ok``."""
    s = fin.summary
    log = fin.host_log
    if s.wedged:
        inner = s.wedged[-1]
        cause = fin.wedge_cause
        code = ""
        if cause is not None and cause.code is not None:
            how = "confirmed" if cause.confirmed else "likely"
            code = f", {how} {cause.code} {error_name(cause.code) or ''}".rstrip()
        return f"wedged in {inner.site} (ring {inner.ring}{code})"
    if log is not None and log.failed:
        return f"failed: {log.failure_code} {log.failure_name or ''}".rstrip()
    sev = [f.severity for f in fin.findings]
    errors, warnings = sev.count("error"), sev.count("warning")
    if errors or warnings:
        return f"{errors} error(s), {warnings} warning(s)"
    return "ok"


def worst(fin: RunFinished) -> str:
    peak = max((p for p in fin.summary.peaks if p.scopes and p.live_at_exit_ratio is not None),
               key=lambda p: p.live_at_exit_ratio or 0.0, default=None)
    if peak is None or peak.live_at_exit_ratio is None:
        return ""
    return f"; worst ring {peak.ring} {peak.resource} {100 * peak.live_at_exit_ratio:.0f}% held at a scope exit"


class WatchLogSink:
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
        self.log.info("run finished: %s: %s (%s)%s", name, verdict(event), event.reason, worst(event))

    def flush(self, deadline: float) -> None:
        """Nothing is buffered."""

    def close(self) -> None:
        """Nothing to release."""
