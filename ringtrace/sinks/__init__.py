"""The sinks: the contract (:mod:`.base`), their delivery (:mod:`.delivery`), and one module per output.

``from ringtrace.sinks import FanOut, Sink`` keeps working: the names below are re-exported.  Each
output is declared once in :mod:`ringtrace.reading.registry` (its flags, how it is built from the
configuration, which commands use it).
"""

from ringtrace.sinks.base import Sink, ringtrace_version
from ringtrace.sinks.delivery import (
    FINISHED_KEPT,
    FLUSH_MARGIN,
    STUCK_SECONDS,
    STUCK_SECONDS_AT_SHUTDOWN,
    FanOut,
    SinkCollector,
)

__all__ = ["FINISHED_KEPT", "FLUSH_MARGIN", "STUCK_SECONDS", "STUCK_SECONDS_AT_SHUTDOWN", "FanOut", "Sink",
           "SinkCollector", "ringtrace_version"]
