"""The protobuf trace: wire encoding by hand and :class:`ProtoTrace`, sink events -> packets.

* Wire: the hot path (one packet per boundary record) is encoded without protobuf message
  objects, which cost ~10x more.  Field tags are named constants (``message.field = number``,
  Perfetto's numbers) and every packet template is built from them;
  tests/sinks/perfetto/test_trace_writer.py checks them against the generated ``ringtrace._pb`` module,
  which in turn is checked against the official ``perfetto_trace_pb2``.  Rare packets
  (descriptors, defaults, interned annotation names) are built with ``ringtrace._pb``.
* :class:`ProtoTrace`: sink events -> packets, for any number of sources (the layout is
  described in :mod:`ringtrace.sinks.perfetto`), appended to a :class:`~._file.TraceFile`.
"""

from __future__ import annotations

from google.protobuf.message import Message

from ringtrace._pb import ringtrace_perfetto_pb2 as pb
from ringtrace.model.records import (
    RESOURCES,
    Abandoned,
    Meta,
    OpenScope,
    Record,
    RunFinished,
    RunProgress,
    RunStarted,
    Scope,
    SinkEvent,
    Source,
    utf8,
)
from ringtrace.model.runtime import TABLE as RESOURCE_TABLE
from ringtrace.model.runtime import fmt_amount
from ringtrace.sinks._varint import LEN, VARINT, tag, varint

from ._file import TRACE_PACKET, TraceFile, field_bytes, framed
from ._layout import (
    TIME_AXIS,
    VERDICT_DESCRIPTION,
    RingState,
    RunState,
    event_line,
    process_name,
    rank_pid,
    sort_key,
    verdict_kind,
    verdict_span,
)

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
_BEGIN = _template(EV_TYPE + varint(SLICE_BEGIN), None, None, EV_EXTRA_VALUE, None)  # name_iid, vals, tensormap
_END = EV_TYPE + varint(SLICE_END)  # then vals, tensormap, annotations
# vals, tensormap, depth, line (prefix, value), 6 usage figures (task window, heap)
_END6 = _template(_END, None, EV_EXTRA_VALUE, *(None,) * 10)
_END9 = _template(_END, None, EV_EXTRA_VALUE, *(None,) * 13)  # ... and 3 dep-pool figures
_COUNTER = _template(EV_TYPE + varint(COUNTER), EV_TRACK_UUID, None, EV_COUNTER_VALUE, None, None, None)
_PACKET_FIXED = len(PKT_TIMESTAMP) + len(PKT_TRACK_EVENT)
"""Bytes of a packet besides its timestamp, sequence id, event length, event and interned data."""

def annotation_prefixes(name_iid: int) -> tuple[bytes, ...]:
    """``prefix[k] + value`` is a whole ``debug_annotations`` field with an int value of k bytes."""
    name = ANN_NAME_IID + varint(name_iid) + ANN_INT
    return tuple(EV_DEBUG_ANNOTATION + varint(len(name) + k) + name for k in range(11))


def bool_annotation(name_iid: int) -> bytes:
    """A whole ``debug_annotations`` field: ``name_iid`` = true."""
    inner = ANN_NAME_IID + varint(name_iid) + ANN_BOOL + varint(1)
    return EV_DEBUG_ANNOTATION + varint(len(inner)) + inner


def framed_message(msg: Message) -> bytes:
    return framed(msg.SerializeToString())


# -- the layout ---------------------------------------------------------------------------------

# Debug annotation names, interned on every ring sequence with these iids.
ARG_NAMES: tuple[str, ...] = (
    "depth", "line",
    *(f"{res}_{what}" for res in RESOURCES for what in ("high_water", "live_at_exit", "alloc")),
    "wedged", "unmatched_begin", "open_at_close", "orch_error_code",
)
IID_DEPTH, IID_LINE = 1, 2
IID_USAGE = 3  # + 3 * resource index + (0 high_water, 1 live_at_exit, 2 alloc)
IID_WEDGED, IID_UNMATCHED, IID_OPEN_AT_CLOSE, IID_ORCH_ERROR_CODE = 12, 13, 14, 15
_TABLE = 4096


def _annotation_table(name_iid: int) -> tuple[bytes, ...]:
    """Whole int ``debug_annotations`` fields of ``name_iid`` for the values 0.._TABLE-1."""
    prefix = annotation_prefixes(name_iid)
    return tuple(prefix[len(varint(x))] + varint(x) for x in range(_TABLE))


_ANN_TABLES: tuple[tuple[bytes, ...], ...] = tuple(
    _annotation_table(i) if i == IID_DEPTH or IID_USAGE <= i < IID_WEDGED else () for i in range(IID_WEDGED))
"""Per annotation name (depth, usage figures): the encoded field of each small value (~2 MB)."""


def _usage_args(scope: Scope) -> bytes:
    """The usage annotations of ``scope``, whatever is present (the hot loop's slow path)."""
    out: list[bytes] = []
    for i, u in enumerate(scope.usage):
        if u is not None:
            p = IID_USAGE + 3 * i
            out += (_ann(annotation_prefixes(p), u.high_water), _ann(annotation_prefixes(p + 1), u.live_at_exit),
                    _ann(annotation_prefixes(p + 2), u.alloc))
    return b"".join(out)


def _ann(prefixes: tuple[bytes, ...], x: int) -> bytes:
    """An int ``debug_annotations`` field from its :func:`annotation_prefixes`."""
    v = varint(x)
    return prefixes[len(v)] + v
_UNITS = {r.name: r.unit for r in RESOURCE_TABLE}
_IN_BYTES = frozenset(r.name for r in RESOURCE_TABLE if r.bytes)


def _cap_text(meta: Meta | None, resource: str, ring: int) -> str:
    cap = meta.capacity(resource, ring) if meta is not None else None
    return "cap ?" if cap is None else f"cap {fmt_amount(resource, cap)}"

def _packet(at: int, ring: RingState, te: bytes) -> bytes:
    """A framed packet holding track event ``te`` at ``at`` on ``ring``'s sequence (the rare paths)."""
    pkt = PKT_TIMESTAMP + varint(at) + ring.seq + PKT_TRACK_EVENT + varint(len(te)) + te
    return TRACE_PACKET + varint(len(pkt)) + pkt


class ProtoTrace:
    """Encodes sink events of any number of sources into one :class:`TraceFile`.

    A run's process descriptor is written when it finishes, with pid :func:`rank_pid`; with
    ``defer_processes`` the descriptors wait for :meth:`close`, where pids 1..n follow the rank
    order of every source in the trace (:func:`sort_key`).
    """

    def __init__(self, out: TraceFile, defer_processes: bool = False) -> None:
        self.out = out
        self.defer = defer_processes
        self.runs: dict[Source, RunState] = {}
        self.done: list[RunState] = []  # finished runs whose process descriptor is deferred
        self._next_uuid = 1
        self._next_seq = 1
        self._ann = tuple(annotation_prefixes(i) if i else () for i in range(len(ARG_NAMES) + 1))
        self.records = 0

    # -- ids ------------------------------------------------------------------------------------

    def _uuid(self) -> int:
        self._next_uuid += 1
        return self._next_uuid

    def _seq(self) -> int:
        self._next_seq += 1
        return self._next_seq

    # -- events ---------------------------------------------------------------------------------

    def receive(self, event: SinkEvent) -> None:
        if isinstance(event, RunProgress):
            run = self.runs.get(event.source) or self._start(event.source, None)
            self._progress(run, event)
            if event.summary is not None:
                run.open = event.summary.open
        elif isinstance(event, RunStarted):
            known = self.runs.get(event.source)
            if known is None:
                self._start(event.source, event.meta)
            elif known.meta is None:
                known.meta = event.meta
        elif isinstance(event, RunFinished):
            run = self.runs.get(event.source) or self._start(event.source, event.summary.meta)
            self._finish(run, event)
        self.out.spill()

    def _start(self, source: Source, meta: Meta | None) -> RunState:
        run = RunState(source, meta, self._uuid(), self._uuid())
        self.runs[source] = run
        tm = pb.TrackDescriptor(uuid=run.tm_uuid, parent_uuid=run.uuid, sibling_order_rank=10_000,
                                name=f"tensormap (cap {meta.tensormap_max if meta and meta.tensormap_max else '?'})",
                                description=f"live tensormap entries at each boundary record; {TIME_AXIS}",
                                counter=pb.CounterDescriptor(unit=pb.CounterDescriptor.UNIT_COUNT,
                                                             unit_name="entries"))
        self.out.parts.append(framed_message(pb.TracePacket(track_descriptor=tm)))
        return run

    def _new_ring(self, run: RunState, rec: Record) -> RingState:
        r = rec.ring
        has_dp = rec.dep_pool_end is not None
        seq = self._seq()
        ring = RingState(r, PKT_SEQUENCE_ID + varint(seq), self._uuid(), has_dp)
        run.rings[r] = ring
        meta = run.meta
        counters: list[int] = []
        packets: list[pb.TracePacket] = []
        for i, res in enumerate(RESOURCES):
            if res == "dep_pool" and not has_dp:
                continue
            uuid = self._uuid()
            counters.append(uuid)
            unit = pb.CounterDescriptor.UNIT_SIZE_BYTES if res in _IN_BYTES else pb.CounterDescriptor.UNIT_COUNT
            cap = meta.capacity(res, r) if meta is not None else None
            desc = (f"live {res} on ring {r}: head - tail at each boundary record of the ring; "
                    f"capacity {cap if cap is not None else 'unknown'} {_UNITS[res]}; {TIME_AXIS}")
            packets.append(pb.TracePacket(trusted_packet_sequence_id=seq, track_descriptor=pb.TrackDescriptor(
                uuid=uuid, parent_uuid=run.uuid, name=f"ring {r} {res} ({_cap_text(meta, res, r)})",
                description=desc, sibling_order_rank=1000 + 10 * r + i,
                counter=pb.CounterDescriptor(unit=unit, unit_name=_UNITS[res]))))
        ring.extra = b"".join(EV_EXTRA_UUID + varint(u) for u in counters)
        counters.append(run.tm_uuid)
        kinds = [res for res in RESOURCES if res != "dep_pool" or has_dp]
        caps = [meta.capacity(res, r) if meta is not None else None for res in kinds]
        if all(c is not None for c in caps):  # use % of capacity beside each absolute counter
            ring.caps = tuple(c or 1 for c in caps)
            pct = []
            for i, (res, cap) in enumerate(zip(kinds, ring.caps, strict=True)):
                uuid = self._uuid()
                pct.append(uuid)
                packets.append(pb.TracePacket(trusted_packet_sequence_id=seq, track_descriptor=pb.TrackDescriptor(
                    uuid=uuid, parent_uuid=run.uuid, name=f"ring {r} {res} use % (of {fmt_amount(res, cap)})",
                    description=f"live {res} on ring {r} as a share of its capacity, 0-100 (over 100: never; "
                                f"a ring holds at most its capacity); {TIME_AXIS}",
                    sibling_order_rank=1000 + 10 * r + i + 5,
                    counter=pb.CounterDescriptor(unit=pb.CounterDescriptor.UNIT_COUNT, unit_name="%"))))
            ring.pct_extra = b"".join(EV_EXTRA_UUID + varint(u) for u in pct)
            counters += pct
        first = pb.TracePacket(
            trusted_packet_sequence_id=seq,
            sequence_flags=pb.TracePacket.SEQ_INCREMENTAL_STATE_CLEARED,
            track_descriptor=pb.TrackDescriptor(
                uuid=ring.uuid, parent_uuid=run.uuid, name=f"ring {r} scopes (1 ns = 1 record)", sibling_order_rank=r,
                description=f"scopes on ring {r} as nested slices (name = site); {TIME_AXIS}"),
            trace_packet_defaults=pb.TracePacketDefaults(track_event_defaults=pb.TrackEventDefaults(
                track_uuid=ring.uuid, extra_counter_track_uuids=counters)),
            interned_data=pb.InternedData(debug_annotation_names=[
                pb.DebugAnnotationName(iid=i + 1, name=n) for i, n in enumerate(ARG_NAMES)]))
        parts = self.out.parts
        parts.append(framed_message(first))
        parts.extend(framed_message(p) for p in packets)
        return ring

    def _intern(self, ring: RingState, site: str) -> tuple[bytes, bytes]:
        """A new site on ``ring``'s sequence: its encoded name_iid field and the interned_data field to add."""
        code = len(ring.names) + 1
        iid = ring.names[site] = EV_NAME_IID + varint(code)
        entry = EVENT_NAME_IID + varint(code) + field_bytes(EVENT_NAME_NAME, site.encode())
        return iid, field_bytes(PKT_INTERNED_DATA, field_bytes(INTERNED_EVENT_NAMES, entry))

    def _progress(self, run: RunState, ev: RunProgress) -> None:
        """One packet per record (slice begin/end or counters) plus ends of abandoned scopes.

        The hot loop of the sink: whole annotation fields of small values come from tables, everything is
        local.  The pair events are in record order and each names the line of the record that caused it,
        so the two lists are merged in one pass; a closing :class:`Scope` ends the top slice of its track.
        """
        records = ev.records
        if not records:
            return
        self.records += len(records)
        app = self.out.parts.append
        rings = run.rings
        events = ev.events
        ne = len(events)
        ei = 0
        ev_line = event_line(events[0]) if ne else -1
        join = b"".join
        ann = self._ann
        a_depth, a_line = ann[IID_DEPTH], ann[IID_LINE]
        a_usage = ann[IID_USAGE:IID_USAGE + 3 * len(RESOURCES)]
        T_DEPTH = _ANN_TABLES[IID_DEPTH]
        T0, T1, T2, T3, T4, T5, T6, T7, T8 = _ANN_TABLES[IID_USAGE:IID_USAGE + 9]
        P0, P1, P2, P3, P4, P5, P6, P7, P8 = a_usage
        last_r = records[0].ring
        ring = rings.get(last_r) or self._new_ring(run, records[0])
        for rec in records:
            line = rec.line
            r = rec.ring
            if r != last_r:
                ring = rings.get(r) or self._new_ring(run, rec)
                last_r = r
            closing: Scope | None = None
            if line == ev_line:
                while True:
                    pe = events[ei]
                    if isinstance(pe, Scope):
                        closing = pe
                    elif isinstance(pe, Abandoned):
                        self._end(run, pe.scope, line, IID_UNMATCHED)
                    ei += 1
                    ev_line = event_line(events[ei]) if ei < ne else -1
                    if ev_line != line:
                        break
            x0 = rec.task_window_end - rec.task_window_start
            a = varint(x0)
            x1 = rec.heap_end - rec.heap_start
            b = varint(x1)
            caps = ring.caps
            if ring.has_dp:
                x = (rec.dep_pool_end or 0) - (rec.dep_pool_start or 0)
                c = varint(x)
                vals = join((EV_EXTRA_VALUE, a, EV_EXTRA_VALUE, b, EV_EXTRA_VALUE, c))
                pct = join((EV_EXTRA_VALUE, varint(100 * x0 // caps[0]), EV_EXTRA_VALUE, varint(100 * x1 // caps[1]),
                            EV_EXTRA_VALUE, varint(100 * x // caps[2]))) if caps else b""
            else:
                vals = join((EV_EXTRA_VALUE, a, EV_EXTRA_VALUE, b))
                pct = join((EV_EXTRA_VALUE, varint(100 * x0 // caps[0]), EV_EXTRA_VALUE,
                            varint(100 * x1 // caps[1]))) if caps else b""
            x = rec.tensormap
            vt = varint(x)
            vtp = vt + pct  # the tensormap's value, then the use-% values (the defaults' counter order)
            ts = varint(line)
            if rec.phase == "begin":
                site = rec.site
                iid = ring.names.get(site)
                interned = b""
                if iid is None:
                    iid, interned = self._intern(ring, site)
                te = _BEGIN % (iid, vals, vtp)
            elif closing is not None and closing.begin_ring is None:
                interned = b""
                x = closing.begin_line
                b = varint(x)
                x = closing.depth
                a = T_DEPTH[x] if 0 <= x < _TABLE else _ann(a_depth, x)
                u_tw, u_hp, u_dp = closing.usage
                if u_tw is None or u_hp is None:  # not from the pairer: every scope has these two
                    te = join((_END, vals, EV_EXTRA_VALUE, vtp, a, a_line[len(b)], b, _usage_args(closing)))
                else:
                    x = u_tw.high_water
                    v0 = T0[x] if 0 <= x < _TABLE else _ann(P0, x)
                    x = u_tw.live_at_exit
                    v1 = T1[x] if 0 <= x < _TABLE else _ann(P1, x)
                    x = u_tw.alloc
                    v2 = T2[x] if 0 <= x < _TABLE else _ann(P2, x)
                    x = u_hp.high_water
                    v3 = T3[x] if 0 <= x < _TABLE else _ann(P3, x)
                    x = u_hp.live_at_exit
                    v4 = T4[x] if 0 <= x < _TABLE else _ann(P4, x)
                    x = u_hp.alloc
                    v5 = T5[x] if 0 <= x < _TABLE else _ann(P5, x)
                    if u_dp is None:
                        te = _END6 % (vals, vtp, a, a_line[len(b)], b, v0, v1, v2, v3, v4, v5)
                    else:
                        x = u_dp.high_water
                        v6 = T6[x] if 0 <= x < _TABLE else _ann(P6, x)
                        x = u_dp.live_at_exit
                        v7 = T7[x] if 0 <= x < _TABLE else _ann(P7, x)
                        x = u_dp.alloc
                        v8 = T8[x] if 0 <= x < _TABLE else _ann(P8, x)
                        te = _END9 % (vals, vtp, a, a_line[len(b)], b, v0, v1, v2, v3, v4, v5, v6, v7, v8)
            else:
                interned = b""
                if closing is not None:  # its begin is on another ring (odd data): end it there
                    self._end(run, OpenScope(closing.site, closing.depth, closing.begin_ring or 0, closing.begin_line),
                              line, 0)
                te = _COUNTER % (varint(run.tm_uuid), vt, ring.extra + ring.pct_extra, vals + pct)
            n = len(te)
            lte = varint(n)
            n += _PACKET_FIXED + len(ts) + ring.seq_len + len(lte) + len(interned)
            app(join((TRACE_PACKET, varint(n), PKT_TIMESTAMP, ts, ring.seq, PKT_TRACK_EVENT, lte, te,
                      interned)))
        run.last_line = records[-1].line

    def _end(self, run: RunState, scope: OpenScope, at: int, flag_iid: int) -> None:
        """End ``scope``'s slice (the top one of its ring's track) at ``at``, flagged with ``flag_iid``."""
        ring = run.rings.get(scope.ring)
        if ring is None:  # never begun in this trace
            return
        ann = self._ann
        te = (_END + ann[IID_DEPTH][len(v := varint(scope.depth))] + v
              + ann[IID_LINE][len(v := varint(scope.line))] + v)
        if flag_iid:
            te += bool_annotation(flag_iid)
        self.out.parts.append(_packet(at, ring, te))

    def _instant(self, run: RunState, ring: RingState, at: int, name: str, line: int, depth: int,
                 extra: bytes = b"") -> None:
        ann = self._ann
        te = (EV_TYPE + varint(INSTANT) + field_bytes(EV_NAME, name.encode())
              + ann[IID_DEPTH][len(v := varint(depth))] + v + ann[IID_LINE][len(v := varint(line))] + v + extra)
        self.out.parts.append(_packet(at, ring, te))

    def _finish(self, run: RunState, fin: RunFinished | None) -> None:
        """End the pairer's open scopes (:meth:`RunState.finish`), innermost first, with a WEDGED instant
        inside the innermost when the run wedged; a finished run's verdict on a track of its own."""
        opened, wedged, at = run.finish(fin)
        if wedged and fin is not None and opened and opened[-1].ring in run.rings:
            inner = opened[-1]
            code = fin.verdict.code  # the verdict's: the host log's, else the likely one
            extra = _ann(annotation_prefixes(IID_ORCH_ERROR_CODE), code) if code is not None else b""
            self._instant(run, run.rings[inner.ring], at, "WEDGED", inner.line, inner.depth, extra)
        if fin is not None:
            self._verdict_track(run, fin, at)
        for scope in reversed(opened):
            self._end(run, scope, at, IID_WEDGED if wedged else IID_OPEN_AT_CLOSE)
        del self.runs[run.source]
        if self.defer:
            self.done.append(run)
        else:
            self._process(run, rank_pid(run.source.labels.rank))

    def _verdict_track(self, run: RunState, fin: RunFinished, at: int) -> None:
        """A track of its own, first in the process, named by the verdict's kind (``WEDGED``, ``FAILED``,
        ``CUT SHORT``, ``HEALTHY`` ...), with one slice named by its short text: from the wedged scope's begin
        (a wedge) or the run's first line to its end.  Rendered from ``fin.verdict``, never decided here."""
        v = fin.verdict
        uuid = self._uuid()
        seq = self._seq()
        start, end = verdict_span(v, at)
        args = [pb.DebugAnnotation(name="verdict_kind", string_value=v.kind),
                pb.DebugAnnotation(name="verdict_severity", string_value=v.severity),
                pb.DebugAnnotation(name="verdict_text", string_value=utf8(v.text))]
        if v.code is not None:
            args.append(pb.DebugAnnotation(name="orch_error_code", int_value=v.code))
        packets = [
            pb.TracePacket(trusted_packet_sequence_id=seq, sequence_flags=pb.TracePacket.SEQ_INCREMENTAL_STATE_CLEARED,
                           track_descriptor=pb.TrackDescriptor(
                uuid=uuid, parent_uuid=run.uuid, name=verdict_kind(v), sibling_order_rank=-1,
                description=f"{VERDICT_DESCRIPTION}. {v.severity}: {utf8(v.text)}")),
            pb.TracePacket(timestamp=start, trusted_packet_sequence_id=seq, track_event=pb.TrackEvent(
                type=pb.TrackEvent.TYPE_SLICE_BEGIN, track_uuid=uuid, name=utf8(v.short), debug_annotations=args)),
            pb.TracePacket(timestamp=end, trusted_packet_sequence_id=seq,
                           track_event=pb.TrackEvent(type=pb.TrackEvent.TYPE_SLICE_END, track_uuid=uuid))]
        self.out.parts.extend(framed_message(p) for p in packets)

    def _process(self, run: RunState, pid: int) -> None:
        desc = pb.TrackDescriptor(
            uuid=run.uuid, description=utf8(run.description), child_ordering=pb.TrackDescriptor.EXPLICIT,
            sibling_order_rank=pid,  # rank order
            process=pb.ProcessDescriptor(pid=pid, process_name=utf8(process_name(run.source)),
                                         process_labels=[utf8(x) for x in run.labels]))
        self.out.parts.append(framed_message(pb.TracePacket(track_descriptor=desc)))

    def close(self) -> None:
        """End runs that never finished, write deferred process descriptors (pids in rank order)."""
        for run in list(self.runs.values()):
            self._finish(run, None)
        for pid, run in enumerate(sorted(self.done, key=lambda r: sort_key(r.source)), start=1):
            self._process(run, pid)
        self.done.clear()
