"""The Perfetto sinks: scope timelines as native protobuf TrackEvent traces (or Chrome JSON).

:class:`PerfettoSink` writes every source it receives into one trace (``convert``);
:class:`PerfettoDirSink` writes one trace per finished run into a directory (``watch``).  Both
stream: packets are appended to ``<file>.tmp`` as events arrive and the file is renamed into
place when it is complete, so a trace file is never seen half-written.  Memory is O(nesting
depth) per open run plus one compression batch (1 MiB), never the trace.

Layout of a trace:

* one process per source, named :attr:`Source.name` (run/rank/dispatch).  pids follow the
  rank order (``convert``: all sources sorted by run, rank, dispatch; dir sink: rank + 1).
  The process descriptor is written when the run ends, so its description and labels can
  state the version, ``fatal``, ``dropped``, an incomplete file and a wedge;
* under it, one track per ring (``ring N``) holding the scopes as nested slices: name = site;
  args (on the end event, which the trace processor merges into the slice): ``depth``,
  ``line`` (the begin's line) and ``<resource>_high_water|_live_at_exit|_alloc`` for paired
  scopes; ``unmatched_begin`` for a begin that never ended (closed at the record that
  abandoned it); ``wedged`` for a scope still open at the end of the run (closed at the
  final tick, plus an instant ``WEDGED`` inside the innermost one);
* counter tracks ``ring N <resource> (cap ...)``: the live occupancy (head - tail) of the
  ring at each of its boundary records (heap in bytes, ``UNIT_SIZE_BYTES``), and
  ``tensormap (cap ...)``.  Counter values ride on the slice events as
  ``extra_counter_values`` (at most 4 per event; Perfetto's limit is 8).

Time axis: records have no timestamps; 1 ns of trace time is one boundary record and an
event's timestamp is the record's line number in the file (set Perfetto's timestamp format to
"Raw" to read line numbers).  Every slice boundary is its own record, so nested slices never
share a timestamp.  The ``chrome-json`` format uses 1 us per record (JSON's unit) and keeps
the same layout; it is meant for small traces.

Encoding: one packet sequence per (source, ring) whose first packet clears the incremental
state, interns the annotation names and sets ``TrackEventDefaults`` (the ring's slice track
and its counter tracks); site names are interned per sequence.  Packets are written inside
``compressed_packets`` (zlib), Perfetto's own packet compression.
"""

from __future__ import annotations

import contextlib
import json
import logging
import re
from collections.abc import Callable
from pathlib import Path
from typing import IO, Literal

from ringtrace._pb import ringtrace_perfetto_pb2 as pb
from ringtrace.diagnose import Thresholds, fmt_amount
from ringtrace.readfiles import read_files
from ringtrace.records import (
    RESOURCES,
    Abandoned,
    Meta,
    PairEvent,
    Record,
    RunFinished,
    RunProgress,
    RunStarted,
    Scope,
    SinkEvent,
    Source,
)
from ringtrace.sinks import FanOut

from ._trace_writer import (
    CONT,
    EV_NAME,
    INSTANT,
    SMALL,
    TraceFile,
    annotation_prefixes,
    field_bytes,
    framed_message,
    varint,
)

log = logging.getLogger("ringtrace.sinks.perfetto")

Format = Literal["proto", "chrome-json"]
TIME_AXIS = ("time axis: 1 ns = 1 boundary record; timestamps are line numbers in the scope_stats file "
             "(records carry no timestamps)")
JSON_TIME_AXIS = TIME_AXIS.replace("1 ns", "1 us")

# Debug annotation names, interned on every ring sequence with these iids.
ARG_NAMES: tuple[str, ...] = (
    "depth", "line",
    *(f"{res}_{what}" for res in RESOURCES for what in ("high_water", "live_at_exit", "alloc")),
    "wedged", "unmatched_begin", "open_at_close",
)
IID_DEPTH, IID_LINE = 1, 2
IID_USAGE = 3  # + 3 * resource index + (0 high_water, 1 live_at_exit, 2 alloc)
IID_WEDGED, IID_UNMATCHED, IID_OPEN_AT_CLOSE = 12, 13, 14
_UNITS = {"task_window": "tasks", "heap": "bytes", "dep_pool": "entries"}


class _Ring:
    """One ring of one source: its packet sequence, tracks and interned site names."""

    __slots__ = ("extra", "has_dp", "names", "ring", "seq", "seq_len", "uuid")

    def __init__(self, ring: int, seq: bytes, uuid: int, has_dp: bool) -> None:
        self.ring = ring
        self.seq = seq  # the encoded trusted_packet_sequence_id field
        self.seq_len = len(seq)
        self.uuid = uuid
        self.has_dp = has_dp
        self.names: dict[str, bytes] = {}  # site -> encoded name_iid field
        self.extra = b""  # encoded extra_counter_track_uuids of the ring's resources (no tensormap)


class _Run:
    """One source's state while it is written: O(depth) (the open-scope stack) + O(rings)."""

    def __init__(self, source: Source, meta: Meta | None, uuid: int, tm_uuid: int) -> None:
        self.source = source
        self.meta = meta
        self.uuid = uuid
        self.tm_uuid = tm_uuid
        self.rings: dict[int, _Ring] = {}
        self.stack: list[tuple[int, int, str, int]] = []  # open scopes: (line, ring, site, depth)
        self.last_line = 0
        self.labels: list[str] = []
        self.description = ""


def _event_line(ev: PairEvent) -> int:
    """The line of the record that caused ``ev``."""
    return ev.end_line if isinstance(ev, Scope) else ev.line


def sort_key(source: Source) -> tuple[str, int, int, str, int]:
    """Rank order: run, rank, dispatch (numbers), then path and generation."""
    lab = source.labels
    rank = int(lab.rank) if lab.rank.isdigit() else -1
    disp = int(lab.dispatch) if lab.dispatch.isdigit() else -1
    return (lab.run, rank, disp, source.path, source.generation)


def process_name(source: Source) -> str:
    return source.name + (f" (generation {source.generation})" if source.generation else "")


def run_status(source: Source, meta: Meta | None, fin: RunFinished | None) -> tuple[list[str], str]:
    """Process labels and description: version, fatal, dropped, completeness, wedge."""
    labels: list[str] = []
    text = [f"scope_stats of {source.path}", TIME_AXIS]
    if meta is not None:
        labels.append(f"version {meta.version}")
        if meta.fatal:
            labels.append("FATAL")
        if meta.dropped:
            labels.append(f"DROPPED {meta.dropped} records")
        text.append(f"version {meta.version}, fatal {str(meta.fatal).lower()}, dropped {meta.dropped}, "
                    f"total {meta.total}")
    else:
        labels.append("no metadata line")
    if fin is None:
        labels.append("UNFINISHED (trace closed before the run ended)")
        return labels, "; ".join(text)
    s = fin.summary
    if not s.complete:
        total = "?" if meta is None or meta.total is None else str(meta.total - meta.dropped)
        labels.append(f"INCOMPLETE {s.records} of {total} records")
    if s.wedged:
        w = s.wedged[-1]
        labels.append(f"WEDGED in {w.site} (line {w.line}, ring {w.ring})")
    text.append(f"records {s.records}, complete {str(s.complete).lower()}, scopes {s.scopes}, "
                f"unmatched begins {s.unmatched_begins}, unmatched ends {s.unmatched_ends}, "
                f"parse errors {s.parse_errors}, max depth {s.max_depth}, wedged scopes {len(s.wedged)}, "
                f"finished: {fin.reason}")
    text.extend(f"{f.severity} {f.rule}: {f.message}" for f in fin.findings)
    return labels, "; ".join(text)


def _cap_text(meta: Meta | None, resource: str, ring: int) -> str:
    cap = meta.capacity(resource, ring) if meta is not None else None
    return "cap ?" if cap is None else f"cap {fmt_amount(resource, cap)}"


class ProtoTrace:
    """Encodes sink events of any number of sources into one :class:`TraceFile`.

    ``pid_of`` gives each finished run its pid when its process descriptor is written; with
    ``defer_processes`` those descriptors wait for :meth:`close` (so pids can follow the rank
    order of every source in the trace).
    """

    def __init__(self, out: TraceFile, defer_processes: bool = False) -> None:
        self.out = out
        self.defer = defer_processes
        self.runs: dict[Source, _Run] = {}
        self.done: list[_Run] = []  # finished runs whose process descriptor is deferred
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

    def _start(self, source: Source, meta: Meta | None) -> _Run:
        run = _Run(source, meta, self._uuid(), self._uuid())
        self.runs[source] = run
        tm = pb.TrackDescriptor(uuid=run.tm_uuid, parent_uuid=run.uuid, sibling_order_rank=10_000,
                                name=f"tensormap (cap {meta.tensormap_max if meta and meta.tensormap_max else '?'})",
                                description=f"live tensormap entries at each boundary record; {TIME_AXIS}",
                                counter=pb.CounterDescriptor(unit=pb.CounterDescriptor.UNIT_COUNT,
                                                             unit_name="entries"))
        self.out.parts.append(framed_message(pb.TracePacket(track_descriptor=tm)))
        return run

    def _new_ring(self, run: _Run, rec: Record) -> _Ring:
        r = rec.ring
        has_dp = rec.dep_pool_end is not None
        seq = self._seq()
        ring = _Ring(r, b"\x50" + varint(seq), self._uuid(), has_dp)
        run.rings[r] = ring
        meta = run.meta
        counters: list[int] = []
        packets: list[pb.TracePacket] = []
        for i, res in enumerate(RESOURCES):
            if res == "dep_pool" and not has_dp:
                continue
            uuid = self._uuid()
            counters.append(uuid)
            unit = pb.CounterDescriptor.UNIT_SIZE_BYTES if res == "heap" else pb.CounterDescriptor.UNIT_COUNT
            cap = meta.capacity(res, r) if meta is not None else None
            desc = (f"live {res} on ring {r}: head - tail at each boundary record of the ring; "
                    f"capacity {cap if cap is not None else 'unknown'} {_UNITS[res]}; {TIME_AXIS}")
            packets.append(pb.TracePacket(trusted_packet_sequence_id=seq, track_descriptor=pb.TrackDescriptor(
                uuid=uuid, parent_uuid=run.uuid, name=f"ring {r} {res} ({_cap_text(meta, res, r)})",
                description=desc, sibling_order_rank=1000 + 10 * r + i,
                counter=pb.CounterDescriptor(unit=unit, unit_name=_UNITS[res]))))
        ring.extra = b"".join(b"\xf8\x01" + varint(u) for u in counters)
        counters.append(run.tm_uuid)
        first = pb.TracePacket(
            trusted_packet_sequence_id=seq,
            sequence_flags=pb.TracePacket.SEQ_INCREMENTAL_STATE_CLEARED,
            track_descriptor=pb.TrackDescriptor(
                uuid=ring.uuid, parent_uuid=run.uuid, name=f"ring {r}", sibling_order_rank=r,
                description=f"scopes on ring {r} as nested slices (name = site); {TIME_AXIS}"),
            trace_packet_defaults=pb.TracePacketDefaults(track_event_defaults=pb.TrackEventDefaults(
                track_uuid=ring.uuid, extra_counter_track_uuids=counters)),
            interned_data=pb.InternedData(debug_annotation_names=[
                pb.DebugAnnotationName(iid=i + 1, name=n) for i, n in enumerate(ARG_NAMES)]))
        parts = self.out.parts
        parts.append(framed_message(first))
        parts.extend(framed_message(p) for p in packets)
        return ring

    def _intern(self, ring: _Ring, site: str) -> tuple[bytes, bytes]:
        """A new site on ``ring``'s sequence: its encoded name_iid field and the interned_data field to add."""
        code = len(ring.names) + 1
        iid = ring.names[site] = b"\x50" + varint(code)
        entry = b"\x08" + varint(code) + field_bytes(b"\x12", site.encode())
        return iid, field_bytes(b"\x62", field_bytes(b"\x12", entry))

    def _progress(self, run: _Run, ev: RunProgress) -> None:
        """One packet per record (slice begin/end or counters) plus ends of abandoned scopes.

        The hot loop of the sink: varints of small values come from a table, everything is
        local, and pair events are matched to their record by line.
        """
        records = ev.records
        if not records:
            return
        self.records += len(records)
        app = self.out.parts.append
        rings = run.rings
        stack = run.stack
        events = ev.events
        ne = len(events)
        ei = 0
        ev_line = _event_line(events[0]) if ne else -1
        S = SMALL
        C = CONT
        V = varint
        ann = self._ann
        a_depth, a_line = ann[IID_DEPTH], ann[IID_LINE]
        a_usage = ann[IID_USAGE:IID_USAGE + 3 * len(RESOURCES)]
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
                        self._end_open(run, pe.scope.line, line, IID_UNMATCHED)
                    ei += 1
                    ev_line = _event_line(events[ei]) if ei < ne else -1
                    if ev_line != line:
                        break
            x = rec.task_window_end - rec.task_window_start
            a = S[x] if 0 <= x < 16384 else C[x & 16383] + S[x >> 14] if 0 < x < 268435456 else V(x)
            x = rec.heap_end - rec.heap_start
            b = S[x] if 0 <= x < 16384 else C[x & 16383] + S[x >> 14] if 0 < x < 268435456 else V(x)
            if ring.has_dp:
                x = (rec.dep_pool_end or 0) - (rec.dep_pool_start or 0)
                c = S[x] if 0 <= x < 16384 else C[x & 16383] + S[x >> 14] if 0 < x < 268435456 else V(x)
                vals = b"`%b`%b`%b" % (a, b, c)
            else:
                vals = b"`%b`%b" % (a, b)
            x = rec.tensormap
            vt = S[x] if 0 <= x < 16384 else C[x & 16383] + S[x >> 14] if 0 < x < 268435456 else V(x)
            ts = S[line] if line < 16384 else C[line & 16383] + S[line >> 14] if line < 268435456 else V(line)
            if rec.phase == "begin":
                site = rec.site
                stack.append((line, r, site, rec.depth))
                iid = ring.names.get(site)
                interned = b""
                if iid is None:
                    iid, interned = self._intern(ring, site)
                te = b"H\x01%b%b`%b" % (iid, vals, vt)
            elif closing is not None and stack and stack[-1][0] == closing.begin_line and stack[-1][1] == r:
                stack.pop()
                interned = b""
                x = closing.depth
                a = S[x] if 0 <= x < 16384 else C[x & 16383] + S[x >> 14] if 0 < x < 268435456 else V(x)
                x = closing.begin_line
                b = S[x] if 0 <= x < 16384 else C[x & 16383] + S[x >> 14] if 0 < x < 268435456 else V(x)
                parts = [b"H\x02", vals, b"`", vt, a_depth[len(a)], a, a_line[len(b)], b]
                k = 0
                for u in closing.usage:
                    if u is not None:
                        x = u.high_water
                        a = S[x] if 0 <= x < 16384 else C[x & 16383] + S[x >> 14] if 0 < x < 268435456 else V(x)
                        x = u.live_at_exit
                        b = S[x] if 0 <= x < 16384 else C[x & 16383] + S[x >> 14] if 0 < x < 268435456 else V(x)
                        x = u.alloc
                        c = S[x] if 0 <= x < 16384 else C[x & 16383] + S[x >> 14] if 0 < x < 268435456 else V(x)
                        parts += (a_usage[k][len(a)], a, a_usage[k + 1][len(b)], b, a_usage[k + 2][len(c)], c)
                    k += 3
                te = b"".join(parts)
            else:
                interned = b""
                if closing is not None:  # its begin is on another ring (odd data): end it there
                    self._end_open(run, closing.begin_line, line, 0)
                te = b"H\x04X%b\xf0\x01%b%b%b" % (V(run.tm_uuid), vt, ring.extra, vals)
            n = len(te)
            lte = S[n] if n < 16384 else V(n)
            n += 2 + len(ts) + ring.seq_len + len(lte) + len(interned)
            app(b"\n%b@%b%bZ%b%b%b" % (S[n] if n < 16384 else V(n), ts, ring.seq, lte, te, interned))
        run.last_line = records[-1].line

    def _end_open(self, run: _Run, begin_line: int, at: int, flag_iid: int, extra: bytes = b"") -> None:
        """End the open scope that began at ``begin_line`` (and, defensively, any opened after it)."""
        stack = run.stack
        idx = next((i for i in range(len(stack) - 1, -1, -1) if stack[i][0] == begin_line), None)
        if idx is None:
            return
        while len(stack) > idx:
            line, r, _site, depth = stack.pop()
            ring = run.rings[r]
            ann = self._ann
            te = (b"\x48\x02" + ann[IID_DEPTH][len(v := varint(depth))] + v
                  + ann[IID_LINE][len(v := varint(line))] + v)
            if flag_iid:
                te += ann[flag_iid][1] + b"\x01"
            te += extra
            pkt = b"\x40" + varint(at) + ring.seq + b"\x5a" + varint(len(te)) + te
            self.out.parts.append(b"\x0a" + varint(len(pkt)) + pkt)

    def _instant(self, run: _Run, ring: _Ring, at: int, name: str, line: int, depth: int) -> None:
        ann = self._ann
        te = (b"\x48" + varint(INSTANT) + field_bytes(EV_NAME, name.encode())
              + ann[IID_DEPTH][len(v := varint(depth))] + v + ann[IID_LINE][len(v := varint(line))] + v)
        pkt = b"\x40" + varint(at) + ring.seq + b"\x5a" + varint(len(te)) + te
        self.out.parts.append(b"\x0a" + varint(len(pkt)) + pkt)

    def _close_open(self, run: _Run, flag_iid: int) -> None:
        """End every open scope at the final tick (last record + 1); WEDGED inside the innermost."""
        if not run.stack:
            return
        at = run.last_line + 1
        line, r, _site, depth = run.stack[-1]
        if flag_iid == IID_WEDGED:
            self._instant(run, run.rings[r], at, "WEDGED", line, depth)
        self._end_open(run, run.stack[0][0], at, flag_iid)

    def _finish(self, run: _Run, fin: RunFinished | None) -> None:
        self._close_open(run, IID_WEDGED if fin is not None else IID_OPEN_AT_CLOSE)
        if fin is not None and fin.summary.meta is not None:
            run.meta = fin.summary.meta
        run.labels, run.description = run_status(run.source, run.meta, fin)
        del self.runs[run.source]
        if self.defer:
            self.done.append(run)
        else:
            lab = run.source.labels.rank
            self._process(run, int(lab) + 1 if lab.isdigit() else 1)

    def _process(self, run: _Run, pid: int) -> None:
        desc = pb.TrackDescriptor(
            uuid=run.uuid, description=run.description, child_ordering=pb.TrackDescriptor.EXPLICIT,
            process=pb.ProcessDescriptor(pid=pid, process_name=process_name(run.source),
                                         process_labels=run.labels))
        self.out.parts.append(framed_message(pb.TracePacket(track_descriptor=desc)))

    def close(self) -> None:
        """End runs that never finished, write deferred process descriptors (pids in rank order)."""
        for run in list(self.runs.values()):
            self._finish(run, None)
        for pid, run in enumerate(sorted(self.done, key=lambda r: sort_key(r.source)), start=1):
            self._process(run, pid)
        self.done.clear()


class JsonTrace:
    """The same layout as Chrome JSON trace events (``B``/``E`` slices, ``C`` counters, ``M`` names).

    Streams too (events are written as they come; the array is closed by :meth:`close`), but
    the JSON importer holds a whole trace in memory and the text is ~6x bigger than protobuf:
    meant for small traces.  1 us of trace time is one record (``ts`` = line number).
    """

    def __init__(self, out: IO[str], defer_processes: bool = False) -> None:
        self.fh = out
        self.defer = defer_processes
        self.runs: dict[Source, _Run] = {}
        self.done: list[_Run] = []
        self._next = 0
        self._first = True
        self.records = 0
        out.write('{"displayTimeUnit": "ns", "traceEvents": [\n')

    def _emit(self, obj: dict[str, object]) -> None:
        self.fh.write(("" if self._first else ",\n") + json.dumps(obj, separators=(",", ":")))
        self._first = False

    def receive(self, event: SinkEvent) -> None:
        run = self.runs.get(event.source)
        if run is None:
            meta = event.meta if isinstance(event, RunStarted) else (
                event.summary.meta if isinstance(event, RunFinished) else None)
            self._next += 1
            run = self.runs[event.source] = _Run(event.source, meta, self._next, 0)
        if isinstance(event, RunStarted) and run.meta is None:
            run.meta = event.meta
        elif isinstance(event, RunProgress):
            self._progress(run, event)
        elif isinstance(event, RunFinished):
            self._finish(run, event)

    def _progress(self, run: _Run, ev: RunProgress) -> None:
        pid = run.uuid
        emit = self._emit
        events = ev.events
        ei, ne = 0, len(events)
        self.records += len(ev.records)
        for rec in ev.records:
            line = rec.line
            if rec.ring not in run.rings:
                run.rings[rec.ring] = _Ring(rec.ring, b"", 0, rec.dep_pool_end is not None)
                emit({"ph": "M", "pid": pid, "tid": rec.ring + 1, "name": "thread_name",
                      "args": {"name": f"ring {rec.ring}"}})
                emit({"ph": "M", "pid": pid, "tid": rec.ring + 1, "name": "thread_sort_index",
                      "args": {"sort_index": rec.ring}})
            closing: Scope | None = None
            while ei < ne:
                pe = events[ei]
                if isinstance(pe, Scope):
                    if pe.end_line != line:
                        break
                    closing = pe
                elif isinstance(pe, Abandoned):
                    if pe.line != line:
                        break
                    self._end_open(run, pe.scope.line, line, "unmatched_begin")
                elif pe.line != line:  # UnmatchedEnd
                    break
                ei += 1
            if rec.phase == "begin":
                run.stack.append((line, rec.ring, rec.site, rec.depth))
                emit({"ph": "B", "pid": pid, "tid": rec.ring + 1, "ts": line, "name": rec.site})
            elif closing is not None:
                args: dict[str, object] = {"depth": closing.depth, "line": closing.begin_line}
                for res, u in zip(RESOURCES, closing.usage, strict=False):
                    if u is not None:
                        args.update({f"{res}_high_water": u.high_water, f"{res}_live_at_exit": u.live_at_exit,
                                     f"{res}_alloc": u.alloc})
                if run.stack and run.stack[-1][0] == closing.begin_line:
                    run.stack.pop()
                    emit({"ph": "E", "pid": pid, "tid": rec.ring + 1, "ts": line, "args": args})
                else:
                    self._end_open(run, closing.begin_line, line, "")
            live = {"task_window": rec.task_window_end - rec.task_window_start, "heap": rec.heap_end - rec.heap_start}
            if rec.dep_pool_end is not None:
                live["dep_pool"] = rec.dep_pool_end - (rec.dep_pool_start or 0)
            emit({"ph": "C", "pid": pid, "ts": line, "name": f"ring {rec.ring}", "args": live})
            emit({"ph": "C", "pid": pid, "ts": line, "name": "tensormap", "args": {"entries": rec.tensormap}})
        if ev.records:
            run.last_line = ev.records[-1].line

    def _end_open(self, run: _Run, begin_line: int, at: int, flag: str) -> None:
        stack = run.stack
        idx = next((i for i in range(len(stack) - 1, -1, -1) if stack[i][0] == begin_line), None)
        if idx is None:
            return
        while len(stack) > idx:
            line, r, _site, depth = stack.pop()
            args: dict[str, object] = {"depth": depth, "line": line}
            if flag:
                args[flag] = True
            self._emit({"ph": "E", "pid": run.uuid, "tid": r + 1, "ts": at, "args": args})

    def _finish(self, run: _Run, fin: RunFinished | None) -> None:
        if run.stack:
            at = run.last_line + 1
            line, r, _site, depth = run.stack[-1]
            if fin is not None:
                self._emit({"ph": "i", "s": "t", "pid": run.uuid, "tid": r + 1, "ts": at, "name": "WEDGED",
                            "args": {"depth": depth, "line": line}})
            self._end_open(run, run.stack[0][0], at, "wedged" if fin is not None else "open_at_close")
        if fin is not None and fin.summary.meta is not None:
            run.meta = fin.summary.meta
        run.labels, run.description = run_status(run.source, run.meta, fin)
        run.description = run.description.replace(TIME_AXIS, JSON_TIME_AXIS)
        del self.runs[run.source]
        self.done.append(run)
        if not self.defer:
            self._processes()

    def _processes(self) -> None:
        for rank, run in enumerate(sorted(self.done, key=lambda r: sort_key(r.source))):
            pid = run.uuid
            self._emit({"ph": "M", "pid": pid, "name": "process_name", "args": {"name": process_name(run.source)}})
            self._emit({"ph": "M", "pid": pid, "name": "process_sort_index", "args": {"sort_index": rank}})
            self._emit({"ph": "M", "pid": pid, "name": "process_labels", "args": {"labels": ", ".join(run.labels)}})
            self._emit({"ph": "i", "s": "p", "pid": pid, "tid": 0, "ts": 1, "name": "run",
                        "args": {"description": run.description}})
        self.done.clear()

    def close(self) -> None:
        for run in list(self.runs.values()):
            self._finish(run, None)
        self._processes()
        self.fh.write(f'\n], "metadata": {{"ringtrace": {json.dumps(JSON_TIME_AXIS)}}}}}\n')


class _Output:
    """A trace file and its encoder (protobuf or JSON), written atomically (temp file + rename)."""

    def __init__(self, path: Path, fmt: Format, defer_processes: bool) -> None:
        self.path = path
        self.fmt = fmt
        self.tf: TraceFile | None = None
        self.enc: ProtoTrace | JsonTrace
        if fmt == "proto":
            self.tf = TraceFile(path)
            self.enc = ProtoTrace(self.tf, defer_processes)
            self.tmp = self.tf.tmp
        else:
            self.tmp = path.with_suffix(path.suffix + ".tmp")
            self.fh = self.tmp.open("w", encoding="utf-8")
            self.enc = JsonTrace(self.fh, defer_processes)

    def receive(self, event: SinkEvent) -> None:
        self.enc.receive(event)

    def flush(self) -> None:
        if self.tf is not None:
            self.tf.flush()
        else:
            self.fh.flush()

    def commit(self) -> None:
        self.enc.close()
        if self.tf is not None:
            self.tf.commit()
        else:
            self.fh.close()
            self.tmp.replace(self.path)

    def abort(self) -> None:
        if self.tf is not None:
            self.tf.abort()
        else:
            self.fh.close()
            self.tmp.unlink(missing_ok=True)


class PerfettoSink:
    """Every source it receives, in one trace at ``path`` (``convert``).

    Streams into ``path.with_suffix(path.suffix + ".tmp")`` and renames it to ``path`` in
    :meth:`close`.  The temp file is created by the constructor (OSError if it cannot be);
    a later write error is logged, stops the sink and is raised again from :meth:`close`
    (the fan-out counts it); the temp file is then removed and ``path`` left untouched.
    """

    name = "perfetto"

    def __init__(self, path: Path, fmt: Format = "proto") -> None:
        self.path = Path(path)
        self._out: _Output | None = _Output(self.path, fmt, defer_processes=True)
        self.error: OSError | None = None

    def _fail(self, err: OSError) -> None:
        log.error("perfetto: cannot write %s: %s", self.path, err)
        self.error = err
        if self._out is not None:
            with contextlib.suppress(OSError):
                self._out.abort()
            self._out = None

    def receive(self, event: SinkEvent) -> None:
        if self._out is None:
            return
        try:
            self._out.receive(event)
        except OSError as err:
            self._fail(err)

    def flush(self) -> None:
        if self._out is None:
            return
        try:
            self._out.flush()
        except OSError as err:
            self._fail(err)

    def close(self) -> None:
        if self._out is not None:
            try:
                self._out.commit()
            except OSError as err:
                self._fail(err)
            self._out = None
        if self.error is not None:
            raise self.error


_UNSAFE = re.compile(r"[^A-Za-z0-9._-]+")


def trace_file_name(source: Source, fmt: Format = "proto") -> str:
    """``<run>[-rank<N>][-d<K>][-g<generation>].pftrace`` (``.json`` for chrome-json).

    Without a run label the name is made from the file's path (its directories joined by ``_``).
    """
    lab = source.labels
    base = lab.run or str(Path(source.path).with_suffix("")).strip("/")
    name = _UNSAFE.sub("_", base).strip("._") or "trace"
    if lab.rank:
        name += f"-rank{lab.rank}"
    if lab.dispatch:
        name += f"-d{lab.dispatch}"
    if source.generation:
        name += f"-g{source.generation}"
    return name[-200:] + (".pftrace" if fmt == "proto" else ".json")


class PerfettoDirSink:
    """One trace per finished run in ``directory`` (``watch --perfetto-dir``).

    Each run streams into its own temp file (``<name>.tmp``), renamed to :func:`trace_file_name`
    when its :class:`RunFinished` arrives.  Memory O(depth) per open run.  Never raises: a run
    whose file cannot be written is logged, counted in ``errors`` and dropped.  :meth:`close`
    finishes runs still open (their slices end at their last record, marked ``open_at_close``).
    """

    name = "perfetto-dir"

    def __init__(self, directory: Path, fmt: Format = "proto",
                 on_written: Callable[[Path], None] | None = None) -> None:
        self.directory = Path(directory)
        self.fmt = fmt
        self.on_written = on_written
        self._open: dict[Source, _Output] = {}
        self.written: list[Path] = []
        self.errors = 0

    def receive(self, event: SinkEvent) -> None:
        src = event.source
        out = self._open.get(src)
        try:
            if out is None:
                self.directory.mkdir(parents=True, exist_ok=True)
                out = self._open[src] = _Output(self.directory / trace_file_name(src, self.fmt), self.fmt, False)
            out.receive(event)
            if isinstance(event, RunFinished):
                del self._open[src]
                out.commit()
                self.written.append(out.path)
                if self.on_written is not None:
                    self.on_written(out.path)
        except OSError as err:
            self.errors += 1
            log.error("perfetto: cannot write the trace of %s: %s", src.path, err)
            dead = self._open.pop(src, out)
            if dead is not None:
                with contextlib.suppress(OSError):
                    dead.abort()

    def flush(self) -> None:
        for out in self._open.values():
            try:
                out.flush()
            except OSError as err:
                log.error("perfetto: cannot flush %s: %s", out.tmp, err)

    def close(self) -> None:
        for src, out in list(self._open.items()):
            del self._open[src]
            try:
                out.commit()
                self.written.append(out.path)
            except OSError as err:
                self.errors += 1
                log.error("perfetto: cannot write %s: %s", out.path, err)


def convert(files: list[Path], out: Path, fmt: Format = "proto", thresholds: Thresholds | None = None) -> list[str]:
    """Read ``files`` into one trace at ``out`` (``ringtrace convert``); returns error messages.

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
