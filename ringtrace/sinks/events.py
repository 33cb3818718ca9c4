"""The events sink: one JSON line per finished run (the summary's file object + ``reason``)."""

from __future__ import annotations

from typing import IO

import msgspec

from ringtrace.records import WANT_SUMMARIES, RunFinished, SinkEvent
from ringtrace.sinks.summary import file_object


class EventsSink:
    """Writes to ``stream`` (owned by the caller unless ``owns`` is set).  Line-buffered writes only."""

    name = "events"
    wants = WANT_SUMMARIES

    def __init__(self, stream: IO[bytes], owns: bool = False) -> None:
        self._stream = stream
        self._owns = owns
        self._encoder = msgspec.json.Encoder()

    def receive(self, event: SinkEvent) -> None:
        if isinstance(event, RunFinished):
            obj = file_object(event)
            obj["reason"] = event.reason
            self._stream.write(self._encoder.encode(obj) + b"\n")
            self._stream.flush()

    def flush(self) -> None:
        self._stream.flush()

    def close(self) -> None:
        self._stream.flush()
        if self._owns:
            self._stream.close()
