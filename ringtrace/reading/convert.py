"""``convert`` as a function: scope_stats files into one Perfetto trace (command level, beside ``read_files``)."""

from __future__ import annotations

from pathlib import Path

from ringtrace.reading.oneshot import read_files
from ringtrace.sinks import FanOut
from ringtrace.sinks.perfetto import Format, PerfettoSink
from ringtrace.stages.diagnose import Thresholds


def convert(files: list[Path], out: Path, fmt: Format = "proto", thresholds: Thresholds | None = None) -> list[str]:
    """Read ``files`` into one trace at ``out``; returns error messages.

    An empty list means every file was read and the trace was written.
    """
    try:
        sink = PerfettoSink(out, fmt)
    except OSError as err:
        return [f"{out}: cannot write: {err.strerror or err}"]
    fanout = FanOut([sink])
    errors = read_files(files, fanout, thresholds or Thresholds())
    fanout.flush()
    fanout.close()
    if sink.error is not None:
        errors.append(f"{out}: cannot write: {sink.error.strerror or sink.error}")
    elif fanout.errors.get(sink.name):
        errors.append(f"{out}: the perfetto sink failed {fanout.errors[sink.name]} time(s); see the log")
    return errors
