"""The protobuf wire of the hand-encoded trace: field tags, packet templates, debug annotations.  Pure.

The hot path (one packet per boundary record) is encoded without protobuf message objects, which
cost ~10x more.  Field tags are named constants (``message.field = number``, Perfetto's numbers) and
every packet template is built from them; tests/sinks/perfetto/test_trace_writer.py checks them
against the generated ``ringtrace._pb`` module, which in turn is checked against the official
``perfetto_trace_pb2``.  The compiled encoder (``_encode.c``) writes the same bytes from the same
numbers; tests/sinks/perfetto/test_encode.py holds it to :func:`._records.encode`.
"""

from __future__ import annotations

import functools

from ringtrace.model.records import RESOURCES, Scope
from ringtrace.sinks._varint import LEN, SMALL, VARINT, tag, varint

# TracePacket
PKT_TIMESTAMP = tag(8, VARINT)  # TracePacket.timestamp = 8
PKT_SEQUENCE_ID = tag(10, VARINT)  # TracePacket.trusted_packet_sequence_id = 10
PKT_TRACK_EVENT = tag(11, LEN)  # TracePacket.track_event = 11
PKT_INTERNED_DATA = tag(12, LEN)  # TracePacket.interned_data = 12
# InternedData, EventName
INTERNED_EVENT_NAMES = tag(2, LEN)  # InternedData.event_names = 2
EVENT_NAME_IID = tag(1, VARINT)  # EventName.iid = 1
EVENT_NAME_NAME = tag(2, LEN)  # EventName.name = 2
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


def _template(*parts: bytes | None) -> bytes:
    """A ``%``-format template: constant bytes (escaped) with ``None`` as a ``%b`` slot."""
    return b"".join(b"%b" if p is None else p.replace(b"%", b"%%") for p in parts)


# Packet templates of the hot path (TrackEvent field order is free; Perfetto reads any order).
BEGIN = _template(EV_TYPE + varint(SLICE_BEGIN), None, None, EV_EXTRA_VALUE, None)  # name_iid, vals, tensormap
END = EV_TYPE + varint(SLICE_END)  # then vals, tensormap, annotations


def end_template(figures: int) -> bytes:
    """A slice end's template: vals, tensormap, depth, line (prefix, value), ``figures`` usage figures (3 per
    resource its records carry)."""
    return _template(END, None, EV_EXTRA_VALUE, *(None,) * (4 + figures))


COUNTER_EVENT = _template(EV_TYPE + varint(COUNTER), EV_TRACK_UUID, None, EV_COUNTER_VALUE, None, None, None)
PACKET_FIXED = len(PKT_TIMESTAMP) + len(PKT_TRACK_EVENT)
"""Bytes of a packet besides its timestamp, sequence id, event length, event and interned data."""


def annotation_prefixes(name_iid: int) -> tuple[bytes, ...]:
    """``prefix[k] + value`` is a whole ``debug_annotations`` field with an int value of k bytes."""
    name = ANN_NAME_IID + varint(name_iid) + ANN_INT
    return tuple(EV_DEBUG_ANNOTATION + varint(len(name) + k) + name for k in range(11))


def bool_annotation(name_iid: int) -> bytes:
    """A whole ``debug_annotations`` field: ``name_iid`` = true."""
    inner = ANN_NAME_IID + varint(name_iid) + ANN_BOOL + varint(1)
    return EV_DEBUG_ANNOTATION + varint(len(inner)) + inner


def ann(prefixes: tuple[bytes, ...], x: int) -> bytes:
    """An int ``debug_annotations`` field from its :func:`annotation_prefixes`."""
    v = varint(x)
    return prefixes[len(v)] + v


# Debug annotation names, interned on every ring sequence with these iids.
ARG_NAMES: tuple[str, ...] = (
    "depth", "line",
    *(f"{res}_{what}" for res in RESOURCES for what in ("high_water", "live_at_exit", "alloc")),
    "wedged", "unmatched_begin", "open_at_close", "orch_error_code",
)
IID_DEPTH, IID_LINE = 1, 2
IID_USAGE = 3  # + 3 * resource index + (0 high_water, 1 live_at_exit, 2 alloc)
IID_WEDGED = IID_USAGE + 3 * len(RESOURCES)  # 12 for three resources
IID_UNMATCHED, IID_OPEN_AT_CLOSE, IID_ORCH_ERROR_CODE = IID_WEDGED + 1, IID_WEDGED + 2, IID_WEDGED + 3
ANN_PREFIXES: tuple[tuple[bytes, ...], ...] = tuple(
    annotation_prefixes(i) if i else () for i in range(len(ARG_NAMES) + 1))
"""Per iid (1..len(ARG_NAMES)): its :func:`annotation_prefixes`."""
TABLE = 4096


def _annotation_table(name_iid: int) -> tuple[bytes, ...]:
    """Whole int ``debug_annotations`` fields of ``name_iid`` for the values 0..TABLE-1."""
    one, two = annotation_prefixes(name_iid)[1:3]  # values below 16384 take one or two bytes
    return tuple([one + v for v in SMALL[:128]] + [two + v for v in SMALL[128:TABLE]])


@functools.cache
def ann_tables() -> tuple[tuple[bytes, ...], ...]:
    """Per annotation name (depth, usage figures): the encoded field of each small value (~2 MB, made when the
    pure-Python encoder first runs: the compiled one needs none)."""
    return tuple(_annotation_table(i) if i == IID_DEPTH or IID_USAGE <= i < IID_WEDGED else ()
                 for i in range(IID_WEDGED))


def usage_args(scope: Scope) -> bytes:
    """The usage annotations of ``scope``, whatever is present (the hot loop's slow path)."""
    out: list[bytes] = []
    for i, u in enumerate(scope.usage):
        if u is not None:
            p = IID_USAGE + 3 * i
            out += (ann(ANN_PREFIXES[p], u.high_water), ann(ANN_PREFIXES[p + 1], u.live_at_exit),
                    ann(ANN_PREFIXES[p + 2], u.alloc))
    return b"".join(out)
