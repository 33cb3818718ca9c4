"""ringtrace: read the simpler runtime's scope_stats files into paired scopes, ring peaks and wedges.

The public API (everything else is private and may change):

* records passed between stages: :class:`Meta`, :class:`Record`, :class:`Scope`, :class:`Usage`,
  :class:`Peak`, :class:`RunSummary`, :class:`Finding`, :class:`Source`, :class:`Labels` and the
  sink events :class:`RunStarted`, :class:`RunProgress`, :class:`RunFinished`;
* the pure stages: :class:`Decoder` (bytes -> records), :class:`Pairer` (records -> scopes),
  :class:`Run` (both, for one run of one file), :func:`diagnose`;
* reading files: :func:`read_files`; the sink contract: :class:`Sink`, :class:`FanOut`;
* host logs: :class:`HostLogParser` (bytes -> :class:`HostLog`), :func:`match_logs` (logs -> files),
  :func:`log_only_run` (a failed run that left no scope_stats file);
* configuration: :class:`Config`, :func:`build_config`.

The exporters live in ``ringtrace.sinks.*`` and are imported on demand (they pull in
prometheus-client, OpenTelemetry and protobuf).
"""

from ringtrace.config import Config, Thresholds
from ringtrace.config import build as build_config
from ringtrace.gather.oneshot import read_files
from ringtrace.gather.pairing import match_logs
from ringtrace.hostlog.parse import HostLogParser
from ringtrace.model.records import (
    Finding,
    HostLog,
    Labels,
    Meta,
    Peak,
    Record,
    RunFinished,
    RunProgress,
    RunStarted,
    RunSummary,
    Scope,
    Source,
    Usage,
)
from ringtrace.sinks import FanOut, Sink
from ringtrace.stages.decode import Decoder
from ringtrace.stages.diagnose import diagnose
from ringtrace.stages.pair import Pairer
from ringtrace.stages.run import Run, log_only_run

__all__ = [
    "Config",
    "Decoder",
    "FanOut",
    "Finding",
    "HostLog",
    "HostLogParser",
    "Labels",
    "Meta",
    "Pairer",
    "Peak",
    "Record",
    "Run",
    "RunFinished",
    "RunProgress",
    "RunStarted",
    "RunSummary",
    "Scope",
    "Sink",
    "Source",
    "Thresholds",
    "Usage",
    "build_config",
    "diagnose",
    "log_only_run",
    "match_logs",
    "read_files",
]
