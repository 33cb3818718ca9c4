"""Protobuf wire encoding for Perfetto traces, by hand, and the atomic streaming trace file.

The hot path (one packet per boundary record) is encoded here without protobuf message
objects: building messages costs ~10x more.  Field numbers are Perfetto's; each constant names
its ``message.field = number`` and tests/sinks/test_perfetto.py checks them against the
generated ``ringtrace._pb`` module, which in turn is checked against the official
``perfetto_trace_pb2``.  Rare packets (descriptors, interned data) are built with ``ringtrace._pb``.

:class:`TraceFile` appends framed ``Trace.packet`` entries to ``<path>.tmp`` and renames it to
``path`` in :meth:`TraceFile.commit` (atomic: ``path`` is never a partial trace).  With
``compress`` (the default) packets are batched and written as ``TracePacket.compressed_packets``
(a zlib-deflated ``Trace``: Perfetto's own packet compression, read by the trace processor),
so memory is O(batch), never O(trace).
"""

from __future__ import annotations

import os
import zlib
from pathlib import Path

from google.protobuf.message import Message

_MASK64 = (1 << 64) - 1


def _encode_varint(n: int) -> bytes:
    out = bytearray()
    while n > 0x7F:
        out.append((n & 0x7F) | 0x80)
        n >>= 7
    out.append(n)
    return bytes(out)


SMALL: tuple[bytes, ...] = tuple(_encode_varint(i) for i in range(1 << 14))
"""Encoded varints of 0..16383 (1 or 2 bytes), the common case."""
CONT: tuple[bytes, ...] = tuple(bytes(((i & 0x7F) | 0x80, (i >> 7) | 0x80)) for i in range(1 << 14))
"""14 low bits of a longer varint: two bytes, both with the continuation bit."""


def varint(n: int) -> bytes:
    """Base-128 varint of an int64/uint64; negatives as 64-bit two's complement (10 bytes)."""
    if 0 <= n < 16384:
        return SMALL[n]
    if n < 0:
        n &= _MASK64
    out = CONT[n & 16383]
    n >>= 14
    while n >= 16384:
        out += CONT[n & 16383]
        n >>= 14
    return out + SMALL[n]


def tag(field: int, wire_type: int) -> bytes:
    return varint((field << 3) | wire_type)


VARINT, LEN = 0, 2

# Trace
TRACE_PACKET = tag(1, LEN)  # Trace.packet = 1
# TracePacket
PKT_TIMESTAMP = tag(8, VARINT)  # TracePacket.timestamp = 8
PKT_SEQUENCE_ID = tag(10, VARINT)  # TracePacket.trusted_packet_sequence_id = 10
PKT_TRACK_EVENT = tag(11, LEN)  # TracePacket.track_event = 11
PKT_COMPRESSED = tag(50, LEN)  # TracePacket.compressed_packets = 50
# TrackEvent
EV_DEBUG_ANNOTATION = tag(4, LEN)  # TrackEvent.debug_annotations = 4
EV_TYPE = tag(9, VARINT)  # TrackEvent.type = 9
EV_NAME_IID = tag(10, VARINT)  # TrackEvent.name_iid = 10
EV_TRACK_UUID = tag(11, VARINT)  # TrackEvent.track_uuid = 11
EV_EXTRA_VALUE = tag(12, VARINT)  # TrackEvent.extra_counter_values = 12
EV_NAME = tag(23, LEN)  # TrackEvent.name = 23
EV_COUNTER_VALUE = tag(30, VARINT)  # TrackEvent.counter_value = 30
EV_EXTRA_UUID = tag(31, VARINT)  # TrackEvent.extra_counter_track_uuids = 31
# DebugAnnotation
ANN_NAME_IID = tag(1, VARINT)  # DebugAnnotation.name_iid = 1
ANN_BOOL = tag(2, VARINT)  # DebugAnnotation.bool_value = 2
ANN_INT = tag(4, VARINT)  # DebugAnnotation.int_value = 4
# TrackEvent.Type
SLICE_BEGIN, SLICE_END, INSTANT, COUNTER = 1, 2, 3, 4

MAX_EXTRA_COUNTERS = 8
"""Perfetto accepts at most 8 extra counter values per track event."""


def field_bytes(field_tag: bytes, payload: bytes) -> bytes:
    """A length-delimited field: tag, length, payload."""
    return field_tag + varint(len(payload)) + payload


def annotation_prefixes(name_iid: int) -> tuple[bytes, ...]:
    """``prefix[k] + value`` is a whole ``debug_annotations`` field with an int value of k bytes."""
    name = ANN_NAME_IID + varint(name_iid) + ANN_INT
    return tuple(EV_DEBUG_ANNOTATION + varint(len(name) + k) + name for k in range(11))


def framed(packet: bytes) -> bytes:
    """One ``Trace.packet`` entry."""
    return TRACE_PACKET + varint(len(packet)) + packet


def framed_message(msg: Message) -> bytes:
    return framed(msg.SerializeToString())


class TraceFile:
    """A trace being written: ``parts`` collects framed packets; :meth:`spill` writes them out.

    Callers append framed packets to ``parts`` (and their sizes to ``pending``) and call
    :meth:`spill` now and then; nothing is written to ``path`` itself until :meth:`commit`.
    Single-threaded.  Raises OSError from the file system; the sinks catch it.
    """

    def __init__(self, path: Path, compress: bool = True, batch: int = 1 << 20, level: int = 1) -> None:
        self.path = path
        self.tmp = path.with_suffix(path.suffix + ".tmp")
        self.compress = compress
        self.batch = batch
        self.level = level
        self.parts: list[bytes] = []
        self.raw_bytes = 0  # uncompressed framed bytes produced so far (for figures)
        self.written = 0  # bytes written to the file so far
        self._fh = self.tmp.open("wb")

    def spill(self, force: bool = False) -> None:
        """Write the collected packets once they reach ``batch`` bytes (or now, with ``force``)."""
        parts = self.parts
        if not parts:
            return
        size = sum(map(len, parts))
        if size < self.batch and not force:
            return
        data = b"".join(parts)
        parts.clear()
        self.raw_bytes += len(data)
        if self.compress:
            data = framed(field_bytes(PKT_COMPRESSED, zlib.compress(data, self.level)))
        self._fh.write(data)
        self.written += len(data)

    def flush(self) -> None:
        self.spill(force=True)
        self._fh.flush()

    def commit(self) -> None:
        """Write everything, close, and atomically rename the temp file to ``path``."""
        self.flush()
        self._fh.close()
        os.replace(self.tmp, self.path)

    def abort(self) -> None:
        """Close and remove the temp file (``path`` is left untouched)."""
        self.parts.clear()
        try:
            self._fh.close()
        finally:
            self.tmp.unlink(missing_ok=True)
