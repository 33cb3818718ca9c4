"""The protobuf trace: :class:`ProtoTrace`, sink events -> packets, for any number of sources (the layout is
described in :mod:`ringtrace.sinks.perfetto`), appended to a :class:`~._file.TraceFile`.

The packets of records (one per boundary record, the hot path) are written by :mod:`._records` from the
wire of :mod:`._wire`; the rare packets (descriptors, defaults, interned names, the ends of scopes left
open, the verdict) here, with ``ringtrace._pb`` messages or the same wire.
"""

from __future__ import annotations

from google.protobuf.message import Message

from ringtrace._pb import ringtrace_perfetto_pb2 as pb
from ringtrace.model.records import (
    RESOURCES,
    Meta,
    OpenScope,
    Record,
    RunFinished,
    RunProgress,
    RunStarted,
    SinkEvent,
    Source,
    utf8,
)
from ringtrace.model.runtime import TABLE as RESOURCE_TABLE
from ringtrace.model.runtime import fmt_amount
from ringtrace.sinks._varint import varint

from ._file import TRACE_PACKET, TraceFile, field_bytes, framed
from ._layout import (
    TIME_AXIS,
    VERDICT_DESCRIPTION,
    RingState,
    RunState,
    present,
    process_name,
    rank_pid,
    sort_key,
    verdict_kind,
    verdict_span,
)
from ._records import COMPILED, write
from ._wire import (
    ANN_PREFIXES,
    ARG_NAMES,
    END,
    EV_EXTRA_UUID,
    EV_NAME,
    EV_NAME_IID,
    EV_TYPE,
    EVENT_NAME_IID,
    EVENT_NAME_NAME,
    IID_DEPTH,
    IID_LINE,
    IID_OPEN_AT_CLOSE,
    IID_ORCH_ERROR_CODE,
    IID_WEDGED,
    INSTANT,
    INTERNED_EVENT_NAMES,
    MAX_EXTRA_COUNTERS,
    PKT_INTERNED_DATA,
    PKT_SEQUENCE_ID,
    PKT_TIMESTAMP,
    PKT_TRACK_EVENT,
    ann,
    bool_annotation,
)


def framed_message(msg: Message) -> bytes:
    return framed(msg.SerializeToString())


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
    order of every source in the trace (:func:`sort_key`).  ``compiled``: records are written by the compiled
    encoder (:mod:`._records`; the default where it was built, unless ``RINGTRACE_PURE=1``).
    """

    def __init__(self, out: TraceFile, defer_processes: bool = False, compiled: bool = COMPILED) -> None:
        self.out = out
        self.defer = defer_processes
        self.compiled = compiled
        self.runs: dict[Source, RunState] = {}
        self.done: list[RunState] = []  # finished runs whose process descriptor is deferred
        self._next_uuid = 1
        self._next_seq = 1
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

    def new_ring(self, run: RunState, rec: Record) -> RingState:
        r = rec.ring
        seq = self._seq()
        ring = RingState(r, PKT_SEQUENCE_ID + varint(seq), self._uuid(), present(rec))
        run.rings[r] = ring
        meta = run.meta
        counters: list[int] = []
        packets: list[pb.TracePacket] = []
        kinds = [RESOURCES[i] for i in ring.present]
        for i, res in enumerate(RESOURCES):
            if res not in kinds:
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
        caps = [meta.capacity(res, r) if meta is not None else None for res in kinds]
        if all(c is not None for c in caps) and 2 * len(kinds) + 1 <= MAX_EXTRA_COUNTERS:
            # use % of capacity beside each absolute counter (where they fit: Perfetto takes 8 extra counters)
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

    def intern(self, ring: RingState, site: str) -> tuple[bytes, bytes]:
        """A new site on ``ring``'s sequence: its encoded name_iid field and the interned_data field to add."""
        code = len(ring.names) + 1
        iid = ring.names[site] = EV_NAME_IID + varint(code)
        entry = EVENT_NAME_IID + varint(code) + field_bytes(EVENT_NAME_NAME, site.encode())
        return iid, field_bytes(PKT_INTERNED_DATA, field_bytes(INTERNED_EVENT_NAMES, entry))

    def _progress(self, run: RunState, ev: RunProgress) -> None:
        """One packet per record (slice begin/end or counters) plus ends of abandoned scopes (:mod:`._records`)."""
        records = ev.records
        if not records:
            return
        self.records += len(records)
        write(self, self.out.parts, run, records, ev.events, self.compiled)
        run.last_line = records[-1].line

    def end(self, run: RunState, scope: OpenScope, at: int, flag_iid: int) -> None:
        """End ``scope``'s slice (the top one of its ring's track) at ``at``, flagged with ``flag_iid``."""
        ring = run.rings.get(scope.ring)
        if ring is None:  # never begun in this trace
            return
        pre = ANN_PREFIXES
        te = (END + pre[IID_DEPTH][len(v := varint(scope.depth))] + v
              + pre[IID_LINE][len(v := varint(scope.line))] + v)
        if flag_iid:
            te += bool_annotation(flag_iid)
        self.out.parts.append(_packet(at, ring, te))

    def _instant(self, run: RunState, ring: RingState, at: int, name: str, line: int, depth: int,
                 extra: bytes = b"") -> None:
        pre = ANN_PREFIXES
        te = (EV_TYPE + varint(INSTANT) + field_bytes(EV_NAME, name.encode())
              + pre[IID_DEPTH][len(v := varint(depth))] + v + pre[IID_LINE][len(v := varint(line))] + v + extra)
        self.out.parts.append(_packet(at, ring, te))

    def _finish(self, run: RunState, fin: RunFinished | None) -> None:
        """End the pairer's open scopes (:meth:`RunState.finish`), innermost first, with a WEDGED instant
        inside the innermost when the run wedged; a finished run's verdict on a track of its own."""
        opened, wedged, at = run.finish(fin)
        if wedged and fin is not None and opened and opened[-1].ring in run.rings:
            inner = opened[-1]
            code = fin.verdict.code  # the verdict's: the host log's, else the likely one
            extra = ann(ANN_PREFIXES[IID_ORCH_ERROR_CODE], code) if code is not None else b""
            self._instant(run, run.rings[inner.ring], at, "WEDGED", inner.line, inner.depth, extra)
        if fin is not None:
            self._verdict_track(run, fin, at)
        for scope in reversed(opened):
            self.end(run, scope, at, IID_WEDGED if wedged else IID_OPEN_AT_CLOSE)
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
