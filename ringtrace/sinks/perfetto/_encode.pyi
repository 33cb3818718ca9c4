"""The compiled twin of :func:`ringtrace.sinks.perfetto._records.encode` (``_encode.c``).  Used through
:mod:`ringtrace.sinks.perfetto._records`."""

from collections.abc import Sequence

from ringtrace.model.records import PairEvent, Record
from ringtrace.sinks.perfetto._layout import RingState

def bind(*, Record: type, Scope: type, Usage: type, Abandoned: type, UnmatchedEnd: type) -> None: ...
def encode(parts: list[bytes], rings: dict[int, RingState], tm_uuid: int, records: Sequence[Record],
           events: Sequence[PairEvent], i: int, ei: int, /) -> tuple[int, int]: ...
